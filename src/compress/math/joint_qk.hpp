// Joint Q-K compression (LatentLLM §"Multi-head latent attention: Joint QK SVD", Algorithm 1, and the
// appendices "Grouped Query Attention", "Bias Update", "Multiplicative PE").
//
// Per query head i with its kv head g(i) = i / (H/H_kv), the attention map before softmax is
// Xᵀ·W_q,iᵀ·W_k,g·X, and with C = XXᵀ, P = C^{1/2}:  Σ_i ‖Xᵀ(W_q,iᵀW_k,g − M̂_i)X‖² = Σ_i ‖P(…)P‖².
// With G_i = P·W_q,iᵀ·W_k,g·P the optimum over shared compressions A_q = U_qᵀP⁻¹, A_k = U_kᵀP⁻¹ and
// per-head decompressions B_q,i = W_q,i·P·U_q, B_k,g = W_k,g·P·U_k maximizes Σ_i ‖U_qᵀG_iU_k‖²,
// solved by alternating top-eigenvector updates (pair_solver.hpp: solve_pair). Stacked over heads,
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

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compress/math/low_rank.hpp"
#include "compress/math/pair_solver.hpp"
#include "compress/math/whitening.hpp"
#include "graph/graph.hpp"
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
  double tol = 0;                      // --joint-tol: stop the iterations early (solve_pair)
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

// joint_qk in parts, so that its independent eigenproblems can run on different ranks (the joint Q-K
// stage): the problem (the whitening and the whitened weights, cheap), the four starts (each one
// [d, d] eigendecomposition: Algorithm 1's U_q from Σ G Gᵀ and U_k from Σ GᵀG, and the local
// safeguard's subspaces of P·W_qᵀW_q·P and P·W_kᵀW_k·P), and the iterations from them, declared as
// tasks of a graph (declare_qk). joint_qk is qk_problem and those tasks in one process; the stage runs
// the same tasks on the ranks of the run; the parts give the same bits wherever they run.
struct QkProblem {
  bool aug = false;  // solved in the augmented space [x; 1] (biases, bias_aware)
  Whitening wh;      // of C (or C') + λI
  MatrixD qt, kt;    // [H·d_h, d'], [H_kv·d_h, d'] the whitened weights W'·F
  PairProblem pair;  // G_i^(Δ) = (W_q,i·F)ᵀ·R_{−Δ}·(W_k,g·F), kept factored
  VectorD bq, bk;    // the dense biases (kept as they are when not augmented)
};
enum class QkStart { Left, Right, LocalQ, LocalK };
QkProblem qk_problem(const QkDense& w, const model::AttentionInfo& s, const calib::SiteStats& m, const QkOptions& opt,
                     std::string_view context);
// The start `which`: [d', r_q] (Left, LocalQ) or [d', r_k] (Right, LocalK).
MatrixD qk_start(const QkProblem& p, QkStart which, const QkOptions& opt, std::string_view context);
// Algorithm 1 as tasks of g (graph/graph.hpp): the starts Left and Right; the iterations from them
// (qk_refine); with opt.local_safeguard, beside them, the starts LocalQ and LocalK and the solver loss
// there (qk_start_loss); then the choice (the iterations from the local starts when those start lower)
// and the factors (qk_factors), the result. Modelled costs in units of one [d, d] eigendecomposition's
// d³ multiply-adds.
graph::Value<QkResult> declare_qk(graph::Graph& g, std::shared_ptr<const QkProblem> p, const model::AttentionInfo& s,
                                  const QkOptions& opt, const std::string& context);
PairSolution qk_refine(const QkProblem& p, MatrixD u_q, MatrixD u_k, const QkOptions& opt, std::string_view context);
// The solver loss at the subspaces u_q, u_k (before any iteration).
double qk_start_loss(const QkProblem& p, const MatrixD& u_q, const MatrixD& u_k);
// The factors of a solution (A' = Uᵀ·F⁻¹ shared, B = W'·F·U per head), with its loss history.
QkResult qk_factors(const QkProblem& p, const model::AttentionInfo& s, const PairSolution& sol);

// Baseline: q_proj and k_proj each by local root-cov ASVD (with the bias update where there is a bias).
QkFactors separate_qk(const QkDense& w, const calib::SiteStats& m, int r_q, int r_k, double lambda_rel,
                      std::string_view context);


// Attention-map loss against the dense weights from the input moments (exact for the data the moments
// came from; no damping): Σ_i Σ_Δ w_Δ ‖C'^{1/2}(W'_q,iᵀR_{−Δ}W'_k,g − Ŵ'_q,iᵀR_{−Δ}Ŵ'_k,g)C'^{1/2}‖²
// in the augmented space (biases included). Without RoPE only Δ = 0 is used.
double qk_attention_loss(const QkDense& dense, const QkFactors& f, const model::AttentionInfo& s, const calib::SiteStats& m,
                         const RopeWindow& rope = {});
}  // namespace latentllm::compress
