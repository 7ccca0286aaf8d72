// Joint V-O compression (LatentLLM appendix "Joint Value-Output Compression").
//
// Head i contributes W_o,i·W_v,g(i)·(X·a_i) to the attention output (a_i: its attention weights; a
// row sums to 1). Ignoring the attention mixing, its error is measured by H_i = W_o,i·W_v,g·P
// ([d, d]; W_o,i: [d, d_h] columns of o_proj, P = root covariance of the v_proj input). Tucker-2/HOSVD
// over the heads: U_o = top-r_o eigenvectors of Σ H_iH_iᵀ, V = top-r_v eigenvectors of Σ H_iᵀH_i,
// refined by the same alternating updates as joint Q-K (pair_solver.hpp: solve_pair) to maximize
// Σ_i ‖U_oᵀH_iV‖². Then
//   v_proj ≈ B_v·A_v,  A_v = Vᵀ·P⁻¹ [r_v, d] (shared), B_v = W_v·P·V [H_kv·d_h, r_v] (per kv head)
//   o_proj ≈ B_o·A_o,  B_o = U_o [d, r_o] (shared), A_o = U_oᵀ·W_o [r_o, H·d_h] (per head blocks)
// Parameters: d·r_v + H_kv·d_h·r_v + d·r_o + r_o·H·d_h — the same as separate V and O at equal ranks.
//
// Biases: the v bias passes the attention unchanged (rows of the attention sum to 1), so it is folded
// like the q/k biases: the problem is solved for x' = [x; 1] and the last column of A'_v is a latent
// bias, b̂_v = B_v·a_v. The o bias then absorbs the mean output error under the same local (attention
// = identity) approximation: b̂_o = b_o + W_o·z(μ) − Ŵ_o·ẑ(μ), z(μ) = the v outputs at the input mean.
//
// Attention-aware variant (our design, docs/JOINT.md): given the moments of the o_proj INPUT (the
// attention outputs z, C_o = Σ z zᵀ), the output error splits exactly into two orthogonal parts,
// ‖(I − Π_o)·W_o·z‖² + ‖Π_o·W_o·(z − ẑ)‖², Π_o = U_oU_oᵀ. The first is measured exactly by C_o, the
// second by the per-head H_i terms; U_o then maximizes tr(U_oᵀ(W_oC_oW_oᵀ − Σ H_iH_iᵀ)U_o) +
// Σ‖U_oᵀH_iV‖² (the same alternating solver with a left offset), so the O side sees the true
// attention-output statistics including the correlations between heads.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "compress/math/joint_qk.hpp"

namespace latentllm::compress {

// Dense v_proj / o_proj of one layer.
struct VoDense {
  MatrixD wv;  // [H_kv·d_h, d]
  VectorD bv;  // [H_kv·d_h] or empty
  MatrixD wo;  // [d, H·d_h]
  VectorD bo;  // [d] or empty
};

struct VoFactors {
  LowRank v;  // b: [H_kv·d_h, r_v], a: [r_v, d]
  LowRank o;  // b: [d, r_o] (orthonormal U_o in the joint form), a: [r_o, H·d_h]
};

struct VoOptions {
  int r_v = 0;
  int r_o = 0;
  int iters = 8;
  double tol = 0;  // --joint-tol (solve_pair)
  double lambda_rel = kDefaultLambdaRel;
  bool bias_aware = true;
  // Attention-aware variant when set: moments of the o_proj input ([H·d_h]); not owned.
  const calib::SiteStats* o_moments = nullptr;
};

struct VoResult {
  VoFactors f;
  // Solver loss (damped P): Σ_i ‖H_i − Π_o H_i Π_V‖², or the attention-aware objective; [0] after the
  // initialization, then one per iteration; never increases.
  std::vector<double> loss;
};

// m: moments of the v_proj input (the attention block input).
VoResult joint_vo(const VoDense& w, const model::AttentionInfo& s, const calib::SiteStats& m, const VoOptions& opt,
                  std::string_view context);

// Baseline: v_proj by local root-cov from m, o_proj by local root-cov from o_m (both with the bias update).
VoFactors separate_vo(const VoDense& w, const calib::SiteStats& m, const calib::SiteStats& o_m, int r_v, int r_o,
                      double lambda_rel, std::string_view context);


// Σ_t ‖y_t − ŷ_t‖² of the attention-block output (biases included) if every head attended only to its
// own token: a local proxy of the block output error.
double vo_output_loss(const VoDense& dense, const VoFactors& f, const model::AttentionInfo& s, const calib::SiteStats& m);

}  // namespace latentllm::compress
