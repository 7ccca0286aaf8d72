// The paired-subspace solver behind joint Q-K (LatentLLM Algorithm 1) and the Tucker-2 joint V-O.
#pragma once

#include <string_view>
#include <vector>

#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// Terms G_t = sqrt(weight_t) · L[left_t]ᵀ · mid_t · R[right_t], with L[i]: [k, dl], R[g]: [k, dr],
// mid_t: [k, k] (identity when empty; a RoPE rotation otherwise). Finds orthonormal U_l [dl, r_l],
// U_r [dr, r_r] maximizing J = Σ_t ‖U_lᵀ G_t U_r‖² + tr(U_lᵀ·E·U_l) (E: optional symmetric [dl, dl]
// offset, used by the attention-aware V-O), by alternating exact block maximizations (each is a
// top-r eigenproblem), so J never decreases. The reported loss is total − J.
struct PairTerm {
  int left = 0;
  int right = 0;
  MatrixD mid;  // [k, k] or empty (= identity)
  double weight = 1.0;
};
struct PairProblem {
  std::vector<MatrixD> left;   // L[i]: [k, dl]
  std::vector<MatrixD> right;  // R[g]: [k, dr]
  std::vector<PairTerm> terms;
  MatrixD left_offset;         // E: [dl, dl] or empty
  double total_offset = 0;     // added to Σ‖G_t‖² in `total()`
};
// Σ_t w_t‖G_t‖² + total_offset.
double pair_total(const PairProblem& p);
// J(U_l, U_r).
double pair_objective(const PairProblem& p, const MatrixD& u_l, const MatrixD& u_r);
// Σ_t w_t G_t·U_r·U_rᵀ·G_tᵀ (+ E): [dl, dl]. u_r empty means U_r = I (so Σ G Gᵀ).
MatrixD pair_left_gram(const PairProblem& p, const MatrixD& u_r);
// Σ_t w_t G_tᵀ·U_l·U_lᵀ·G_t: [dr, dr]. u_l empty means U_l = I (so Σ GᵀG).
MatrixD pair_right_gram(const PairProblem& p, const MatrixD& u_l);
// Top-r eigenvectors of a symmetric matrix (lower triangle read): [d, r].
MatrixD top_eigenvectors(const MatrixD& s, int r, std::string_view context);

struct PairSolution {
  MatrixD u_l;                // [dl, r_l]
  MatrixD u_r;                // [dr, r_r]
  std::vector<double> loss;   // total − J: [0] after the initialization, then one per iteration
};
// Initializes U_l from Σ G Gᵀ (+E) and U_r from Σ GᵀG, then `iters` × (U_r given U_l, U_l given U_r),
// stopping early once an iteration lowers the loss by at most tol of it (tol 0: always `iters`; the
// loss never rises, so the iterations skipped could lower it by about that much each).
PairSolution solve_pair(const PairProblem& p, int r_l, int r_r, int iters, std::string_view context, double tol = 0);
// The same iterations from a given start (u_l, u_r); loss[0] is the start's loss.
PairSolution refine_pair(const PairProblem& p, MatrixD u_l, MatrixD u_r, int iters, std::string_view context,
                         double tol = 0);

}  // namespace latentllm::compress
