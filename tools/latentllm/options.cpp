#include "options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <thread>
#include <utility>

#include <fmt/ranges.h>

#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/log.hpp"
#include "latentllm/dist.hpp"
#include "latentllm/threads.hpp"

namespace latentllm::cli {

void add_method_options(CLI::App* sub, MethodArgs& a) {
  a.app = sub;
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
  sub->add_option("--joint", a.joint, "Joint parts of --method latentllm: any of qk,vo,ud, qkv (one A shared by q, k "
                  "and v; not with qk or vo), none, or auto (the preset's: qk,ud)")
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
  sub->add_option("--ud-unit-tokens", a.ud_unit_tokens,
                  "Tokens per unit of joint up-down's passes (0 = about 4096): the unit of its exact sums and of "
                  "the split across MPI ranks (each rank passes whole units); small values are for tests")
      ->capture_default_str()->group("Method");
  sub->add_option("--rope-window", a.rope_window, "RoPE-aware joint Q-K over offsets 0..w (0 = plain)")
      ->capture_default_str()->group("Method");
  sub->add_option("--fit", a.fit,
                  "Fit of the root-covariance modules (asvd-rootcov; latentllm's local ones and joint Q-K): local (their output "
                  "on the compressed model's inputs, ‖(W − B·A)·X̂‖) or compensate (the dense model's output from "
                  "the compressed model's inputs, ‖W·X − B·A·X̂‖: also runs the calibration through the dense "
                  "layers, one more forward and [N·L, d] hidden states), or auto (the preset's)")
      ->check(CLI::IsMember({"auto", "local", "compensate"}))->capture_default_str()->group("Method");
  sub->add_flag("--split-heads", a.split_heads,
                "latentllm (without joint qk, vo, qkv) and asvd-rootcov: q_proj, k_proj and v_proj factored head by head, "
                "B = diag(B_1 … B_h) (the paper's appendix split-head compression; each head's rank from the budget)")
      ->group("Method");
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
  sub->add_option("--batch", a.batch, "Windows per forward call; 0 = about 4096 tokens (as ppl --batch)")
      ->capture_default_str()->group("Run");
  sub->add_option("--bits", a.bits,
                  "Quantize every compressed module's factors B and A to this many bits: 8, 4, 3 or 2, in groups of "
                  "--group input columns with F16 scales and zero points (16 = no quantization; docs/QUANT.md)")
      ->check(CLI::IsMember({2, 3, 4, 8, 16}))->capture_default_str()->group("Quantization");
  sub->add_option("--bpw", a.bpw,
                  "One budget in bits per original weight of the compressed modules (codes, scales and zero points "
                  "included), in place of --ratio and --bits: a dense pre-pass measures each module's spectrum and "
                  "rounding error, and each module's rank and bits (2, 3, 4, 8 or 16) are chosen together to lose "
                  "least (implies --rank-alloc global; docs/QUANT.md); sweep: a comma-separated grid of budgets in place of "
                  "--ratios")
      ->group("Quantization");
  sub->add_option("--head-bits", a.head_bits,
                  "Store the LM head as codes of this many bits, 8 or 4, in groups of --group input columns (round "
                  "to nearest; a tied embedding stays as stored for the lookups; 16 = as stored; docs/QUANT.md)")
      ->capture_default_str()->group("Quantization");
  sub->add_option("--group", a.group, "Input columns per quantization group (a multiple of 8)")
      ->capture_default_str()->group("Quantization");
  sub->add_option("--quantizer", a.quantizer,
                  "rtn (round to nearest on each group's min-max grid: the paper's rule), gptq (error-compensating, "
                  "on each module's calibration statistics: A on the site covariance C, B on A'·C·A'ᵀ) or auto "
                  "(the preset's: default gptq, paper rtn)")
      ->check(CLI::IsMember({"auto", "rtn", "gptq"}))->capture_default_str()->group("Quantization");
  sub->add_option("--solver", a.solver,
                  "--method sparse, lowrank-sparse: hard (hard shrinkage: gradient steps on the full-covariance loss, "
                  "each keeping the largest entries; the paper's best) or fista (soft shrinkage, its threshold "
                  "searched for the sparsity; unstructured only)")
      ->capture_default_str()->group("Sparsity");
  sub->add_option("--pattern", a.pattern,
                  "--method sparse, wanda, sparsegpt: unstructured (any --ratio of each module's weights zero) or "
                  "2:4 (at most 2 non-zero in every 4 consecutive inputs of a row; --ratio 0.5)")
      ->capture_default_str()->group("Sparsity");
  sub->add_option("--sparse-iters", a.sparse_iters,
                  "--method sparse, lowrank-sparse: iterations of the solver (hard: shrinkage steps, then as many refit "
                  "steps on the support; fista: steps per threshold of its search)")
      ->capture_default_str()->group("Sparsity");
}

void add_calib_options(CLI::App* sub, CalibArgs& a) {
  sub->add_option("--calib", a.source,
                  "Calibration source: c4 (JSON lines), text, or scienceqa (a LLaVA checkpoint only: --nsamples "
                  "problems of the train split of a ScienceQA-layout folder, each prompt with its image one sequence "
                  "of its own length; the paper's LMM protocol)")
      ->check(CLI::IsMember({"c4", "text", "scienceqa"}))->capture_default_str()->group("Calibration");
  sub->add_option("--calib-data", a.data, "REQUIRED unless compress --dry-run: calibration file (the folder for "
                                          "scienceqa)")->group("Calibration");
  sub->add_option("--nsamples", a.nsamples, "Calibration windows")->capture_default_str()->group("Calibration");
  sub->add_option("--seqlen", a.seqlen, "Tokens per calibration window (0 = min(2048, max positions))")
      ->capture_default_str()->group("Calibration");
  sub->add_option("--seed", a.seed, "Sampling seed, an integer in [0, 2^64 - 1]")->capture_default_str()->group("Calibration");
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


std::string joint_spec(const compress::JointParts& j) { return compress::joint_parts_name(j); }

double parse_bpw(const std::string& text) {
  std::size_t used = 0;
  double v = std::nan("");
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(v > 0 && v <= 16)) {
    throw ConfigError(fmt::format("--bpw (expected 0 < bits per weight <= 16, got {})", text));
  }
  return v;
}

compress::CompressOptions to_compress_options(const MethodArgs& a, const std::string& method, double ratio) {
  compress::CompressOptions o =
      compress::preset_options(compress::parse_preset(a.preset), compress::parse_method(method), ratio);
  if (a.junction != "auto") o.local.junction = compress::parse_junction(a.junction);
  if (!std::isnan(a.lambda_rel)) o.local.lambda_rel = a.lambda_rel;
  o.local.alpha = a.alpha;
  if (a.joint != "auto") {
    o.joint = compress::parse_joint_parts(a.joint);
    o.ud_min_tokens_per_ffn = 0;  // joint up-down asked for by name runs whatever the token count
  }
  if (!std::isnan(a.ud_min_tokens_per_ffn)) o.ud_min_tokens_per_ffn = a.ud_min_tokens_per_ffn;
  o.alloc_max_tokens = a.alloc_tokens;
  o.ud_max_tokens = a.ud_tokens;
  o.ud_f32 = a.ud_precision == "f32";
  o.ud_unit_tokens = a.ud_unit_tokens;
  o.qk_iters = a.qk_iters;
  o.vo_iters = a.vo_iters;
  o.diagnostics = a.diagnostics;
  o.split_heads = a.split_heads;
  o.ud_iters = a.ud_iters;
  o.rope_window = a.rope_window;
  if (a.no_intra_layer) o.pipeline.sequential_within_layer = false;
  if (a.batch < 0) throw ConfigError(fmt::format("--batch (expected >= 0, got {})", a.batch));
  o.pipeline.batch_windows = a.batch > 0 ? a.batch : 1;  // 0: resolved by resolve_batch once seqlen is known
  if (a.covariance != "auto") o.pipeline.covariance_f32 = a.covariance == "f32";
  // Undamped statistics (--lambda 0) need exact null spaces (pinv-drop, rank-reduced): float rounding
  // would leave them at noise-level eigenvalues (~1e-7 of the largest) instead of zero.
  else if (o.local.lambda_rel == 0) o.pipeline.covariance_f32 = false;
  if (a.joint_tol) o.joint_tol = *a.joint_tol;
  if (a.rank_alloc != "auto") o.rank_alloc = compress::parse_rank_alloc(a.rank_alloc);
  o.alloc_score = compress::parse_alloc_score(a.alloc_score);
  if (a.fit != "auto") o.error_compensation = a.fit == "compensate";
  o.output_side = a.output_side == "on";
  o.quant.bits = a.bits;
  o.quant.group = a.group;
  o.quant.head_bits = a.head_bits;
  if (!a.bpw.empty()) {
    o.quant.bpw = parse_bpw(a.bpw);
    if (a.rank_alloc == "auto") o.rank_alloc = compress::RankAlloc::Global;
  }
  if (a.quantizer != "auto") o.quant.gptq = a.quantizer == "gptq";
  o.sparse.solver = compress::parse_sparse_solver(a.solver);
  o.sparse.pattern = compress::parse_sparse_pattern(a.pattern);
  o.sparse.iters = a.sparse_iters;
  o.validate();
  return o;
}

void resolve_batch(const MethodArgs& a, compress::CompressOptions& o, int seqlen) {
  if (a.batch == 0 && seqlen > 0) o.pipeline.batch_windows = std::max(1, 4096 / seqlen);
}

std::vector<std::string> unread_options(const MethodArgs& a, const compress::CompressOptions& o) {
  std::vector<std::string> out;
  if (a.app == nullptr) return out;
  for (const auto& [key, flag] : compress::option_flags())
    if (a.app->count(std::string(flag)) > 0 && !compress::reads_option(o, key)) out.emplace_back(flag);
  return out;
}

void check_options_read(const MethodArgs& a, const compress::CompressOptions& o) {
  for (const std::string& flag : unread_options(a, o)) {
    std::string_view key;
    for (const auto& [k, f] : compress::option_flags())
      if (f == flag) key = k;
    const auto readers = compress::methods_reading(key);
    const std::string who = readers.empty() ? "read by every method with --rank-alloc global"
                                            : fmt::format("read by {}", fmt::join(readers, ", "));
    throw ConfigError(fmt::format("{}: not read by --method {} with these options (expected only options the run "
                                  "uses; {}): it would be recorded as if used", flag, compress::method_name(o.method),
                                  who));
  }
}

calib::CalibOptions to_calib_options(const CalibArgs& a, const model::ModelConfig* config) {
  if (a.data.empty()) {
    throw ConfigError("--calib-data is required: the calibration text (c4 JSON lines or a text file)");
  }
  calib::CalibOptions co;
  co.source = a.source;
  co.data = a.data;
  co.nsamples = a.nsamples;
  if (a.seqlen < 0 || a.seqlen == 1) {
    throw ConfigError(fmt::format("--seqlen (expected 0 for the model's default or >= 2, got {})", a.seqlen));
  }
  co.seqlen = a.seqlen;
  if (config) calib::resolve_seqlen(co, *config);
  co.seed = parse_seed(a.seed);
  if (a.source == "scienceqa") {
    // Each problem is one sequence of its own length: the window options do not apply (never recorded as used).
    const char* unread = a.seqlen != 0 ? "--seqlen" : a.sampling != "random" ? "--calib-sampling"
                         : a.holdout != 0 ? "--calib-holdout" : nullptr;
    if (unread) {
      throw ConfigError(fmt::format("{}: not read by --calib scienceqa (expected no window option: each problem is "
                                    "one calibration sequence of its own length)", unread));
    }
    return co;
  }
  co.holdout_docs = a.holdout;
  // The parser admits only these two (docs/ERRORS.md, cli-value-choice).
  co.sampling = a.sampling == "contiguous" ? calib::Sampling::Contiguous : calib::Sampling::Random;
  return co;
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
  for (const auto& m : p.modules) {
    mods.push_back({{"name", m.name}, {"out", m.out}, {"in", m.in}, {"rank", m.rank}, {"params", m.params},
                    {"dense_params", m.dense_params}, {"macs", m.macs}, {"dense_macs", m.dense_macs}});
    if (m.bits > 0) mods.back()["bits"] = m.bits;  // --bpw's choice
  }
  return {{"ratio", p.ratio}, {"junction", compress::junction_name(p.junction)}, {"n_tok", p.n_tok},
          {"params", p.params()}, {"dense_params", p.dense_params()}, {"macs", p.macs()},
          {"dense_macs", p.dense_macs()}, {"flops", 2 * p.macs()}, {"dense_flops", 2 * p.dense_macs()},
          {"achieved_ratio", p.achieved_ratio()}, {"modules", mods}};
}

namespace {
bool g_quiet = false;
bool g_verbose = false;
std::string g_root_only;  // a command rank 0 runs alone under K > 1 ranks (run_on_root_only)
}  // namespace

void add_run_options(CLI::App* sub, RunArgs& a) {
  sub->add_option("--threads", a.threads, "Threads of every parallel loop and of the compressor's independent decompositions (0 = all cores)")
      ->capture_default_str()->group("Run");
  sub->add_flag("--quiet,-q", a.quiet, "Only warnings and errors on stderr: no progress lines, no plans")->group("Run");
  sub->add_flag("--verbose", a.verbose, "Memory plans item by item on stderr (default: one summary line each)")
      ->group("Run");
  sub->add_flag("--allow-unused-tensors", a.allow_unused_tensors,
                "Run a checkpoint whose files hold tensors config.json's architecture does not use (by default an "
                "error: the config and the weights disagree)")->group("Run");
}

void add_weights_option(CLI::App* sub, RunArgs& a) {
  a.weights = "stored";
  sub->add_option("--weights", a.weights,
                  "How the weights are held: stored (F16/BF16 kept as the checkpoint stores them, mapped, widened "
                  "inside the kernels) or f32 (widened to float32 at load; 2x the memory for a 16-bit checkpoint)")
      ->capture_default_str()->group("Run");
}

void apply_run_options(const RunArgs& a) {
  model::parse_weights(a.weights);  // ConfigError before any work
  if (a.threads < 0) throw ConfigError(fmt::format("--threads (expected >= 0, got {})", a.threads));
  // Under K ranks only rank 0 reports progress (every rank still prints its warnings and errors).
  g_quiet = a.quiet || !dist::is_root();
  g_verbose = a.verbose;
  if (g_quiet) set_log_level(LogLevel::Warn);
  if (!dist::is_root()) set_log_level(LogLevel::Error);  // rank 0 prints the warnings every rank shares
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores > 0 && a.threads > cores) {
    log_warn("--threads {} is more than this machine's {} cores: the extra threads share cores and usually slow "
             "the run down", a.threads, cores);
  }
  core::set_num_threads(a.threads);
  if (dist::size() > 1 && !g_root_only.empty()) {
    log_info("ranks: {} processes; {} runs on rank 0 alone with {} threads, the other ranks wait", dist::size(),
             g_root_only, core::num_threads());
  } else if (dist::size() > 1) {
    log_info("ranks: {} processes x {} threads each", dist::size(), core::num_threads());
  }
}

bool quiet() { return g_quiet; }

void print_memory_plan(const std::string& command, const core::MemoryPlan& plan, const std::string& budget_source) {
  if (quiet()) return;
  std::fprintf(stderr, "%s: memory plan %s: %s of %s budget (%s; %s)%s\n", command.c_str(), plan.title.c_str(),
               core::format_bytes(plan.total()).c_str(), core::format_bytes(plan.budget).c_str(),
               plan.fits() ? "fits" : "does not fit", budget_source.c_str(), g_verbose ? "" : "; --verbose lists the items");
  if (!g_verbose) return;
  const std::string items = plan.describe();  // its first line is the summary above
  std::fputs(items.substr(items.find('\n') + 1).c_str(), stderr);
}

void run_on_root_only(const std::string& command) { g_root_only = command; }


std::unique_ptr<io::Tokenizer> model_tokenizer(const std::string& model_dir, const model::ModelConfig& config) {
  auto tok = io::load_tokenizer(model_dir);
  io::check_tokenizer_vocab(*tok, config.vocab_size, model_dir);
  return tok;
}

void check_seqlen(int seqlen, const model::ModelConfig& config, std::string_view option) {
  if (seqlen > config.max_position_embeddings) {
    throw ConfigError(fmt::format("{} beyond the model's context (expected at most max_position_embeddings = {}, got "
                                  "{})", option, config.max_position_embeddings, seqlen));
  }
}

std::uint64_t parse_seed(const std::string& text, std::string_view option) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || text[0] == '+' || ec != std::errc() || ptr != end) {
    throw ConfigError(fmt::format("{} (expected an integer in [0, 18446744073709551615], got {})", option, text));
  }
  return v;
}


core::MemoryPlan check_inference_memory(const std::string& command, const std::string& model_dir, const std::string& max_memory,
                            std::int64_t positions, const RunArgs& run) {
  const std::int64_t budget = max_memory.empty() ? core::default_memory_budget()
                                                 : core::parse_bytes(max_memory, "--max-memory");
  const auto lazy = model::Model::load(model_dir, run.load(/*lazy=*/true));
  core::MemoryPlan plan = eval::plan_inference_memory(*lazy, positions, budget);
  if (!lazy->config().multimodal_architecture.empty()) {
    std::int64_t towers = 0;
    for (const auto& [part, n] : model::llava_component_params(model_dir))
      if (part != "language") towers += 4 * n;
    plan.add("vision tower and projector (float32)", towers, "widened at load");
  }
  print_memory_plan(command, plan, max_memory.empty() ? core::default_budget().source + "; --max-memory" : "--max-memory");
  if (plan.fits()) return plan;
  throw ConfigError(fmt::format("--max-memory: budget too small for {} (expected at least {}: {}; got {}); the "
                                "weights are held as {} (--weights {}): use --max-memory {} on a machine with that memory",
                                command, core::format_bytes(plan.total()), plan.summary(), core::format_bytes(budget),
                                run.weights == "f32" ? "float32" : "stored", run.weights, core::gib_option(plan.total())));
}

// The output directory as given, "dir/" naming "dir" (its progress is "dir.resume", not "dir/.resume").
std::string output_dir(const std::string& given) {
  std::filesystem::path p = std::filesystem::path(given).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p.string();
}

DType parse_storage_dtype(const std::string& s) {
  if (s == "f32") return DType::F32;
  if (s == "f16") return DType::F16;
  if (s == "bf16") return DType::BF16;
  throw ConfigError(fmt::format("--dtype (expected f16, bf16 or f32, got {})", s));
}

}  // namespace latentllm::cli
