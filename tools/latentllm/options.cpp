#include "options.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "latentllm/error.hpp"
#include "latentllm/log.hpp"

namespace latentllm::cli {

void add_method_options(CLI::App* sub, MethodArgs& a) {
  sub->add_option("--preset", a.preset,
                  "default (this project's configuration, validated on held-out text) or paper (the paper's protocol "
                  "where the two differ: --lambda 0.01, --no-intra-layer; docs/PRESETS.md); options given explicitly "
                  "override the preset")
      ->capture_default_str()->group("Method");
  sub->add_option("--junction", a.junction,
                  "Junction matrix: block-identity, identity, s-inv, sqrt-s-inv, or auto (identity for plain-svd and "
                  "asvd-*, the paper's baselines; block-identity for latentllm)")
      ->capture_default_str()->group("Method");
  sub->add_option("--lambda", a.lambda_rel,
                  fmt::format("Damping λ relative to the mean diagonal of XXᵀ (default {:g}; 0.01 with --preset paper)",
                              compress::kDefaultLambdaRel))
      ->group("Method");
  sub->add_option("--alpha", a.alpha, "Exponent of the diagonal l1 pre-conditioner")->capture_default_str()->group("Method");
  sub->add_option("--joint", a.joint, "Joint parts of --method latentllm: any of qk,vo,ud, none, or auto (the preset's: qk,ud)")
      ->capture_default_str()->group("Method");
  sub->add_option("--qk-iters", a.qk_iters, "Joint Q-K alternating updates")->capture_default_str()->group("Method");
  sub->add_option("--joint-tol", a.joint_tol,
                  "Joint Q-K and V-O stop iterating once an update lowers their loss by at most this fraction of "
                  "it (0 = always --qk-iters/--vo-iters; default: the preset's, default 1e-6, paper 0)")
      ->group("Method");
  sub->add_option("--vo-iters", a.vo_iters, "Joint V-O alternating updates")->capture_default_str()->group("Method");
  sub->add_option("--ud-iters", a.ud_iters, "Joint up-down iterations")->capture_default_str()->group("Method");
  sub->add_option("--ud-tokens", a.ud_tokens,
                  "Joint up-down on at most this many calibration tokens (evenly strided; 0 = all): bounds its "
                  "time (its passes over the tokens) and the inputs and outputs it keeps; below about 11 x ffn tokens it "
                  "did worse than no joint up-down on validation text (bench/results/ud_tokens)")->capture_default_str()->group("Method");
  sub->add_option("--ud-min-tokens-per-ffn", a.ud_min_tokens_per_ffn,
                  "Joint up-down only when the tokens it uses (all, or --ud-tokens) are at least this many times the "
                  "MLP width; below, gate/up/down are compressed locally with a note (default 12 for latentllm, 0 = "
                  "always with --preset paper or an explicit --joint ... ud; bench/results/ud_tokens)")
      ->group("Method");
  sub->add_option("--ud-precision", a.ud_precision,
                  "Joint up-down's passes over the tokens: f32 (sgemm, statistics summed in double) or f64")
      ->check(CLI::IsMember({"f32", "f64"}))->capture_default_str()->group("Method");
  sub->add_option("--rope-window", a.rope_window, "RoPE-aware joint Q-K over offsets 0..w (0 = plain)")
      ->capture_default_str()->group("Method");
  sub->add_option("--fit", a.fit,
                  "Fit of the root-covariance modules (asvd-rootcov; latentllm's local ones and joint Q-K): local (their output "
                  "on the compressed model's inputs, ‖(W − B·A)·X̂‖) or compensate (the dense model's output from "
                  "the compressed model's inputs, ‖W·X − B·A·X̂‖: also runs the calibration through the dense "
                  "layers, one more forward and [N·L, d] hidden states), or auto (the preset's)")
      ->check(CLI::IsMember({"auto", "local", "compensate"}))->capture_default_str()->group("Method");
  sub->add_flag("--diagnostics", a.diagnostics,
                "Also compress every joint group separately and log both losses (extra decompositions, discarded)")
      ->group("Method");
  sub->add_option("--rank-alloc", a.rank_alloc,
                  "Ranks under the ratio's parameter budget: uniform (every module keeps 1 - R of its weights), "
                  "global (the same total spread over modules and layers by the spectra of W·P measured in a "
                  "dense pre-pass over the calibration windows), or auto (the preset's)")
      ->check(CLI::IsMember({"auto", "uniform", "global"}))->capture_default_str()->group("Method");
  sub->add_option("--alloc-score", a.alloc_score,
                  "How --rank-alloc global compares modules: relative (loss drop over the module's output energy) "
                  "or grouped (relative, each module type keeps its uniform total; only layers compete)")
      ->check(CLI::IsMember({"relative", "grouped"}))->capture_default_str()->group("Method");
  sub->add_option("--alloc-tokens", a.alloc_tokens,
                  "The global pre-pass measures the spectra on the first calibration windows of at most this many "
                  "tokens (at least one window; 0 = all)")->capture_default_str()->group("Method");
  sub->add_flag("--no-intra-layer", a.no_intra_layer,
                "Gather all of a layer's statistics on the dense layer (SparseGPT) instead of re-running it "
                "after each stage")->group("Calibration");
  sub->add_option("--covariance", a.covariance,
                  "Products of the input covariances XXᵀ, always accumulated in double: f64 (widened, dsyrk), f32 "
                  "(ssyrk per 1024 tokens, each block's sum added in double: 1.7-2.1x faster, entries within ~2e-6 "
                  "of Σ|x_i·x_j|) or auto (the preset's: default f32, paper f64)")
      ->check(CLI::IsMember({"auto", "f64", "f32"}))->capture_default_str()->group("Calibration");
  sub->add_option("--output-side", a.output_side,
                  "Fit the wide root-covariance modules (down_proj / fc2: out < 0.41 x in) from the statistics of "
                  "their outputs W·x instead of the [in, in] input covariance: the same factors to float rounding, "
                  "about 100 s a layer less at the Llama-3-8B shape; taken with --covariance f32 and --lambda > 0, "
                  "not with --fit compensate (on), or never (off)")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str()->group("Calibration");
  sub->add_option("--batch", a.batch, "Windows per forward call")->capture_default_str()->group("Run");
}

void add_calib_options(CLI::App* sub, CalibArgs& a) {
  sub->add_option("--calib", a.source, "Calibration source: c4 (JSON lines) or text")
      ->check(CLI::IsMember({"c4", "text"}))->capture_default_str()->group("Calibration");
  sub->add_option("--calib-data", a.data, "Calibration file")->group("Calibration");
  sub->add_option("--nsamples", a.nsamples, "Calibration windows")->capture_default_str()->group("Calibration");
  sub->add_option("--seqlen", a.seqlen, "Tokens per calibration window (0 = min(2048, max positions))")
      ->capture_default_str()->group("Calibration");
  sub->add_option("--seed", a.seed, "Sampling seed")->capture_default_str()->group("Calibration");
  sub->add_option("--calib-sampling", a.sampling,
                  "random (GPTQ: a random document with more than --seqlen tokens, a random window of it; each "
                  "document tokenized on its own, with the tokenizer's BOS) or contiguous (window i = tokens "
                  "[i·L, (i+1)·L) of the whole data tokenized once, BOS once at the very start as the model's "
                  "tokenizer adds it, so only window 0 begins with BOS; c4 joins the text of every document of "
                  "the file by \" \", text takes the file as it is; --seed is unused)")
      ->check(CLI::IsMember({"random", "contiguous"}))->capture_default_str()->group("Calibration");
  sub->add_option("--calib-holdout", a.holdout,
                  "Leave the last N documents of the c4 file out of the calibration (either sampling); 100 keeps "
                  "`ppl --dataset c4-heldout` on the same file held out")
      ->capture_default_str()->group("Calibration");
}

namespace {

compress::JointParts parse_joint(const std::string& spec) {
  compress::JointParts j{false, false, false};
  std::string rest = spec;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string part = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    if (part == "qk") j.qk = true;
    else if (part == "vo") j.vo = true;
    else if (part == "ud") j.ud = true;
    else if (part != "none" && !part.empty())
      throw ConfigError(fmt::format("--joint: unknown part (expected qk, vo, ud, none or auto, got {})", part));
  }
  return j;
}

}  // namespace

std::string joint_spec(const compress::JointParts& j) {
  std::string s;
  if (j.qk) s += "qk";
  if (j.vo) s += std::string(s.empty() ? "" : ",") + "vo";
  if (j.ud) s += std::string(s.empty() ? "" : ",") + "ud";
  return s.empty() ? "none" : s;
}

compress::CompressOptions to_compress_options(const MethodArgs& a, const std::string& method, double ratio) {
  if (!(ratio > 0.0 && ratio < 1.0)) {  // also NaN
    throw ConfigError(fmt::format("--ratio: compression ratio out of range (expected 0 < R < 1, got {})", ratio));
  }
  if (!std::isnan(a.lambda_rel) && !(a.lambda_rel >= 0.0 && std::isfinite(a.lambda_rel))) {
    throw ConfigError(fmt::format("--lambda (expected a finite number >= 0, got {})", a.lambda_rel));
  }
  if (!(a.alpha > 0.0 && std::isfinite(a.alpha))) {
    throw ConfigError(fmt::format("--alpha (expected a finite number > 0, got {})", a.alpha));
  }
  compress::CompressOptions o =
      compress::preset_options(compress::parse_preset(a.preset), compress::parse_method(method), ratio);
  if (a.junction != "auto") o.local.junction = compress::parse_junction(a.junction);
  if (!std::isnan(a.lambda_rel)) o.local.lambda_rel = a.lambda_rel;
  o.local.alpha = a.alpha;
  if (a.joint != "auto") {
    o.joint = parse_joint(a.joint);
    o.ud_min_tokens_per_ffn = 0;  // joint up-down asked for by name runs whatever the token count
  }
  if (!std::isnan(a.ud_min_tokens_per_ffn)) {
    if (!(a.ud_min_tokens_per_ffn >= 0 && std::isfinite(a.ud_min_tokens_per_ffn))) {
      throw ConfigError(fmt::format("--ud-min-tokens-per-ffn (expected a finite number >= 0, got {})",
                                    a.ud_min_tokens_per_ffn));
    }
    o.ud_min_tokens_per_ffn = a.ud_min_tokens_per_ffn;
  }
  if (a.alloc_tokens < 0) throw ConfigError(fmt::format("--alloc-tokens (expected >= 0, got {})", a.alloc_tokens));
  o.alloc_max_tokens = a.alloc_tokens;
  if (a.qk_iters < 0 || a.vo_iters < 0 || a.ud_iters < 0 || a.rope_window < 0) {
    throw ConfigError(fmt::format("--qk-iters/--vo-iters/--ud-iters/--rope-window (expected >= 0, got {}/{}/{}/{})",
                                  a.qk_iters, a.vo_iters, a.ud_iters, a.rope_window));
  }
  if (a.ud_tokens < 0) throw ConfigError(fmt::format("--ud-tokens (expected >= 0, got {})", a.ud_tokens));
  o.ud_max_tokens = a.ud_tokens;
  o.ud_f32 = a.ud_precision == "f32";
  if (a.batch <= 0) throw ConfigError(fmt::format("--batch (expected > 0, got {})", a.batch));
  o.qk_iters = a.qk_iters;
  o.vo_iters = a.vo_iters;
  o.diagnostics = a.diagnostics;
  o.ud_iters = a.ud_iters;
  o.rope_window = a.rope_window;
  if (a.no_intra_layer) o.pipeline.sequential_within_layer = false;
  o.pipeline.batch_windows = a.batch;
  if (a.covariance != "auto") o.pipeline.covariance_f32 = a.covariance == "f32";
  // Undamped statistics (--lambda 0) need exact null spaces (pinv-drop, rank-reduced): float rounding
  // would leave them at noise-level eigenvalues (~1e-7 of the largest) instead of zero.
  else if (o.local.lambda_rel == 0) o.pipeline.covariance_f32 = false;
  if (a.joint_tol) {
    if (!(*a.joint_tol >= 0 && *a.joint_tol < 1)) {  // also NaN
      throw ConfigError(fmt::format("--joint-tol (expected 0 <= tol < 1, got {})", *a.joint_tol));
    }
    o.joint_tol = *a.joint_tol;
  }
  if (a.rank_alloc != "auto") o.rank_alloc = compress::parse_rank_alloc(a.rank_alloc);
  o.alloc_score = compress::parse_alloc_score(a.alloc_score);
  if (a.fit != "auto" && a.fit != "local" && a.fit != "compensate") {
    throw ConfigError(fmt::format("--fit (expected local, compensate or auto, got {})", a.fit));
  }
  if (a.fit != "auto") o.error_compensation = a.fit == "compensate";
  o.output_side = a.output_side == "on";
  return o;
}

calib::CalibOptions to_calib_options(const CalibArgs& a, const model::ModelConfig& config) {
  if (a.data.empty()) {
    throw ConfigError("--calib-data is required: the calibration text (c4 JSON lines or a text file)");
  }
  calib::CalibOptions co;
  co.source = a.source;
  co.data = a.data;
  co.nsamples = a.nsamples;
  co.seqlen = a.seqlen > 0 ? a.seqlen : static_cast<int>(std::min<std::int64_t>(2048, config.max_position_embeddings));
  co.seed = a.seed;
  co.holdout_docs = a.holdout;
  if (a.sampling == "random") co.sampling = calib::Sampling::Random;
  else if (a.sampling == "contiguous") co.sampling = calib::Sampling::Contiguous;
  else throw ConfigError(fmt::format("--calib-sampling (expected random or contiguous, got {})", a.sampling));
  return co;
}

nlohmann::json method_json(const MethodArgs& a, const std::string& method, double ratio) {
  const compress::CompressOptions o = to_compress_options(a, method, ratio);
  nlohmann::json j = {{"method", method}, {"preset", a.preset}, {"ratio", ratio},
          {"junction", compress::junction_name(o.local.junction)}, {"lambda_rel", o.local.lambda_rel},
          {"alpha", a.alpha}, {"joint", method == "latentllm" ? joint_spec(o.joint) : "none"}, {"qk_iters", a.qk_iters},
          {"vo_iters", a.vo_iters}, {"ud_iters", a.ud_iters}, {"rope_window", a.rope_window}, {"ud_tokens", a.ud_tokens},
          {"ud_precision", a.ud_precision}, {"intra_layer", o.pipeline.sequential_within_layer},
          {"covariance", o.pipeline.covariance_f32 ? "f32" : "f64"}, {"joint_tol", o.joint_tol}, {"rank_alloc", compress::rank_alloc_name(o.rank_alloc)},
          {"fit", o.error_compensation ? "compensate" : "local"}, {"output_side", o.output_side}};
  if (o.rank_alloc != compress::RankAlloc::Uniform) {
    j["alloc_score"] = compress::alloc_score_name(o.alloc_score);
    j["alloc_tokens"] = o.alloc_max_tokens;
  }
  if (method == "latentllm" && o.joint.ud) j["ud_min_tokens_per_ffn"] = o.ud_min_tokens_per_ffn;
  return j;
}

nlohmann::json calib_json(const calib::CalibOptions& c, const std::string& sampling) {
  return {{"source", c.source}, {"data", c.data.filename().string()}, {"nsamples", c.nsamples},
          {"seqlen", c.seqlen}, {"seed", c.seed}, {"sampling", sampling}, {"holdout_docs", c.holdout_docs}};
}

bool held_out(io::Dataset dataset, const std::string& eval_file, const nlohmann::json* calibration) {
  if (dataset != io::Dataset::C4Heldout || calibration == nullptr || !calibration->is_object()) return true;
  const std::string file = std::filesystem::path(eval_file).filename().string();
  const bool same = calibration->value("source", "") == "c4" && calibration->value("data", "") == file;
  const int holdout = calibration->value("holdout_docs", 0);
  if (!same || holdout >= static_cast<int>(io::kC4HeldoutDocs)) return true;
  log_warn("c4-heldout: the model was calibrated on {} with its last {} documents left out, not the {} this dataset "
           "evaluates on (compress --calib-holdout {}): this perplexity is not held out", file, holdout,
           io::kC4HeldoutDocs, io::kC4HeldoutDocs);
  return false;
}

nlohmann::json plan_json(const compress::RankPlan& p) {
  nlohmann::json mods = nlohmann::json::array();
  for (const auto& m : p.modules)
    mods.push_back({{"name", m.name}, {"out", m.out}, {"in", m.in}, {"rank", m.rank}, {"params", m.params},
                    {"dense_params", m.dense_params}, {"macs", m.macs}, {"dense_macs", m.dense_macs}});
  return {{"ratio", p.ratio}, {"junction", compress::junction_name(p.junction)}, {"n_tok", p.n_tok},
          {"params", p.params()}, {"dense_params", p.dense_params()}, {"macs", p.macs()},
          {"dense_macs", p.dense_macs()}, {"flops", 2 * p.macs()}, {"dense_flops", 2 * p.dense_macs()},
          {"achieved_ratio", p.achieved_ratio()}, {"modules", mods}};
}

std::string gib_option(std::int64_t bytes) {
  const std::int64_t gib = std::int64_t{1} << 30;
  return fmt::format("{}G", (bytes + gib - 1) / gib);
}

}  // namespace latentllm::cli
