// Shared pieces of the joint compressors (joint_qk, joint_vo, joint_ud): input moments, the root
// covariance, factored low-rank maps, reduced-rank regression, the local root-covariance solution, and
// the paired-subspace solver behind joint Q-K (Algorithm 1) and the Tucker-2 joint V-O.
//
// Glossary (LatentLLM, Koike-Akino et al. 2025): d = hidden size, n = calibration tokens,
// C = XXᵀ (uncentered input auto-correlation), P = (C + λI)^{1/2} (root covariance),
// λ = lambda_rel · mean(diag C). "Augmented" means the input is extended by a constant 1,
// x' = [x; 1], so that C' = X'X'ᵀ = [[C, s], [sᵀ, n]] with s = Σx (bias-aware solutions).
// All math in double.
#pragma once

#include <string_view>
#include <vector>

#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// Relative damping used when the caller does not choose one: λ = kDefaultLambdaRel · mean(diag C).
inline constexpr double kDefaultLambdaRel = 1e-6;

// First and second moments of one input site (the pipeline's calib::SiteStats carries the same).
struct InputMoments {
  MatrixD xtx;   // [d, d]  Σ_t x_t x_tᵀ (uncentered)
  VectorD sum;   // [d]     Σ_t x_t
  double n = 0;  // tokens

  int dim() const { return static_cast<int>(xtx.rows()); }
  VectorD mean() const;      // [d]
  MatrixD centered() const;  // [d, d]  Σ (x−μ)(x−μ)ᵀ
  MatrixD augmented() const; // [d+1, d+1]  [[C, s], [sᵀ, n]]
};

// Moments of the rows of x: [n, d].
InputMoments moments_of(const MatrixD& x);

// P = (C + λI)^{1/2} and its inverse (through one eigendecomposition).
struct RootCov {
  MatrixD p;      // [d, d]
  MatrixD p_inv;  // [d, d]
};
double damping(const MatrixD& c, double lambda_rel);  // λ = lambda_rel · mean(diag C)
RootCov root_cov(const MatrixD& c, double lambda_rel, std::string_view context);

// A factored linear map y = B·A·x + bias, the form a factored Linear runs.
struct LowRank {
  MatrixD b;     // [out, r]
  MatrixD a;     // [r, in]
  VectorD bias;  // [out], or empty when the module has no bias

  int rank() const { return static_cast<int>(a.rows()); }
  MatrixD dense() const { return b * a; }  // [out, in]
};

// [W | b]: [out, in+1] (b = 0 when empty), the weight acting on the augmented input x' = [x; 1].
MatrixD with_bias_column(const MatrixD& w, const VectorD& b);
// [B·A | bias] of a factored map: [out, in+1].
MatrixD augmented_dense(const LowRank& f);

// Local root-covariance ASVD of one linear module (issue 3): B·A·P = svd_r[W·P], B = U·S, A = Vᵀ·P⁻¹.
// With a bias (non-empty `bias`) P comes from the CENTERED covariance and the bias gets the optimal
// update b̂ = b + (W − B·A)·μ (paper appendix "Bias Update"); without one, from the uncentered C.
// w: [out, in], bias: [out] or empty.
LowRank local_rootcov(const MatrixD& w, const VectorD& bias, const InputMoments& m, int r, double lambda_rel,
                      std::string_view context);

// Reduced-rank regression: argmin over rank-r W (and a free bias b when fit_bias) of
// Σ_t ‖t_t − W·s_t − b‖², from sufficient statistics of sources s [in] and targets t [out]:
// W = svd_r[T̃S̃ᵀ·(S̃S̃ᵀ+λI)^{-1/2}]·(S̃S̃ᵀ+λI)^{-1/2}, with S̃, T̃ centered when fit_bias.
struct RegressionStats {
  MatrixD cross;  // [out, in]  Σ t sᵀ
  MatrixD cov;    // [in, in]   Σ s sᵀ
  VectorD sum_s;  // [in]
  VectorD sum_t;  // [out]
  double n = 0;
};
RegressionStats regression_stats(const MatrixD& s, const MatrixD& t);  // s: [in, n], t: [out, n]
LowRank reduced_rank_regression(const RegressionStats& st, int r, bool fit_bias, double lambda_rel,
                                std::string_view context);

// ---------------------------------------------------------------------------------------------
// Paired-subspace problem (Joint QK, Algorithm 1; also the Tucker-2 joint V-O).
//
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
// Initializes U_l from Σ G Gᵀ (+E) and U_r from Σ GᵀG, then `iters` × (U_r given U_l, U_l given U_r).
PairSolution solve_pair(const PairProblem& p, int r_l, int r_r, int iters, std::string_view context);
// The same iterations from a given start (u_l, u_r); loss[0] is the start's loss.
PairSolution refine_pair(const PairProblem& p, MatrixD u_l, MatrixD u_r, int iters, std::string_view context);

}  // namespace latentllm::compress
