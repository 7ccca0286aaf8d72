// Activation-aware sparse approximation of one module (paper appendix "Sparse Matrix", sec:spa): the
// sparse D minimising the activation loss ‖(W − D)·C^½‖_F² = tr((W − D)·C·(W − D)ᵀ) under ‖D‖₀ ≤ κ, with
// the FULL input second moment C = Σ x·xᵀ, and the published baselines that keep only its diagonal
// (C → C ⊙ I: Wanda's score, SparseGPT's mask selection). Pure functions of a weight and statistics, in
// double. W: [d', d], C: [d, d], every result D: [d', d] with zeros where it is pruned.
#pragma once

#include <cstdint>
#include <string_view>

#include "latentllm/compress.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// The sparsity asked of a module: `sparsity` of its entries zero in the pattern.
struct SparseTarget {
  double sparsity = 0.5;  // in (0, 1); 2:4 reaches 0.5 exactly
  SparsePattern pattern = SparsePattern::Unstructured;
};

// Entries pruned in each row, p = ⌊sparsity·d⌋ (Wanda's count), so that every method at the same target
// keeps the same number d'·(d − p) of entries (2:4: d/2 per row).
std::int64_t pruned_per_row(std::int64_t in, const SparseTarget& t);

// The hard shrinkage S_κ (sec:spa): V with only its κ = d'·(d − p) entries of largest magnitude kept,
// over the whole matrix (unstructured), or the 2 largest of each group of 4 consecutive inputs of a row
// (2:4). Ties go to the lower index (row-major), so the result is the same on every platform.
MatrixD hard_shrink(const MatrixD& v, const SparseTarget& t);

// --solver hard: the paper's hard-shrinkage iteration (sec:spa, "Hardshrink works best"): gradient steps
// on the activation loss, each followed by S_κ, D_k = S_κ[D_{k−1} − (D_{k−1} − W)·C / λ_max(C)] (the step
// 1/L of the loss's Lipschitz constant, so the loss never rises), from Wanda's mask of W; then the kept
// entries refitted on that support by conjugate gradients (the fixed point the iteration tends to).
// `iters` bounds both. `context` names the module in errors. `start` ([d', d], at most κ non-zeros in the
// pattern), when given, replaces Wanda's mask as the first iterate: the result's loss is then at most
// the start's (the low rank + sparse alternation warm-starts each sparse step from the last).
MatrixD sparse_hard(const MatrixD& w, const MatrixD& c, const SparseTarget& t, int iters, std::string_view context,
                    const MatrixD* start = nullptr);

// --solver fista: FISTA on ‖(W − D)·C^½‖² + λ‖D‖₁ with the update of sec:spa (a gradient step, the soft
// shrinkage T, Nesterov's momentum), `iters` steps per λ; λ searched by bisection for the smallest
// threshold whose result keeps at most κ entries; no refit (the paper has none). Unstructured only.
MatrixD sparse_fista(const MatrixD& w, const MatrixD& c, const SparseTarget& t, int iters, std::string_view context);

// Wanda (Sun et al. 2023): score |W_ij|·‖X_j‖₂ with ‖X_j‖₂² = C_jj, the p lowest of each output row set
// to zero (2:4: the 2 lowest of each group of 4), no update of the rest.
MatrixD wanda(const MatrixD& w, const MatrixD& c, const SparseTarget& t, std::string_view context);

// SparseGPT (Frantar & Alistarh 2023): the OBS column sweep on H = C + λ·mean(diag C)·I with the upper
// Cholesky factor U of H⁻¹, in blocks of 128 columns; the mask of each block chosen when the sweep enters
// it by the score w²/U_jj² (the p·128/d lowest of each row: sparsegpt.py's mask selection blocks; 2:4 per
// group of 4), each pruned weight's error spread onto the later columns.
MatrixD sparsegpt(const MatrixD& w, const MatrixD& c, const SparseTarget& t, double lambda_rel,
                  std::string_view context);

// The activation loss tr((W − D)·C·(W − D)ᵀ) in double: the objective every solver above is judged by.
double sparse_loss(const MatrixD& w, const MatrixD& d, const MatrixD& c);

}  // namespace latentllm::compress
