// Low rank plus sparse approximation of one module (paper appendix "Sparse Matrix", sec:spa): Ŵ = B·A + D
// with rank(B·A) ≤ r and ‖D‖₀ ≤ κ, fitted to the activation loss tr((W − Ŵ)·C·(W − Ŵ)ᵀ) by alternation:
// given D, B·A is the truncated SVD of (W − D)·P with the damped root covariance P = (C + λI)^½ (the local
// ASVD of asvd.hpp); given B·A, D is the hard-shrinkage solution on W − B·A with the full C (sparse.hpp).
// And the split of one byte budget between the factors and D. Pure functions, in double.
// W: [d', d], C: [d, d].
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "compress/math/sparse.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// Alternations of the two steps after the sparse start.
inline constexpr int kLowRankSparseAlternations = 4;
// The fractions of a module's byte budget tried for the factors (0: D alone, the pure sparse solution).
inline constexpr std::array<double, 4> kLowRankSparseSplits = {0.0, 0.25, 0.5, 0.75};
// Bytes of one stored value of the budget (16-bit, as the low-rank methods count their factors).
inline constexpr int kLowRankSparseValueBytes = 2;

struct LowRankSparseOptions {
  SparseSolver solver = SparseSolver::Hard;  // the sparse step
  int iters = 100;                           // the sparse solver's iterations
  double lambda_rel = kDefaultLambdaRel;     // the damping of P
  int alternations = kLowRankSparseAlternations;
};

struct LowRankSparse {
  MatrixD ba;                 // [d', d] B·A (zero at rank 0)
  MatrixD d;                  // [d', d] the sparse part, zeros where pruned
  int rank = 0;
  std::vector<double> loss;   // the activation loss at the start (D alone) and after each alternation
  double split = 0;           // the fraction of the budget given to the factors (lowrank_sparse_budget)
  MatrixD dense() const { return ba + d; }  // [d', d] Ŵ
};

// The alternation at rank r (0 ≤ r ≤ min(d', d)) and D's target t (unstructured): D₀ = sparse(W) (B·A = 0),
// then `alternations` times B·A ← svd_r[(W − D)·P]·P⁺, D ← sparse(W − B·A) from the last D (hard; fista
// from its own start). A step whose result has a higher loss than the current one is not taken, so the
// loss never rises; at r = 0 the result is the sparse solver's. `context` names the module in errors.
LowRankSparse lowrank_sparse(const MatrixD& w, const MatrixD& c, int rank, const SparseTarget& t,
                             const LowRankSparseOptions& o, std::string_view context);

// One split of a module's budget: the rank and the entries D keeps in each row.
struct LowRankSparseSplit {
  double fraction = 0;        // of the budget to the factors
  int rank = 0;
  std::int64_t keep_per_row = 0;
};

// The budget of `--ratio` S: the bytes pure sparse at sparsity S takes (eval::sparse_storage_bytes of its
// d'·(d − ⌊S·d⌋) values, 16-bit), split as `fraction` to r(d' + d) 16-bit factor parameters (r rounded down)
// and the rest to D (the most entries per row whose values and positions fit). Returns keep_per_row 0
// when the split leaves D nothing.
LowRankSparseSplit lowrank_sparse_split(std::int64_t out, std::int64_t in, double sparsity, double fraction);

// The target that keeps `keep_per_row` entries of each row of a [d', d] module (1 ≤ keep ≤ d).
SparseTarget keep_target(std::int64_t in, std::int64_t keep_per_row);

// The alternation at every split of kLowRankSparseSplits (distinct ranks only), the one of lowest final
// loss kept (ties: the smaller rank), for --ratio `sparsity`.
LowRankSparse lowrank_sparse_budget(const MatrixD& w, const MatrixD& c, double sparsity, const LowRankSparseOptions& o,
                                    std::string_view context);

}  // namespace latentllm::compress
