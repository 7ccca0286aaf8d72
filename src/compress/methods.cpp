// The method registry: a method is one row here (its name, pre-conditioner, default junction, the
// stages it runs and the options it reads) and its stage files (stage_*.cpp). Everything else — the
// CLI's --method names, the options record (options.cpp), presets, the memory plan — asks the row.
#include <algorithm>
#include <array>

#include <fmt/ranges.h>

#include "compress/methods.hpp"
#include "compress/stages/stage.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {
namespace {

using model::Role;
using model::Site;
using Stages = std::vector<std::unique_ptr<CompressStage>>;

// Every module on its own, site by site (the paper's ASVD baselines, Table 1).
Stages local_stages(StageContext& ctx, const model::Model& m) {
  Stages s;
  s.push_back(make_local_stage(ctx, m, Site::AttnIn, {Role::Q, Role::K, Role::V}));
  s.push_back(make_local_stage(ctx, m, Site::AttnOut, {Role::O}));
  s.push_back(make_local_stage(ctx, m, Site::MlpIn, {Role::Gate, Role::Up}));
  s.push_back(make_local_stage(ctx, m, Site::MlpMid, {Role::Down}));
  return s;
}

// LatentLLM: the joint parts selected (CompressOptions::joint), the remaining modules local.
Stages latentllm_stages(StageContext& ctx, const model::Model& m) {
  const JointParts& j = ctx.options().joint;
  Stages s;
  if (j.qk) s.push_back(make_joint_qk_stage(ctx));
  if (j.qkv) s.push_back(make_joint_qkv_stage(ctx));
  // Joint V-O compresses v_proj with o_proj once the o_proj input statistics exist.
  std::vector<Role> attn_in = j.qk || j.qkv ? std::vector<Role>{} : std::vector<Role>{Role::Q, Role::K};
  if (!j.vo && !j.qkv) attn_in.push_back(Role::V);
  if (!attn_in.empty()) s.push_back(make_local_stage(ctx, m, Site::AttnIn, attn_in));
  if (j.vo) s.push_back(make_joint_vo_stage(ctx));
  else s.push_back(make_local_stage(ctx, m, Site::AttnOut, {Role::O}));
  if (j.ud) {
    s.push_back(make_joint_ud_stage(ctx));
  } else {
    s.push_back(make_local_stage(ctx, m, Site::MlpIn, {Role::Gate, Role::Up}));
    s.push_back(make_local_stage(ctx, m, Site::MlpMid, {Role::Down}));
  }
  return s;
}

// The dense weights quantized site by site, no rank reduction (--method rtn / gptq).
Stages quantize_stages(StageContext& ctx, const model::Model&) {
  Stages s;
  s.push_back(make_quantize_stage(ctx, Site::AttnIn, {Role::Q, Role::K, Role::V}));
  s.push_back(make_quantize_stage(ctx, Site::AttnOut, {Role::O}));
  s.push_back(make_quantize_stage(ctx, Site::MlpIn, {Role::Gate, Role::Up}));
  s.push_back(make_quantize_stage(ctx, Site::MlpMid, {Role::Down}));
  return s;
}

// The dense weights sparsified site by site, each module at the ratio's sparsity (--method sparse, wanda,
// sparsegpt): every later site and layer calibrates on the sparse modules' outputs.
Stages sparse_stages(StageContext& ctx, const model::Model&) {
  Stages s;
  s.push_back(make_sparse_stage(ctx, Site::AttnIn, {Role::Q, Role::K, Role::V}));
  s.push_back(make_sparse_stage(ctx, Site::AttnOut, {Role::O}));
  s.push_back(make_sparse_stage(ctx, Site::MlpIn, {Role::Gate, Role::Up}));
  s.push_back(make_sparse_stage(ctx, Site::MlpMid, {Role::Down}));
  return s;
}

// Option keys (CompressOptions::to_json) beyond the ones every method reads (kCommonKeys).
constexpr std::array<std::string_view, 1> kHessian = {"lambda_rel"};
constexpr std::array<std::string_view, 1> kL1 = {"alpha"};
constexpr std::array<std::string_view, 4> kRootCov = {"lambda_rel", "fit", "output_side", "split_heads"};
constexpr std::array<std::string_view, 15> kLatent = {"split_heads",
    "lambda_rel", "fit",      "output_side", "joint",       "qk_iters",   "vo_iters",   "ud_iters",
    "joint_tol",  "ud_tokens", "ud_min_tokens_per_ffn", "ud_precision", "ud_unit_tokens", "rope_window", "diagnostics"};

constexpr std::array<std::string_view, 3> kSparse = {"solver", "pattern", "sparse_iters"};
constexpr std::array<std::string_view, 1> kPattern = {"pattern"};
constexpr std::array<std::string_view, 2> kSparseGpt = {"pattern", "lambda_rel"};
// Low rank + sparse: unstructured only; lambda_rel damps the root covariance of its low-rank step.
constexpr std::array<std::string_view, 3> kLowRankSparse = {"solver", "sparse_iters", "lambda_rel"};

// SparseGPT's published damping (percdamp 0.01 of the mean diagonal), also under --preset default.
void sparsegpt_default(CompressOptions& o) { o.local.lambda_rel = 0.01; }

// --preset default beyond the paper for LatentLLM, each setting validated on TinyStories stories 1-116
// (docs/PRESETS.md).
void latentllm_default(CompressOptions& o) {
  // The uniform budget spread over modules and layers by the spectra of W·P (bench/results/rank_alloc).
  o.rank_alloc = RankAlloc::Global;
  o.alloc_score = AllocScore::Relative;
  // Joint up-down only with enough tokens for its [f, f] statistics (bench/results/ud_tokens).
  o.ud_min_tokens_per_ffn = 12;
  // The joint solvers' iterations stop once converged to 1e-6 of their loss.
  o.joint_tol = 1e-6;
}

struct MethodRow {
  Method id;
  std::string_view name;  // --method
  Preconditioner preconditioner;
  Junction junction;  // when --junction is not given
  Stages (*stages)(StageContext&, const model::Model&);
  std::span<const std::string_view> reads;
  void (*default_preset)(CompressOptions&) = nullptr;  // --preset default's own settings (null: the paper's)
};

// The rows, in the order of the CLI's list and of `sweep`'s default grid.
const std::array<MethodRow, 13> kRows = {{
    {Method::PlainSvd, "plain-svd", Preconditioner::Identity, Junction::Identity, local_stages, {}},
    {Method::AsvdHessian, "asvd-hessian", Preconditioner::DiagHessian, Junction::Identity, local_stages, kHessian},
    {Method::AsvdL1, "asvd-l1", Preconditioner::DiagL1, Junction::Identity, local_stages, kL1},
    {Method::AsvdL2, "asvd-l2", Preconditioner::DiagL2, Junction::Identity, local_stages, {}},
    {Method::AsvdCov, "asvd-cov", Preconditioner::Covariance, Junction::Identity, local_stages, kHessian},
    {Method::AsvdRootCov, "asvd-rootcov", Preconditioner::RootCovariance, Junction::Identity, local_stages, kRootCov},
    // Block identity is one of LatentLLM's own contributions (it saves r² weights per module).
    {Method::LatentLlm, "latentllm", Preconditioner::RootCovariance, Junction::BlockIdentity, latentllm_stages,
     kLatent, latentllm_default},
    // The quantization baselines (docs/QUANT.md): the pre-conditioner and junction are unused.
    {Method::Rtn, "rtn", Preconditioner::Identity, Junction::Identity, quantize_stages, {}, nullptr},
    {Method::Gptq, "gptq", Preconditioner::Identity, Junction::Identity, quantize_stages, {}, nullptr},
    // The sparse methods (appendix "Sparse Matrix"): the registry's pre-conditioner and junction are unused.
    {Method::Sparse, "sparse", Preconditioner::Identity, Junction::Identity, sparse_stages, kSparse, nullptr},
    {Method::Wanda, "wanda", Preconditioner::Identity, Junction::Identity, sparse_stages, kPattern, nullptr},
    {Method::SparseGpt, "sparsegpt", Preconditioner::Identity, Junction::Identity, sparse_stages, kSparseGpt,
     sparsegpt_default},
    // B·A + D (sec:spa): the sparse stage whitens its low-rank step itself (lowrank_sparse.hpp).
    {Method::LowRankSparse, "lowrank-sparse", Preconditioner::Identity, Junction::Identity, sparse_stages,
     kLowRankSparse, nullptr},
}};

// The low-rank rows (the first seven).
const std::array<Method, 7> kMethods = [] {
  std::array<Method, 7> a{};
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = kRows[i].id;
  return a;
}();

const MethodRow& row(Method m) {
  for (const auto& r : kRows)
    if (r.id == m) return r;
  throw Error(fmt::format("method {} has no registry row", static_cast<int>(m)));
}

// The options every method reads (CompressOptions::to_json always writes them).
constexpr std::array<std::string_view, 9> kCommonKeys = {"method", "ratio", "junction", "rank_alloc", "intra_layer",
                                                         "batch", "covariance", "update_bias", "pinv_floor_rel"};

}  // namespace

std::string_view method_name(Method m) { return row(m).name; }
Preconditioner preconditioner_of(Method m) { return row(m).preconditioner; }
Junction default_junction(Method m) { return row(m).junction; }
bool has_joint_parts(Method m) {
  const auto& reads = row(m).reads;
  return std::find(reads.begin(), reads.end(), "joint") != reads.end();
}
void apply_default_preset(Method m, CompressOptions& o) {
  if (row(m).default_preset) row(m).default_preset(o);
}
std::span<const Method> all_methods() { return kMethods; }
bool quantizes_dense(Method m) { return m == Method::Rtn || m == Method::Gptq; }
bool sparsifies(Method m) {
  return m == Method::Sparse || m == Method::Wanda || m == Method::SparseGpt || m == Method::LowRankSparse;
}
bool uses_gptq(const CompressOptions& o) { return o.method == Method::Gptq || (o.method != Method::Rtn && o.quant.gptq); }

Method parse_method(std::string_view name) {
  std::vector<std::string_view> names;
  for (const auto& r : kRows) {
    if (r.name == name) return r.id;
    names.push_back(r.name);
  }
  throw ConfigError(fmt::format("--method: unknown method (expected one of {}, got {})", fmt::join(names, ", "), name));
}

bool reads_option(const CompressOptions& o, std::string_view key) {
  const bool global = o.rank_alloc == RankAlloc::Global;
  if (key == "components") return o.components.towers();  // recorded when more than the language model
  // Quantization is every method's, recorded when it is on (CompressOptions::to_json).
  if (key == "bits" || key == "group" || key == "quantizer" || key == "bpw" || key == "head_bits") return true;
  if (std::find(kCommonKeys.begin(), kCommonKeys.end(), key) != kCommonKeys.end()) return true;
  // The global allocation's pre-pass measures root-covariance spectra for every method (sensitivity.cpp).
  if (global && (key == "alloc_score" || key == "alloc_tokens" || key == "lambda_rel" || key == "output_side")) {
    return true;
  }
  const auto& reads = row(o.method).reads;
  if (std::find(reads.begin(), reads.end(), key) == reads.end()) return false;
  // A joint part's options only where that part runs.
  const JointParts& j = o.joint;
  if (key == "qk_iters" || key == "rope_window") return j.qk;
  if (key == "vo_iters") return j.vo;
  if (key == "joint_tol") return j.qk || j.vo;
  if (key.starts_with("ud_")) return j.ud;
  if (key == "diagnostics") return j.qk || j.vo || j.ud;
  if (key == "split_heads") return o.split_heads;  // recorded when on, so that earlier records stay the same
  return true;
}

std::vector<std::string_view> methods_reading(std::string_view key) {
  std::vector<std::string_view> out;
  for (const auto& r : kRows)
    if (std::find(r.reads.begin(), r.reads.end(), key) != r.reads.end()) out.push_back(r.name);
  return out;
}

std::vector<std::unique_ptr<CompressStage>> plan_stages(StageContext& ctx, const model::Model& m) {
  return row(ctx.options().method).stages(ctx, m);
}

}  // namespace latentllm::compress
