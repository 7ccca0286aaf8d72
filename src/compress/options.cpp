// The options record: CompressOptions serialized once, for the resume fingerprint, the checkpoint's
// `latent` metadata and the CLI's --json, with only the options its method reads (methods.cpp).
#include <cmath>

#include "compress/methods.hpp"
#include "core/enum_names.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {
namespace {

constexpr auto kSolverNames = core::enum_names<SparseSolver>(core::Named<SparseSolver>{SparseSolver::Hard, "hard"},
                                               core::Named<SparseSolver>{SparseSolver::Fista, "fista"});
constexpr auto kPatternNames = core::enum_names<SparsePattern>(core::Named<SparsePattern>{SparsePattern::Unstructured, "unstructured"},
                                                core::Named<SparsePattern>{SparsePattern::TwoFour, "2:4"});

std::string joint_spec(const JointParts& j) {
  std::string s;
  if (j.qk) s += "qk";
  if (j.vo) s += std::string(s.empty() ? "" : ",") + "vo";
  if (j.ud) s += std::string(s.empty() ? "" : ",") + "ud";
  if (j.qkv) s += std::string(s.empty() ? "" : ",") + "qkv";
  return s.empty() ? "none" : s;
}

}  // namespace

JointParts parse_joint_parts(std::string_view spec) {
  JointParts j{false, false, false};
  std::string_view rest = spec;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view part = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (part == "qk") j.qk = true;
    else if (part == "vo") j.vo = true;
    else if (part == "ud") j.ud = true;
    else if (part == "qkv") j.qkv = true;
    else if (part != "none" && !part.empty())
      throw ConfigError(fmt::format("--joint: unknown part (expected qk, vo, ud, qkv, none or auto, got {})", part));
  }
  // q_proj and k_proj (v_proj) belong to one joint group each: joint Q-K-V already holds them.
  if (j.qkv && (j.qk || j.vo)) {
    throw ConfigError(fmt::format("--joint: qkv with {} (expected qkv without qk and vo: one shared A already "
                                  "compresses q_proj, k_proj and v_proj together, got {})", j.qk ? "qk" : "vo", spec));
  }
  return j;
}

std::string joint_parts_name(const JointParts& j) { return joint_spec(j); }

std::string_view sparse_solver_name(SparseSolver s) { return kSolverNames.name(s); }
SparseSolver parse_sparse_solver(std::string_view name) { return kSolverNames.parse(name, "--solver (expected {}, got {})"); }
std::string_view sparse_pattern_name(SparsePattern p) { return kPatternNames.name(p); }
SparsePattern parse_sparse_pattern(std::string_view name) {
  return kPatternNames.parse(name, "--pattern (expected {}, got {})");
}

std::span<const OptionFlag> option_flags() {
  // The record's keys a user sets, each with its one command-line flag (tests/golden/test_options_record.cpp
  // checks this table against the record and against `compress --help`).
  static constexpr OptionFlag kFlags[] = {
      {"junction", "--junction"},   {"lambda_rel", "--lambda"},   {"alpha", "--alpha"},
      {"joint", "--joint"},         {"qk_iters", "--qk-iters"},   {"vo_iters", "--vo-iters"},
      {"ud_iters", "--ud-iters"},   {"joint_tol", "--joint-tol"}, {"ud_tokens", "--ud-tokens"},
      {"ud_min_tokens_per_ffn", "--ud-min-tokens-per-ffn"},       {"ud_precision", "--ud-precision"},
      {"ud_unit_tokens", "--ud-unit-tokens"},
      {"rope_window", "--rope-window"}, {"fit", "--fit"},         {"diagnostics", "--diagnostics"},
      {"rank_alloc", "--rank-alloc"}, {"alloc_score", "--alloc-score"}, {"alloc_tokens", "--alloc-tokens"},
      {"intra_layer", "--no-intra-layer"}, {"covariance", "--covariance"}, {"output_side", "--output-side"},
      {"batch", "--batch"},         {"bits", "--bits"},           {"group", "--group"},
      {"quantizer", "--quantizer"}, {"solver", "--solver"},       {"pattern", "--pattern"},
      {"sparse_iters", "--sparse-iters"}, {"bpw", "--bpw"}, {"split_heads", "--split-heads"},
      {"head_bits", "--head-bits"},
  };
  return kFlags;
}

Components parse_components(std::string_view list) {
  Components c{false, false, false};
  auto fail = [&](std::string_view what) {
    throw ConfigError(fmt::format("--components: {} (expected a comma-separated subset of lm, vision, projector with "
                                  "lm, got {})", what, list));
  };
  for (std::size_t pos = 0;;) {
    const auto comma = list.find(',', pos);
    const std::string_view part = list.substr(pos, comma == std::string_view::npos ? comma : comma - pos);
    bool* slot = part == "lm" ? &c.language : part == "vision" ? &c.vision : part == "projector" ? &c.projector : nullptr;
    if (slot == nullptr) fail(fmt::format("unknown part '{}'", part));
    if (*slot) fail(fmt::format("'{}' given twice", part));
    *slot = true;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  // The language model's compression drives the run (its progress, resume and checkpoint writer).
  if (!c.language) fail("the language model is not among them");
  return c;
}

std::string components_name(const Components& c) {
  std::string s = c.language ? "lm" : "";
  if (c.vision) s += std::string(s.empty() ? "" : ",") + "vision";
  if (c.projector) s += std::string(s.empty() ? "" : ",") + "projector";
  return s;
}

nlohmann::ordered_json CompressOptions::to_json() const {
  nlohmann::ordered_json j;
  auto put = [&](std::string_view key, auto value) {
    if (reads_option(*this, key)) j[std::string(key)] = value;
  };
  put("method", method_name(method));
  put("components", components_name(components));
  put("ratio", ratio);
  put("junction", junction_name(local.junction));
  put("rank_alloc", rank_alloc_name(rank_alloc));
  put("alloc_score", alloc_score_name(alloc_score));
  put("alloc_tokens", alloc_max_tokens);
  put("intra_layer", pipeline.sequential_within_layer);
  put("batch", pipeline.batch_windows);
  put("covariance", pipeline.covariance_f32 ? "f32" : "f64");
  put("update_bias", local.update_bias);
  put("pinv_floor_rel", local.pinv_floor_rel);
  put("lambda_rel", local.lambda_rel);
  put("alpha", local.alpha);
  put("fit", error_compensation ? "compensate" : "local");
  put("output_side", output_side);
  put("joint", joint_spec(joint));
  put("qk_iters", qk_iters);
  put("vo_iters", vo_iters);
  put("joint_tol", joint_tol);
  put("rope_window", rope_window);
  put("ud_iters", ud_iters);
  put("ud_tokens", ud_max_tokens);
  put("ud_min_tokens_per_ffn", ud_min_tokens_per_ffn);
  put("ud_precision", ud_f32 ? "f32" : "f64");
  put("ud_unit_tokens", ud_unit_tokens);
  put("diagnostics", diagnostics);
  put("split_heads", split_heads);
  put("solver", sparse_solver_name(sparse.solver));
  put("pattern", sparse_pattern_name(sparse.pattern));
  put("sparse_iters", sparse.iters);
  if (quant.enabled()) {  // absent when not quantized, so records of earlier runs stay the same
    if (quant.bpw > 0) j["bpw"] = quant.bpw;  // each module's bits then the plan's
    else j["bits"] = quant.bits;
    j["group"] = quant.group;
    j["quantizer"] = uses_gptq(*this) ? "gptq" : "rtn";
  }
  if (quant.head_bits < 16) {  // absent when the head is not quantized
    j["head_bits"] = quant.head_bits;
    j["group"] = quant.group;
  }
  return j;
}

CompressOptions CompressOptions::from_json(const nlohmann::json& j) {
  CompressOptions o;
  try {
    o.method = parse_method(j.at("method").get<std::string>());
    if (j.contains("components")) o.components = parse_components(j.at("components").get<std::string>());
    o.joint = j.contains("joint") ? parse_joint_parts(j.at("joint").get<std::string>()) : JointParts{false, false, false};
    o.ratio = j.at("ratio").get<double>();
    o.local.junction = parse_junction(j.at("junction").get<std::string>());
    o.rank_alloc = parse_rank_alloc(j.at("rank_alloc").get<std::string>());
    if (j.contains("alloc_score")) o.alloc_score = parse_alloc_score(j.at("alloc_score").get<std::string>());
    o.alloc_max_tokens = j.value("alloc_tokens", o.alloc_max_tokens);
    o.pipeline.sequential_within_layer = j.at("intra_layer").get<bool>();
    o.pipeline.batch_windows = j.at("batch").get<int>();
    o.pipeline.covariance_f32 = j.at("covariance").get<std::string>() == "f32";
    o.local.update_bias = j.at("update_bias").get<bool>();
    o.local.pinv_floor_rel = j.at("pinv_floor_rel").get<double>();
    o.local.lambda_rel = j.value("lambda_rel", o.local.lambda_rel);
    o.local.alpha = j.value("alpha", o.local.alpha);
    o.error_compensation = j.value("fit", std::string("local")) == "compensate";
    o.output_side = j.value("output_side", o.output_side);
    o.qk_iters = j.value("qk_iters", o.qk_iters);
    o.vo_iters = j.value("vo_iters", o.vo_iters);
    o.joint_tol = j.value("joint_tol", o.joint_tol);
    o.rope_window = j.value("rope_window", o.rope_window);
    o.ud_iters = j.value("ud_iters", o.ud_iters);
    o.ud_max_tokens = j.value("ud_tokens", o.ud_max_tokens);
    o.ud_min_tokens_per_ffn = j.value("ud_min_tokens_per_ffn", o.ud_min_tokens_per_ffn);
    o.ud_f32 = j.value("ud_precision", std::string("f32")) == "f32";
    o.ud_unit_tokens = j.value("ud_unit_tokens", o.ud_unit_tokens);
    o.diagnostics = j.value("diagnostics", o.diagnostics);
    o.split_heads = j.value("split_heads", o.split_heads);
    if (j.contains("solver")) o.sparse.solver = parse_sparse_solver(j.at("solver").get<std::string>());
    if (j.contains("pattern")) o.sparse.pattern = parse_sparse_pattern(j.at("pattern").get<std::string>());
    o.sparse.iters = j.value("sparse_iters", o.sparse.iters);
    o.quant.bits = j.value("bits", o.quant.bits);
    o.quant.group = j.value("group", o.quant.group);
    o.quant.bpw = j.value("bpw", o.quant.bpw);
    o.quant.head_bits = j.value("head_bits", o.quant.head_bits);
    o.quant.gptq = j.value("quantizer", std::string("gptq")) == "gptq";
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("options record: {} (expected the keys CompressOptions::to_json writes)", e.what()));
  }
  return o;
}

namespace {

// The sparse methods' own checks: a pattern they can reach, and none of the low-rank or quantization options
// that would be silently unused (their modules keep their dense shape).
void validate_sparse(const CompressOptions& o) {
  const std::string_view m = method_name(o.method);
  if (o.sparse.pattern == SparsePattern::TwoFour && o.ratio != 0.5) {
    throw ConfigError(fmt::format("--pattern 2:4: ratio (expected --ratio 0.5, the pattern's sparsity, got {})", o.ratio));
  }
  if (o.sparse.pattern == SparsePattern::TwoFour && o.method == Method::Sparse && o.sparse.solver == SparseSolver::Fista) {
    throw ConfigError("--solver fista: pattern (expected --pattern unstructured: its threshold sets the sparsity, got "
                      "--pattern 2:4)");
  }
  if (o.sparse.iters <= 0) throw ConfigError(fmt::format("--sparse-iters (expected > 0, got {})", o.sparse.iters));
  if (o.quant.enabled()) {
    throw ConfigError(fmt::format("--method {}: quantization (expected --bits 16: sparse modules are not quantized "
                                  "yet, got --bits {})", m, o.quant.bits));
  }
  if (o.rank_alloc != RankAlloc::Uniform) {
    throw ConfigError(fmt::format("--method {}: --rank-alloc (expected uniform: every module at the ratio's "
                                  "sparsity, got {})", m, rank_alloc_name(o.rank_alloc)));
  }
  if (o.components.towers()) {
    throw ConfigError(fmt::format("--method {}: --components (expected lm: the towers are compressed by low rank "
                                  "only, got {})", m, components_name(o.components)));
  }
}

// --bpw's checks: a budget a plan can meet, chosen by the allocation of ranks and bits alone.
void validate_bpw(const CompressOptions& o) {
  if (!(o.quant.bpw > 0 && o.quant.bpw <= 16)) {  // also NaN
    throw ConfigError(fmt::format("--bpw (expected 0 < bits per weight <= 16, got {})", o.quant.bpw));
  }
  if (quantizes_dense(o.method) || sparsifies(o.method)) {
    throw ConfigError(fmt::format("--method {}: --bpw (expected a low-rank method: the budget chooses ranks and "
                                  "bits together, got {})", method_name(o.method), method_name(o.method)));
  }
  if (o.quant.bits != 16) {
    throw ConfigError(fmt::format("--bpw: --bits (expected 16: each module's bits come from the budget, got {})",
                                  o.quant.bits));
  }
  if (o.rank_alloc != RankAlloc::Global || o.alloc_score != AllocScore::Relative) {
    throw ConfigError(fmt::format("--bpw: rank allocation (expected --rank-alloc global with --alloc-score relative: "
                                  "the budget is spread over every module, got {} with {})",
                                  rank_alloc_name(o.rank_alloc), alloc_score_name(o.alloc_score)));
  }
  if (o.components.towers()) {
    throw ConfigError(fmt::format("--bpw: --components (expected lm: the towers' ranks and bits are not allocated "
                                  "yet, got {})", components_name(o.components)));
  }
}

// --joint qkv's and --split-heads' checks: their factors have a shape of their own (one A for three modules,
// a block-diagonal B), which the quantized storage, --bpw's allocation, the error-compensating fit and the
// towers' plans (--components) do not know; split heads exclude the joint groups that hold q_proj, k_proj or v_proj.
void validate_attention_forms(const CompressOptions& o) {
  const std::string_view what = o.split_heads ? "--split-heads" : "--joint qkv";
  if (o.quant.enabled()) {
    throw ConfigError(fmt::format("{}: quantization (expected --bits 16: shared or block-diagonal factors are not "
                                  "quantized yet, got {})", what, o.quant.bpw > 0 ? "--bpw" : "--bits"));
  }
  if (o.error_compensation) {
    throw ConfigError(fmt::format("{}: --fit (expected local: the error-compensating fit is per module, got "
                                  "compensate)", what));
  }
  if (o.components.towers()) {
    throw ConfigError(fmt::format("{}: --components (expected lm: the towers' q/k/v ranks are not planned for "
                                  "shared or split factors yet, got {})", what, components_name(o.components)));
  }
  const bool joint_attn = has_joint_parts(o.method) && (o.joint.qk || o.joint.vo || o.joint.qkv);
  if (o.split_heads && joint_attn) {
    throw ConfigError(fmt::format("--split-heads: --joint {} (expected no qk, vo or qkv part: split heads apply to "
                                  "the q_proj, k_proj and v_proj compressed locally, got {})",
                                  joint_spec(o.joint), joint_spec(o.joint)));
  }
}

}  // namespace

void CompressOptions::validate() const {
  if (!(ratio > 0.0 && ratio < 1.0)) {  // also NaN
    throw ConfigError(fmt::format("--ratio: compression ratio out of range (expected 0 < R < 1, got {})", ratio));
  }
  if (!(local.lambda_rel >= 0.0 && std::isfinite(local.lambda_rel))) {
    throw ConfigError(fmt::format("--lambda (expected a finite number >= 0, got {})", local.lambda_rel));
  }
  if (!(local.alpha > 0.0 && std::isfinite(local.alpha))) {
    throw ConfigError(fmt::format("--alpha (expected a finite number > 0, got {})", local.alpha));
  }
  if (!(ud_min_tokens_per_ffn >= 0 && std::isfinite(ud_min_tokens_per_ffn))) {
    throw ConfigError(fmt::format("--ud-min-tokens-per-ffn (expected a finite number >= 0, got {})",
                                  ud_min_tokens_per_ffn));
  }
  if (alloc_max_tokens < 0) throw ConfigError(fmt::format("--alloc-tokens (expected >= 0, got {})", alloc_max_tokens));
  if (qk_iters < 0 || vo_iters < 0 || ud_iters < 0 || rope_window < 0) {
    throw ConfigError(fmt::format("--qk-iters/--vo-iters/--ud-iters/--rope-window (expected >= 0, got {}/{}/{}/{})",
                                  qk_iters, vo_iters, ud_iters, rope_window));
  }
  if (ud_max_tokens < 0) throw ConfigError(fmt::format("--ud-tokens (expected >= 0, got {})", ud_max_tokens));
  if (ud_unit_tokens < 0) throw ConfigError(fmt::format("--ud-unit-tokens (expected >= 0, got {})", ud_unit_tokens));
  if (pipeline.batch_windows <= 0) {
    throw ConfigError(fmt::format("--batch (expected > 0, got {})", pipeline.batch_windows));
  }
  if (!(joint_tol >= 0 && joint_tol < 1)) {  // also NaN
    throw ConfigError(fmt::format("--joint-tol (expected 0 <= tol < 1, got {})", joint_tol));
  }
  if (quant.bits != 16 && quant.bits != 8 && quant.bits != 4 && quant.bits != 3 && quant.bits != 2) {
    throw ConfigError(fmt::format("--bits (expected 2, 3, 4, 8 or 16, got {})", quant.bits));
  }
  if (quantizes_dense(method) && !quant.enabled()) {
    throw ConfigError(fmt::format("--method {}: quantization bits (expected --bits 8, 4, 3 or 2, got {})",
                                  method_name(method), quant.bits));
  }
  if (quant.head_bits != 16 && quant.head_bits != 8 && quant.head_bits != 4) {
    throw ConfigError(fmt::format("--head-bits (expected 8, 4 or 16, got {})", quant.head_bits));
  }
  if (quant.group <= 0 || quant.group % 8 != 0) {
    throw ConfigError(fmt::format("--group (expected a positive multiple of 8, got {})", quant.group));
  }
  if (quant.bpw != 0) validate_bpw(*this);
  if (sparsifies(method)) validate_sparse(*this);
  if (split_heads || (has_joint_parts(method) && joint.qkv)) validate_attention_forms(*this);
  if (stop_after_layers < 0) {
    throw ConfigError(fmt::format("--stop-after-layers (expected >= 0, got {})", stop_after_layers));
  }
}

}  // namespace latentllm::compress
