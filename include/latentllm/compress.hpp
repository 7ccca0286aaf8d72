// Local (per-matrix) compression options and rank planning: the activation-aware SVD family of the
// LatentLLM paper (Koike-Akino et al. 2025, Table 1) and its junction matrices.
//
// Glossary (as in the paper): a linear module y = W·x + b has W: [d', d] (PyTorch [out, in]);
// C = Σ_t x_t x_tᵀ: [d, d] is the input auto-correlation over the n calibration tokens; μ: [d] their
// mean; P: [d, d] the pre-conditioner; r the rank kept, so W ≈ B·A with B: [d', r], A: [r, d].
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latentllm::compress {

// The pre-conditioner P of B·A·P = svd_r[W·P] (paper Table 1). λ is the damping below.
enum class Preconditioner {
  Identity,        // "plain-svd":     P = I
  DiagHessian,     // "asvd-hessian":  P = diag[(C + λI)⁻¹]^{-1/2}
  DiagL1,          // "asvd-l1":       P = diag(mean_t |x_t|)^α          (ASVD, Yuan et al.)
  DiagL2,          // "asvd-l2":       P = diag[C]^{1/2}
  Covariance,      // "asvd-cov":      P = C + λI
  RootCovariance,  // "asvd-rootcov":  P = (C + λI)^{1/2}  (optimal for the activation loss)
};

// The junction J between B = U·S·J and A = J⁻¹·Vᵀ·P⁺ (every choice gives the same B·A).
enum class Junction {
  Identity,       // "identity":       B = U·S,    A = Vᵀ·P⁺
  SInv,           // "s-inv":          B = U,      A = S·Vᵀ·P⁺
  SqrtSInv,       // "sqrt-s-inv":     B = U·S^½,  A = S^½·Vᵀ·P⁺
  BlockIdentity,  // "block-identity": A = [I_r | A₂] after a column permutation; saves r² weights
};

// CLI spellings (above) <-> enums. parse_* throw ConfigError listing the valid names.
std::string_view preconditioner_name(Preconditioner p);
Preconditioner parse_preconditioner(std::string_view name);
std::span<const Preconditioner> all_preconditioners();  // in the order of the enum
std::string_view junction_name(Junction j);
Junction parse_junction(std::string_view name);
std::span<const Junction> all_junctions();

// The default relative damping λ / mean(diag C) of every covariance (LocalOptions::lambda_rel explains
// the choice); the joint solvers' options default to it too.
inline constexpr double kDefaultLambdaRel = 1e-4;

// Options of one local activation-aware SVD.
struct LocalOptions {
  Preconditioner preconditioner = Preconditioner::RootCovariance;
  Junction junction = Junction::BlockIdentity;
  // Damping λ = lambda_rel · mean(diag C), added to C for DiagHessian, Covariance and RootCovariance
  // (not for DiagL1/DiagL2, whose Table 1 forms have none). Why 1e-4: on synthetic inputs with LLM-like
  // outlier features (4 of 128 features 30× larger, so they dominate mean(diag C)), the held-out
  // activation loss of asvd-rootcov at 1e-4 is within 1 % of λ = 0 (0.7 % better to 0.1 % worse, for
  // 192…16384 calibration tokens)
  // while GPTQ's 1e-2 costs +10 % to +150 %; asvd-hessian needs damping (λ = 0 is 2.2–2.8× worse) and is
  // at its best near 1e-4…1e-3; asvd-cov is flat there. Record the value used with the output.
  double lambda_rel = kDefaultLambdaRel;
  double alpha = 0.5;  // exponent of DiagL1 (ASVD's best value)
  // P⁺ is the Moore–Penrose pseudo-inverse: directions of C (eigenvalues, or diagonal entries for the
  // diagonal kinds) below pinv_floor_rel × the largest are treated as never excited and dropped from
  // both P and P⁺, so B·A does not act on them. Matches linalg::sym_power's default floor.
  double pinv_floor_rel = 1e-12;
  // Modules with a bias: build P from the centered covariance C − n·μμᵀ and set b̂ = b + (W − B·A)·μ
  // (paper appendix "Bias Update"). When false the bias is kept and P uses C.
  bool update_bias = true;
};

// A numerical fallback taken while compressing (issue 5): where the plain formula would fail or be
// undefined on degenerate inputs (singular covariance, rank-deficient factor, ...), the compressor
// does something well defined instead, logs a warning and records one of these. `compress` writes them
// into the checkpoint's config.json (latent.numerics.notes, docs/FORMAT.md); docs/ERRORS.md lists
// every kind.
struct NumericNote {
  std::string module;  // HF module name(s) it concerns, or "calibration" for the whole run
  std::string kind;    // pinv-drop, zero-covariance, rank-reduced, joint-skipped, few-tokens
  std::string detail;  // what happened and what was done, with the numbers
  std::string message() const { return module + ": " + detail; }
  bool operator==(const NumericNote&) const = default;
};

// ---- Rank planning ---------------------------------------------------------------------------
// A module of `ratio` R keeps (1 − R)·d'·d weights: the largest r with params(r) ≤ (1 − R)·d'·d, where
// params(r) = r·(d' + d), or r·(d' + d) − r² with the block-identity junction. Bias parameters are kept
// as they are and not counted in the ratio (they are d' per module, identical for dense and factored).

// Weights of the dense module: d'·d.
std::int64_t dense_params(std::int64_t out, std::int64_t in);
// Weights of the factored module of rank r: r·(d' + d), minus r² for Junction::BlockIdentity.
std::int64_t factored_params(std::int64_t out, std::int64_t in, std::int64_t rank, Junction j);
// The largest rank meeting the budget of `ratio`, r ≤ min(d, d'). Throws ConfigError when ratio is
// outside (0, 1) or when not even r = 1 fits (the message names `context`).
std::int64_t rank_for_ratio(std::int64_t out, std::int64_t in, double ratio, Junction j, std::string_view context);
// Multiply-accumulates of the weight product for n_tok tokens, as calflops counts a Linear (bias
// ignored): n_tok·(weights). FLOPs are 2·MACs.
std::int64_t dense_macs(std::int64_t out, std::int64_t in, std::int64_t n_tok);
std::int64_t factored_macs(std::int64_t out, std::int64_t in, std::int64_t rank, Junction j, std::int64_t n_tok);
inline std::int64_t flops_of_macs(std::int64_t macs) { return 2 * macs; }

struct ModuleShape {
  std::string name;      // HF module name, e.g. "model.decoder.layers.0.self_attn.q_proj"
  std::int64_t out = 0;  // d'
  std::int64_t in = 0;   // d
};

struct ModulePlan {
  std::string name;
  std::int64_t out = 0, in = 0;
  std::int64_t rank = 0;
  std::int64_t params = 0;        // factored weights
  std::int64_t dense_params = 0;  // d'·d
  std::int64_t macs = 0;          // factored, for RankPlan::n_tok tokens
  std::int64_t dense_macs = 0;
};

struct RankPlan {
  double ratio = 0;
  Junction junction = Junction::BlockIdentity;
  std::int64_t n_tok = 0;  // tokens the MACs are counted for (calflops reports 128)
  std::vector<ModulePlan> modules;

  std::int64_t params() const;        // Σ factored weights
  std::int64_t dense_params() const;  // Σ d'·d
  std::int64_t macs() const;
  std::int64_t dense_macs() const;
  std::int64_t flops() const { return flops_of_macs(macs()); }
  std::int64_t dense_flops() const { return flops_of_macs(dense_macs()); }
  double achieved_ratio() const;      // 1 − params / dense_params (≥ ratio)
};

// Ranks for every module at one ratio. Throws ConfigError (naming the module) as rank_for_ratio.
RankPlan plan_ranks(const std::vector<ModuleShape>& modules, double ratio, Junction j, std::int64_t n_tok = 128);

}  // namespace latentllm::compress
