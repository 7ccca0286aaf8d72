// Compression: the activation-aware SVD family of the LatentLLM paper (Koike-Akino et al. 2025,
// Table 1) and its junction matrices, rank planning, and whole-model compression (methods, joint
// parts, reports).
//
// Glossary (as in the paper): a linear module y = W·x + b has W: [d', d] (PyTorch [out, in]);
// C = Σ_t x_t x_tᵀ: [d, d] is the input auto-correlation over the n calibration tokens; μ: [d] their
// mean; P: [d, d] the pre-conditioner; r the rank kept, so W ≈ B·A with B: [d', r], A: [r, d].
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/calib.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/resources.hpp"

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
  // outlier features (a few features much larger, so they dominate mean(diag C)), the held-out
  // activation loss of asvd-rootcov at 1e-4 stays close to λ = 0 while GPTQ's 1e-2 costs much more;
  // asvd-hessian needs damping and is at its best near 1e-4…1e-3; asvd-cov is flat there (the
  // measurements: bench/results/whitening.md). Record the value used with the output.
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

// A numerical fallback taken while compressing: where the plain formula would fail or be
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
// A module of `ratio` R keeps (1 − R)·d'·d weights (eval::factored_params counts them, block identity
// included). Bias parameters are kept as they are and not counted in the ratio (they are d' per module,
// identical for dense and factored).

// The largest rank meeting the budget of `ratio`, r ≤ min(d, d'): the largest r with
// eval::factored_params(d', d, r, j == BlockIdentity) ≤ (1 − ratio)·d'·d. Throws ConfigError when ratio is
// outside (0, 1) or when not even r = 1 fits (the message names `context`).
std::int64_t rank_for_ratio(std::int64_t out, std::int64_t in, double ratio, Junction j, std::string_view context);

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
  int bits = 0;                   // its factors' bits (allocate_ranks_bits: 2, 3, 4, 8 or 16); 0: the run's --bits
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
  std::int64_t flops() const { return 2 * macs(); }
  std::int64_t dense_flops() const { return 2 * dense_macs(); }
  double achieved_ratio() const;      // 1 − params / dense_params (≥ ratio)
};

// Ranks for every module at one ratio. Throws ConfigError (naming the module) as rank_for_ratio.
RankPlan plan_ranks(const std::vector<ModuleShape>& modules, double ratio, Junction j, std::int64_t n_tok = 128);

// ---- Global rank allocation -------------------------------------------------------------------
// Instead of (1 − R) of every module's own weights, the same total parameter budget spread over the
// modules by measured sensitivity (as SVD-LLM V2 / Zero-Sum SVD do): a dense pre-pass measures the
// singular values σ_i of W·P for every module, P = (C + λI)^½ the root covariance of its dense inputs,
// so σ_{r+1}² is exactly the drop of the activation loss ‖(W − B·A)·X‖² when rank r + 1 is kept
// instead of r (Eckart–Young), and a greedy gives ranks where the (normalized) drop per parameter is
// largest. For a wide module (down_proj) the pre-pass takes the same σ_i² as the eigenvalues of
// W·(C + λI)·Wᵀ from its outputs, never forming the wide covariance (src/compress/sensitivity.hpp).

enum class RankAlloc {
  Uniform,  // "uniform": every module keeps (1 − R) of its own weights (plan_ranks)
  Global,   // "global": the uniform plan's total, spread by sensitivity (allocate_ranks)
};
// How the greedy compares the loss drops of different modules.
enum class AllocScore {
  Relative,  // "relative": σ_i² / ‖W·P‖_F², the fraction of the module's output energy regained
  Grouped,   // "grouped": relative, but each role (q, k, ..., down) keeps its uniform total and only the
             // layers compete (SVD-LLM V2's per-type groups)
};
std::string_view rank_alloc_name(RankAlloc a);  // "uniform", "global"
RankAlloc parse_rank_alloc(std::string_view name);
std::string_view alloc_score_name(AllocScore s);  // "relative", "grouped"
AllocScore parse_alloc_score(std::string_view name);

// One module's sensitivity: what the allocation reads.
struct ModuleSpectrum {
  std::string name;  // HF module name
  model::Role role = model::Role::Q;
  std::int64_t out = 0, in = 0;  // d', d
  std::vector<double> sigma2;    // [min(d, d')] σ_i² of W·P, descending (≥ 0)
  // ‖W − Q_q(W)‖²_F / ‖W‖²_F of round to nearest in groups of the run's --group, for q = 2, 3, 4, 8
  // (kQuantBits); empty: not measured (allocate_ranks_bits then takes the uniform-noise estimate).
  std::vector<double> quant_rel;
};

// The bit widths --bpw chooses among besides 16 (no quantization), in the order of ModuleSpectrum::quant_rel.
inline constexpr std::array<int, 4> kQuantBits = {2, 3, 4, 8};

// Ranks under the uniform plan's total parameters (plan_ranks(shapes, ratio, j).params(), so never
// more weights than uniform): every module starts at rank 1, then the greedy takes, most efficient
// first, the steps of each module's upper concave hull of (parameters(r), Σ_{i≤r} gain_i) (with the
// block-identity junction a step r → r+1 costs d + d' − 2r − 1, so the gain per parameter need not
// fall with r; on the hull it does, which makes the greedy optimal for the continuous relaxation),
// a step that no longer fits replacing its module's hull by the hull of the ranks still within budget;
// then fills what is left with single affordable steps. 1 ≤ r ≤ min(d, d'); deterministic (ties go to
// the earlier module). Throws ConfigError as plan_ranks.
RankPlan allocate_ranks(const std::vector<ModuleSpectrum>& spectra, double ratio, Junction j, AllocScore score,
                        std::int64_t n_tok = 128);

// ---- One budget in bytes: ranks and bits together (--bpw) ---------------------------------------
// Each module's rank r and bits q ∈ {2, 3, 4, 8, 16} minimising the sum of the modules' estimated
// relative losses within bpw bits per original weight (Σ stored bytes ≤ bpw·Σ d'·d / 8, scales and zero
// points included, biases not: they are the same in every plan). A module's estimate is
//   L(r, q) = tail(r) + (1 − tail(r))·ε(q)·φ(r),
// tail(r) = Σ_{i>r} σ_i² / Σ σ_i² (the rank's relative loss, as allocate_ranks), ε(q) its weight's
// relative rounding error at q bits (ModuleSpectrum::quant_rel), φ(r) = 1 + (the share of the inputs
// A stores) — B's rounding and A's add up — and φ = 1 at full rank, where the module is stored as its
// dense weight quantized. Solved by the Lagrangian relaxation of the
// multiple-choice knapsack (each module's best r, q for a price per byte, the price bisected to the
// budget), deterministic. Throws ConfigError when even rank 1 at 2 bits everywhere exceeds the budget.
RankPlan allocate_ranks_bits(const std::vector<ModuleSpectrum>& spectra, double bpw, int group, Junction j,
                             std::int64_t n_tok = 128);
// Stored bytes of a module at rank r and q bits, biases not counted: 16 bits, two bytes per factor weight;
// fewer, its factors' codes with scales and zero points, or at full rank r = min(d, d') its dense
// weight's (--bpw stores a full-rank module as one quantized matrix, not as two).
std::int64_t module_bytes(std::int64_t out, std::int64_t in, std::int64_t rank, int bits, int group, bool block_identity);

// ---- Whole-model compression ------------------------------------------------------------------
// Calibrate, plan ranks, compress every linear module of attention and MLP with the chosen method,
// layer by layer (docs/ARCHITECTURE.md: the stages). The CLI's `compress` and `sweep` call this.

// --method: the six local pre-conditioners (paper Table 1) and LatentLLM (root covariance + block
// identity + the joint parts of JointParts). Each is one row of the method registry
// (src/compress/methods.cpp: name, pre-conditioner, default junction, stages, the options it reads);
// the functions below read the rows.
// Rtn and Gptq: the dense weights quantized with CompressOptions::quant, no rank reduction.
// Sparse, Wanda, SparseGpt: the dense weights with a fraction `ratio` of their entries set to zero
// (CompressOptions::sparse): the paper's full-covariance sparse approximation (appendix "Sparse
// Matrix") and the published diagonal-covariance baselines.
enum class Method { PlainSvd, AsvdHessian, AsvdL1, AsvdL2, AsvdCov, AsvdRootCov, LatentLlm, Rtn, Gptq, Sparse, Wanda,
                    SparseGpt, LowRankSparse };
// "plain-svd", ..., "latentllm", "rtn", "gptq", "sparse", "wanda", "sparsegpt", "lowrank-sparse"
std::string_view method_name(Method m);
// Throws ConfigError "--method: unknown method (expected one of ..., got X)".
Method parse_method(std::string_view name);
std::span<const Method> all_methods();  // the low-rank methods, in the registry's order (sweep's default grid)
// Whether the method keeps every module's rank and only quantizes it (Rtn, Gptq).
bool quantizes_dense(Method m);
// Whether the method rewrites the dense weights with a sparse part (Sparse, Wanda, SparseGpt, LowRankSparse):
// `ratio` is then the fraction of each module's weights set to zero (LowRankSparse: of the pure sparse
// module whose bytes its B·A + D may take), and the modules stay dense matrices (with zeros; LowRankSparse:
// B·A + D summed, its ranks and non-zeros recorded beside them).
bool sparsifies(Method m);
// The pre-conditioner of a method's local modules (LatentLlm: RootCovariance).
Preconditioner preconditioner_of(Method m);

// The joint parts of --method latentllm (--joint qk,vo,ud). Default: Q-K and up-down joint, V and O local.
struct JointParts {
  bool qk = true;  // joint Q-K, attention-map loss (Algorithm 1)
  bool vo = false; // joint V-O, Tucker-2 over heads (appendix)
  bool ud = true;  // joint MLP up(-gate)-down, auxiliary variables (appendix)
  // Joint Q-K-V (appendix "Activation-Aware Joint QKV Compression"): one A shared by q_proj, k_proj and
  // v_proj, B = [B_q; B_k; B_v] from the root-covariance SVD of [W_q; W_k; W_v]. Excludes qk and vo.
  bool qkv = false;
};
// "qk,vo,ud,qkv" / "none" <-> JointParts. ConfigError "--joint: unknown part (...)".
JointParts parse_joint_parts(std::string_view spec);
std::string joint_parts_name(const JointParts& j);

// ---- Presets ---------------------------------------------------------------------------------
// --preset: `Default` is this project's best configuration validated on held-out text; `Paper` is the
// paper's protocol exactly where the two differ (docs/PRESETS.md lists every choice and why):
//   damping λ = 0.01·mean(diag C) (percdamp of the SparseGPT/SparseLLM code the paper builds on);
//   all of a layer's statistics from its dense pass (no re-run within the layer);
//   the baselines' junction J = I and LatentLLM's block identity (default_junction);
//   joint Q-K and joint up-down, V and O local; biases updated as the paper's appendix;
//   every module keeps 1 − R of its weights (uniform ranks), fitted to its own output (local fit).
// `Default` differs in λ = 1e-4, the re-run of the layer after each stage, and for latentllm global
// rank allocation (RankAlloc::Global); the baselines keep uniform ranks and J = I under both.
// CompressOptions{} itself is neither: its members default to uniform ranks and block identity.
enum class Preset { Default, Paper };
std::string_view preset_name(Preset p);  // "default", "paper"
// Throws ConfigError "--preset: unknown preset (expected default or paper, got X)".
Preset parse_preset(std::string_view name);

// The junction of a method when none is chosen: J = I for plain-svd and every asvd-* (the paper's
// baselines, Table 2, store r·(d + d') weights and take the largest r with r·(d + d') ≤ (1 − R)·d·d');
// block identity for latentllm (one of its own contributions: it saves r² weights per module).
Junction default_junction(Method m);

// What of a LLaVA checkpoint compress --components compresses: its language model (the paper's
// setting), its vision tower's encoder layers (those up to the feature layer: the rest never run),
// its projector (linear_1, linear_2).
struct Components {
  bool language = true, vision = false, projector = false;
  bool towers() const { return vision || projector; }
  bool operator==(const Components&) const = default;
};
// "lm,vision,projector": a comma-separated subset holding lm, each part once -> Components. ConfigError
// "--components: ... (expected a comma-separated subset of lm, vision, projector with lm, got X)".
Components parse_components(std::string_view list);
std::string components_name(const Components& c);  // "lm", "lm,vision", "lm,vision,projector", ...

// Quantized factors (the paper's appendix "Quantization-Aware Distillation"; docs/QUANT.md): every
// compressed module's B and A stored as q-bit codes in groups of `group` consecutive input columns, with
// F16 scales and zero points. A is quantized on the site covariance C, B on A'·C·A'ᵀ (A' the quantized
// A), by round to nearest on each group's min–max grid (the paper's rule) or by GPTQ.
struct QuantOptions {
  int bits = 16;      // q ∈ {2, 3, 4, 8}; 16: no quantization (the factors stay in the storage type)
  int group = 128;    // G: a positive multiple of 8
  bool gptq = true;   // false: round to nearest (--quantizer rtn)
  // --bpw: one budget in bits per original weight of the compressed modules (codes, scales and zero
  // points included); each module's rank and bits chosen together (allocate_ranks_bits). 0: none.
  double bpw = 0;
  // --head-bits: the LM head stored as q-bit codes (8 or 4; 16: as the source stores it) in groups of
  // `group`, by round to nearest on each group's min–max grid (docs/QUANT.md "The LM head"); a latent
  // checkpoint only.
  int head_bits = 16;
  bool enabled() const { return bits < 16 || bpw > 0; }
};

// The sparse methods' options (--method sparse | wanda | sparsegpt; compress/math/sparse.hpp).
enum class SparseSolver {
  Hard,   // "hard": hard shrinkage, the paper's best (gradient steps each followed by keeping the κ largest)
  Fista,  // "fista": soft shrinkage by FISTA, its threshold searched to reach the sparsity
};
enum class SparsePattern {
  Unstructured,  // "unstructured": any entries, the fraction `ratio` of the module's weights zero
  TwoFour,       // "2:4": at most 2 non-zero in every group of 4 consecutive inputs of a row (ratio 0.5)
};
std::string_view sparse_solver_name(SparseSolver s);
SparseSolver parse_sparse_solver(std::string_view name);  // ConfigError "--solver (expected hard or fista, got X)"
std::string_view sparse_pattern_name(SparsePattern p);
SparsePattern parse_sparse_pattern(std::string_view name);  // ConfigError "--pattern (expected ..., got X)"
struct SparseOptions {
  SparseSolver solver = SparseSolver::Hard;  // --method sparse only
  SparsePattern pattern = SparsePattern::Unstructured;
  int iters = 100;  // --sparse-iters: the solver's iterations (hard: its shrinkage steps; fista: per threshold)
};

struct CompressOptions;
// Whether modules are quantized by GPTQ: --method gptq, or quant.gptq for the low-rank methods (--method
// rtn: never).
bool uses_gptq(const CompressOptions& o);

struct CompressOptions {
  Method method = Method::LatentLlm;
  QuantOptions quant;          // --bits, --group, --quantizer
  SparseOptions sparse;        // --solver, --pattern, --sparse-iters (the sparse methods)
  // A LLaVA checkpoint's parts to compress (compress_towers beside compress_model of its language model).
  Components components;
  double ratio = 0.2;          // R: fraction of each compressed module's weights removed
  LocalOptions local;          // junction, damping, α; the pre-conditioner follows `method`
  JointParts joint;            // used when method is LatentLlm
  // How ranks are chosen: uniform, or global (a dense pre-pass over the calibration windows first,
  // then allocate_ranks with alloc_score).
  RankAlloc rank_alloc = RankAlloc::Uniform;
  AllocScore alloc_score = AllocScore::Relative;
  // The pre-pass runs on the first calibration windows holding at most this many tokens (at least one
  // window; 0 = all): it only ranks singular values against each other, which a part of the windows
  // does about as well as all of them on validation text at a fraction of the cost (bench/results/
  // rank_alloc).
  std::int64_t alloc_max_tokens = 16384;
  int qk_iters = 8;            // joint Q-K alternating updates (paper: 8)
  int vo_iters = 8;            // joint V-O alternating updates
  // Joint Q-K and V-O stop iterating once an iteration lowers their loss by at most this fraction of it
  // (0 = always qk_iters / vo_iters). --preset default: 1e-6 (the fixtures' losses settle to that within
  // 2-4 iterations; each costs two [d, d] eigendecompositions, the bulk of joint Q-K at scale).
  double joint_tol = 0;
  int ud_iters = 4;            // joint up-down auxiliary-variable iterations (paper: 4)
  int rope_window = 0;         // RoPE-aware joint Q-K over offsets 0..w (0 = plain)
  // Joint up-down keeps several [ffn, n] double matrices: above this many calibration tokens it runs
  // on evenly strided rows (0 = all tokens). 32768 = 64 windows of 512.
  std::int64_t ud_max_tokens = 32768;
  // Joint up-down only when the tokens it fits on, min(calibration tokens, ud_max_tokens), are at least
  // this many times the MLP width f; below, gate/up/down are compressed locally (a joint-skipped note
  // says why; effective_options). 0 = always. --preset default: 12, since with too few tokens per f
  // joint up-down did worse than local up/down on validation text (bench/results/ud_tokens);
  // --preset paper: 0.
  double ud_min_tokens_per_ffn = 0;
  // Joint up-down's token passes in float (sgemm; statistics summed in double, regressions in double):
  // compress/joint_ud.hpp, UdOptions::f32_passes.
  bool ud_f32 = true;
  // Tokens per unit of joint up-down's token passes (0 = about 4096, a multiple of the pass's chunk):
  // the statistics are exact sums of per-unit partial sums, so they have the same bits on any number
  // of ranks, and a run under K ranks splits the units among them (docs/SCALE.md).
  int ud_unit_tokens = 0;
  // Also compress each joint group separately (local root covariance) and report both losses
  // (CompressReport::qk_losses, vo_losses): diagnostics only, the extra decompositions are discarded.
  bool diagnostics = false;
  // Split-head compression (appendix "Split-Head Compression", --split-heads): the locally compressed
  // q_proj, k_proj and v_proj as one factorization per head, B = diag(B_1 … B_h), A = [A_1; …; A_h]
  // (compress/math/split_heads.hpp); stored with B expanded dense and counted by its h blocks.
  bool split_heads = false;
  // Error-compensating fits (--fit compensate; compress/compensate.hpp): the modules compressed by the
  // root covariance (asvd-rootcov, and latentllm's local modules) are fitted to the dense model's
  // output at the module, W·x + b with x its input in the dense model, from the compressed pipeline's
  // input x̂: min Σ‖W·x + b − B·A·x̂ − b̂‖² (+ the damping), instead of the local ‖(W − B·A)·x̂‖. The
  // pipeline then also runs the calibration windows through the dense layers (calib::run_layerwise:
  // one more layer forward, the dense hidden states and a [w, w] cross moment per such site). The
  // joint stages and the other pre-conditioners are unchanged (docs/ARCHITECTURE.md).
  bool error_compensation = false;
  // Wide root-covariance modules (out < (√2 − 1)·in: down_proj, fc2) fitted locally from the statistics
  // of their outputs y = W·x (src/compress/output_side.hpp): the same factors, bias update and loss as
  // from the [in, in] input covariance, which is then never formed. Taken only where exact and no less
  // accurate: λ > 0 and float covariance products (pipeline.covariance_f32), and not where the module
  // is fitted by error compensation. Off: always the input covariance.
  bool output_side = true;
  calib::PipelineOptions pipeline;
  // Per-layer progress (src/compress/resume.hpp): when set, the state after every layer is saved
  // here, and with `resume` a matching state is restored and the run continues after its last layer.
  // Required for a lazy model (model::LoadOptions::lazy), whose layers are released once compressed:
  // its compressed modules then live only here (checkpoint::SaveOptions::layer_factors_dir).
  std::filesystem::path state_dir;
  bool resume = false;
  // Identifies the calibration inputs in the resume fingerprint in place of pipeline.input_embeddings
  // (compress --components: the language model calibrates on the compressed towers' features, which
  // follow from the dense ones this digest covers, embeddings_digest). Empty: the embeddings themselves.
  std::string inputs_digest;
  // Compress layers up to this many (counted from layer 0, resumed ones included; 0 = all) and stop:
  // CompressReport::layers_done < layers_total then, and the model is only partly compressed.
  int stop_after_layers = 0;
  // Called after layer i is compressed, its hidden states propagated and its progress saved (state_dir
  // set); an exception it throws stops the run there (the saved progress stays resumable).
  std::function<void(int layer)> layer_done;
  // Called on entering (begin = true) and leaving each stage ("local", "joint-qk", "joint-vo",
  // "joint-ud") of every layer, and the global rank allocation's dense pre-pass ("pre-pass") before
  // them, on the calling thread; parts never nest. For profilers
  // (bench/compress_time attributes BLAS FLOPs and LAPACK time to them); empty = no calls.
  std::function<void(std::string_view stage, bool begin)> part_observer;

  // The options record: every option that decides the result and that this method reads
  // (reads_option), by the keys of docs/FORMAT.md's `latent` section. The resume fingerprint, the
  // checkpoint's metadata and the CLI's --json all use it, so none can miss a field.
  nlohmann::ordered_json to_json() const;
  // The record back (fields it omits take CompressOptions' defaults). FormatError on a missing key.
  static CompressOptions from_json(const nlohmann::json& j);
  // ConfigError naming the option of the first value out of its range (ratio, λ, α, iterations, ...).
  void validate() const;
};

// Whether a run with options `o` reads the option `key` (a to_json key): the method's registry row
// lists it, and where it belongs to a joint part or to global rank allocation, that part runs.
bool reads_option(const CompressOptions& o, std::string_view key);
// The methods whose registry row lists `key`.
std::vector<std::string_view> methods_reading(std::string_view key);

// A key of the options record (CompressOptions::to_json) and the method option that sets it on the command
// line (compress, sweep). Not listed: method, ratio and components (compress's own arguments) and the
// library's settings no flag sets (update_bias, pinv_floor_rel).
struct OptionFlag {
  std::string_view key, flag;
};
std::span<const OptionFlag> option_flags();

// The options of `method` at `ratio` under a preset (everything else at CompressOptions' defaults).
CompressOptions preset_options(Preset p, Method method, double ratio);

// The budget of one module and what it achieved.
struct ModuleReport {
  std::string name;           // HF module name
  std::int64_t out = 0, in = 0, rank = 0;
  std::int64_t dense_params = 0, params = 0;
  double loss = 0;            // output error over the calibration tokens after compression
  double loss_rel = 0;        // loss / output energy
  std::string how;            // "local", "joint-qk", "joint-ud", ...
  nlohmann::json to_json() const;
  static ModuleReport from_json(const nlohmann::json& j);
};

// A joint group's loss in one layer: the joint solution's, and with CompressOptions::diagnostics (or
// where the algorithm computes it anyway, joint up-down's start) the local solution's (NaN otherwise).
struct JointLoss {
  int layer = 0;
  double joint = 0;
  double local = std::numeric_limits<double>::quiet_NaN();
  nlohmann::json to_json() const;  // {"layer", "joint", "local" (null when NaN)}
  static JointLoss from_json(const nlohmann::json& j);
};

struct CompressReport {
  Method method = Method::LatentLlm;
  double ratio = 0;
  RankAlloc rank_alloc = RankAlloc::Uniform;
  double prepass_s = 0;  // the dense pre-pass of RankAlloc::Global (0 when none ran)
  std::vector<ModuleReport> modules;
  // Numerical fallbacks in the order they happened (NumericNote); written to the checkpoint as
  // latent.notes.
  std::vector<NumericNote> notes;
  void add_note(const NumericNote& n);  // appends unless an identical note is already there
  std::vector<JointLoss> qk_losses;     // attention-map loss (joint Q-K)
  std::vector<JointLoss> ud_losses;     // MLP output loss (joint up-down)
  std::vector<JointLoss> vo_losses;     // own-token-attention block output loss (joint V-O)
  calib::PipelineTimes times;
  std::map<std::string, double> part_seconds;  // decompositions by stage: local, joint-qk, joint-vo, joint-ud
  // The decompositions one by one (a module's fit, a joint group's eigenproblems): the rank that ran
  // each and its seconds there, in the order every rank received them. Under K ranks or T threads they
  // overlap, so their sum may exceed the wall time. Of the layers this run computed (not restored by --resume).
  struct Job {
    int layer = 0;
    std::string stage;  // "local", "joint-qk", ...
    std::string what;   // "model.layers.0.self_attn.v_proj", "... q_proj, k_proj: start U_q"
    int rank = 0;
    double seconds = 0;
    std::string after;  // finishing work run in a round's idle time right after this job on its rank, or empty
    int thread = 0;     // the thread slot of its rank it was given (a rank runs its slots' jobs at once)
  };
  std::vector<Job> jobs;
  // The most jobs one rank ran at the same moment (measured; 1 on one thread): whether --threads
  // actually ran independent decompositions at once.
  int jobs_at_once = 0;
  double calib_sample_s = 0;        // tokenizing and sampling the calibration set
  double total_s = 0;
  int layers_done = 0, layers_total = 0;  // compressed layers (resumed ones included) of the model's
  int layers_resumed = 0;                 // of which restored from the progress directory
  std::int64_t dense_params = 0;    // Σ over compressed modules
  std::int64_t params = 0;
  nlohmann::json to_json() const;
  // Appends another run's modules (their parameter sums), notes, losses, stage seconds and pipeline
  // times (a LLaVA's towers beside its language model).
  void merge(CompressReport other);
};

// NumericNote <-> {"module", "kind", "detail"} (config.json latent.notes, the resume state).
nlohmann::json note_to_json(const NumericNote& n);
NumericNote note_from_json(const nlohmann::json& j);

// The ranks `opt` gives each module of `m`, without touching data (for --dry-run and for the plan
// printed before work starts). n_tok: tokens the MACs are counted for.
RankPlan plan_model(const model::Model& m, const CompressOptions& opt, std::int64_t n_tok = 128);

// Estimated peak bytes of compressing a lazy model (compress_model on model::LoadOptions::lazy) on
// n_tok calibration tokens in windows of seqlen, item by item, against `budget`; docs/SCALE.md says how
// each item is counted and how the estimate compares with measured peaks.
core::MemoryPlan plan_compress_memory(const model::Model& m, std::int64_t n_tok, int seqlen, const CompressOptions& opt,
                                      std::int64_t budget);

// The spectra of every module of `m` from a dense pre-pass: the calibration windows `ids` ([N·L], the
// first of them up to opt.alloc_max_tokens) run through the unmodified model layer by layer (calib::run_layerwise, progress on the log), each
// module's W·P with P the root covariance of its inputs (centered for a bias module when
// opt.local.update_bias, as the local ASVD) and damping opt.local.lambda_rel. `m` is not changed (a
// lazy model has its layers loaded and released again).
std::vector<ModuleSpectrum> measure_spectra(model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                                            const CompressOptions& opt);

// ---- The planner: the one place ranks are chosen (the CLI's compress and sweep, and compress_model) ----
struct PlannedRanks {
  enum class Source {
    Uniform,        // every module keeps 1 − R of its weights (plan_model)
    Global,         // allocate_ranks over the spectra of the dense pre-pass (or of the given cache)
    Resumed,        // the interrupted run's global plan (plan.json of opt.state_dir), no pre-pass
    UniformNoData,  // global asked for without calibration windows: the uniform plan of the same total
  };
  RankPlan plan;   // what compress_model runs with
  RankPlan plain;  // the same allocation with J = I, for comparison (empty modules when Resumed)
  Source source = Source::Uniform;
  double prepass_s = 0;  // the dense pre-pass (0 when none ran)
};
std::string_view planned_source_name(PlannedRanks::Source s);  // "uniform", "global", "resumed", "uniform-no-data"

// Modules planned beside the model's own (a multimodal checkpoint's vision tower and projector:
// plan_components): their shapes for a uniform plan and, for a global one, how their spectra are measured.
struct PlanParts {
  std::string name;  // the parts planned together, for the log ("lm,vision,projector")
  std::vector<ModuleShape> shapes;
  std::function<std::vector<ModuleSpectrum>()> spectra;
};

// The one planner: the ranks of `opt` for `m` on the calibration windows `ids` ([N·L]; may be empty for a
// dry run), and for the modules of `more` (may be null) beside them: uniform (each module at the ratio);
// global, resumed from opt.state_dir when opt.resume finds this run's saved plan (ConfigError when the
// directory holds another run's progress), else one allocation over the spectra of every module, m's
// from the dense pre-pass (measured into `spectra` when given and empty, taken from it when not: one
// pre-pass serves every run of a sweep), more's from more->spectra().
PlannedRanks plan_run(model::Model& m, std::span<const std::int32_t> ids, int seqlen, const CompressOptions& opt,
                      std::vector<ModuleSpectrum>* spectra = nullptr, const PlanParts* more = nullptr);

// The options compress_model runs with on n_tok calibration tokens: `opt`, with joint up-down dropped
// when the tokens it would fit on, min(n_tok, ud_max_tokens), are fewer than ud_min_tokens_per_ffn·f.
// `why` (when given) receives the reason, or is cleared when nothing changed.
CompressOptions effective_options(const model::ModelConfig& c, std::int64_t n_tok, const CompressOptions& opt,
                                  std::string* why = nullptr);

// Throws ConfigError when `state_dir` holds saved work (finished layers or a global plan) and the run does
// not `resume`: "<dir>: progress of an earlier run exists (...; expected --resume to continue it, or remove
// the directory to start over)". compress_model checks it too; callers check it before any work.
void check_progress_kept(const std::filesystem::path& state_dir, bool resume);

// Compresses `m` in place on the calibration windows `ids` ([N·L]) with the ranks of `plan` (null:
// plan_run's). A plan must name every module of `m`. Checks opt (validate) before any work.
CompressReport compress_model(model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                              const CompressOptions& opt, const RankPlan* plan = nullptr);

// ---- A multimodal checkpoint's other parts (compress --components) ------------------------------
// The vision tower's encoder layers run through the same stages as decoder layers (model::vision_layers:
// joint Q-K without a causal mask — the statistics sum over all query-key pairs — V-O, joint up-down
// with quick_gelu), calibrated on the calibration images' tiles, each tile a window of its P positions.
// The projector's linear_1 and linear_2 are each compressed by the method's local ASVD (its
// pre-conditioner and junction) on the statistics of their inputs: the features of the (compressed)
// vision tower for linear_1, its own compressed output through the activation for linear_2.

// The calibration images: every tile of every image, one after another ([n_tiles, C, S, S]).
struct TowerCalibration {
  std::span<const float> pixels;
  int n_tiles = 0;
};

// A digest of multimodal calibration embeddings ([rows, d]) for CompressOptions::inputs_digest.
std::string embeddings_digest(const MatrixF& e);

// The modules of the parts `c` adds beyond the language model (the vision tower's loaded encoder
// layers', then the projector's), as they stand in m (for the checkpoint writer), and as shapes.
std::vector<const model::Linear*> tower_modules(model::LlavaModel& m, const Components& c);
std::vector<ModuleShape> tower_shapes(model::LlavaModel& m, const Components& c);

// The ranks of every module of opt.components: plan_run over the language model with the towers as its
// PlanParts (the vision tower's spectra from its dense pre-pass on the tiles, the projector's from its
// dense inputs).
PlannedRanks plan_components(model::LlavaModel& m, std::span<const std::int32_t> ids, int seqlen,
                             const CompressOptions& opt, const TowerCalibration& cal);

// Compresses the towers of opt.components in m in place (the vision tower first, then the projector on
// its features) with the ranks of `plan`, which must name each of their modules. Throws ConfigError
// without calibration tiles.
CompressReport compress_towers(model::LlavaModel& m, const TowerCalibration& cal, const CompressOptions& opt,
                               const RankPlan& plan);

}  // namespace latentllm::compress
