// Joint Q-K compression (LatentLLM §"Multi-head latent attention: Joint QK SVD", Algorithm 1, and the
// appendices "Grouped Query Attention", "Bias Update", "Multiplicative PE").
//
// Per query head i with its kv head g(i) = i / (H/H_kv), the attention map before softmax is
// Xᵀ·W_q,iᵀ·W_k,g·X, and with C = XXᵀ, P = C^{1/2}:  Σ_i ‖Xᵀ(W_q,iᵀW_k,g − M̂_i)X‖² = Σ_i ‖P(…)P‖².
// With G_i = P·W_q,iᵀ·W_k,g·P the optimum over shared compressions A_q = U_qᵀP⁻¹, A_k = U_kᵀP⁻¹ and
// per-head decompressions B_q,i = W_q,i·P·U_q, B_k,g = W_k,g·P·U_k maximizes Σ_i ‖U_qᵀG_iU_k‖²,
// solved by alternating top-eigenvector updates (joint_common.hpp: solve_pair). Stacked over heads,
// q_proj ≈ B_q·A_q and k_proj ≈ B_k·A_k are ordinary factored Linears.
//
// Biases: with bias_aware the problem is solved for the augmented input x' = [x; 1] (C' = X'X'ᵀ,
// W'_q = [W_q | b_q]); A'_q = U_qᵀP'⁻¹ is [r_q, d+1] and its last column a_q is a latent bias, so the
// factored q_proj is B_q·A'_q[:, :d] with bias b̂_q = B_q·a_q. Bias-unaware: solve with C, keep b_q.
//
// RoPE: q and k are rotated after decompression, score(m, n) = q_mᵀ·R_{n−m}·k_n, so the plain
// objective is exact only on the diagonal n = m. The RoPE-aware variant sums the objective over the
// causal offsets Δ = m − n = 0..w with G_i^(Δ) = P·W_q,iᵀ·R_{−Δ}·W_k,g·P (optionally both signs).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "compress/low_rank.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"

namespace latentllm::compress {


// Dense q_proj / k_proj of one layer (HF names: self_attn.q_proj, self_attn.k_proj).
struct QkDense {
  MatrixD wq;  // [H·d_h, d]
  VectorD bq;  // [H·d_h] or empty
  MatrixD wk;  // [H_kv·d_h, d]
  VectorD bk;  // [H_kv·d_h] or empty
};

// Factored q_proj ≈ q.B·q.A (+ q.bias), k_proj ≈ k.B·k.A (+ k.bias).
struct QkFactors {
  LowRank q;  // b: [H·d_h, r_q], a: [r_q, d]
  LowRank k;  // b: [H_kv·d_h, r_k], a: [r_k, d]
};

// Offsets of the RoPE-aware objective and loss: Δ = m − n (query minus key position) in 0..window,
// plus −window..−1 when symmetric (a causal model never attends to later keys, hence the default).
// weights[Δ] multiplies offset ±Δ (empty = all 1). Only used when model::AttentionInfo::rope is set.
struct RopeWindow {
  int window = 0;
  bool symmetric = false;
  std::vector<double> weights;  // [window+1] or empty
};

struct QkOptions {
  int r_q = 0;
  int r_k = 0;
  int iters = 8;                       // --qk-iters (paper: 8)
  double lambda_rel = kDefaultLambdaRel;
  bool bias_aware = true;              // only matters when the module has biases
  RopeWindow rope;                     // window 0 = plain joint Q-K (exact on the diagonal)
  // Also evaluates the start given by the local root-cov subspaces (top eigenvectors of P·W_qᵀW_q·P
  // and P·W_kᵀW_k·P) and, if it is better than the paper's result, refines from it instead, so the
  // joint solution is never worse than separate root-cov compression at the same ranks.
  bool local_safeguard = true;
};

struct QkResult {
  QkFactors f;
  // Solver loss Σ_{i,Δ} w_Δ ‖G_i^(Δ) − Π_q G_i^(Δ) Π_k‖² (damped P): [0] after the initialization,
  // then one per iteration; never increases.
  std::vector<double> loss;
  double loss_local_start = 0;  // the same loss at the local root-cov subspaces
  bool used_local_start = false;
};

QkResult joint_qk(const QkDense& w, const model::AttentionInfo& s, const calib::SiteStats& m, const QkOptions& opt,
                  std::string_view context);

// Baseline: q_proj and k_proj each by local root-cov ASVD (with the bias update where there is a bias).
QkFactors separate_qk(const QkDense& w, const calib::SiteStats& m, int r_q, int r_k, double lambda_rel,
                      std::string_view context);


// Attention-map loss against the dense weights from the input moments (exact for the data the moments
// came from; no damping): Σ_i Σ_Δ w_Δ ‖C'^{1/2}(W'_q,iᵀR_{−Δ}W'_k,g − Ŵ'_q,iᵀR_{−Δ}Ŵ'_k,g)C'^{1/2}‖²
// in the augmented space (biases included). Without RoPE only Δ = 0 is used.
double qk_attention_loss(const QkDense& dense, const QkFactors& f, const model::AttentionInfo& s, const calib::SiteStats& m,
                         const RopeWindow& rope = {});
// The same from the tokens x: [n, d] cut into windows of seqlen tokens (positions 0..seqlen−1):
// Σ_i Σ_pairs (s_i(m, n) − ŝ_i(m, n))², pairs (m, n) in one window with 0 ≤ m − n ≤ window, or all
// pairs when window < 0; scores rotated by RoPE when s.rope.
double qk_attention_loss_exact(const QkDense& dense, const QkFactors& f, const model::AttentionInfo& s, const MatrixD& x,
                               int seqlen, int window);

// ---- Per-head junction and parameter counting -------------------------------------------------
//
// An invertible J [d_h, d_h] between the two decompressions leaves every score unchanged:
// (J·q̂)ᵀ(J⁻ᵀ·k̂) = q̂ᵀk̂. Choosing J so that one side's per-head decompression holds an exact identity
// block (d_h columns chosen by column-pivoted QR for conditioning) saves d_h² parameters per head.
// Query: J_i·B_q,i = [I | …] per query head (MHA only: a kv head shared by a group cannot absorb
// different J_i). Key: J_g⁻ᵀ·B_k,g = [I | …] per kv head, with J_g applied to all query heads of the
// group (works for GQA; saves H_kv·d_h²). NOT valid with RoPE: the rotation between the two sides does
// not commute with J (apply_qk_junction throws ConfigError when s.rope).
enum class QkJunction { None, Query, Key };

struct QkJunctionResult {
  QkFactors f;
  // Per head of the junction side: the d_h columns of that head's B block that hold the identity
  // (identity_cols[h][j] = column holding e_j).
  std::vector<std::vector<int>> identity_cols;
};
QkJunctionResult apply_qk_junction(const QkFactors& f, const model::AttentionInfo& s, QkJunction side, std::string_view context);

// d·(r_q + r_k) + H·d_h·r_q + H_kv·d_h·r_k, minus H·d_h² (Query, r_q ≥ d_h) or H_kv·d_h² (Key, r_k ≥ d_h).
// Biases are not counted.
std::int64_t qk_params(const model::AttentionInfo& s, int r_q, int r_k, QkJunction j);
std::int64_t qk_dense_params(const model::AttentionInfo& s);  // d·(H + H_kv)·d_h

struct QkRankPlan {
  int r_q = 0;
  int r_k = 0;
  QkJunction junction = QkJunction::None;  // the junction the count assumed (None if it cannot apply)
  std::int64_t params = 0;
  std::int64_t dense_params = 0;
};
// The largest common rank r with r_q = min(r, min(d, H·d_h)), r_k = min(r, min(d, H_kv·d_h)) (a rank
// beyond a projection's output size captures nothing) and params ≤ (1 − ratio)·dense. The junction is
// counted only where it applies (its side's rank ≥ d_h). Throws ConfigError if ratio ∉ (0, 1), no rank
// fits, or a junction is asked for with RoPE.
QkRankPlan plan_qk_ranks(const model::AttentionInfo& s, double ratio, QkJunction j);

}  // namespace latentllm::compress
