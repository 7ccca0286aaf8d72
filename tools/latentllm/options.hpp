// Options shared by `compress` and `sweep` (the method's knobs and the calibration set), and helpers of the commands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/model.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::cli {

struct MethodArgs {
  // "auto" / NaN: the preset's value for the method (compress::preset_options).
  std::string preset = "default", junction = "auto", joint = "auto", covariance = "auto", ud_precision = "f32";
  std::string rank_alloc = "auto", alloc_score = "relative", fit = "auto", output_side = "on";
  double lambda_rel = std::numeric_limits<double>::quiet_NaN(), alpha = 0.5;
  int qk_iters = 8, vo_iters = 8, ud_iters = 4, rope_window = 0, batch = 8;
  std::int64_t ud_tokens = compress::CompressOptions{}.ud_max_tokens;
  int ud_unit_tokens = 0;
  std::int64_t alloc_tokens = compress::CompressOptions{}.alloc_max_tokens;
  double ud_min_tokens_per_ffn = std::numeric_limits<double>::quiet_NaN();
  std::optional<double> joint_tol;  // unset: the preset's
  bool no_intra_layer = false, diagnostics = false, split_heads = false;
  int bits = 16, group = 128, head_bits = 16;
  std::string bpw;  // --bpw: one budget (compress) or a comma-separated grid of them (sweep); empty: none
  std::string quantizer = "auto";  // auto: the preset's (default gptq, paper rtn)
  std::string solver = "hard", pattern = "unstructured";  // the sparse methods
  int sparse_iters = 100;
  const CLI::App* app = nullptr;  // the subcommand, to tell which options were given
};

struct CalibArgs {
  std::string source = "c4", data, sampling = "random";
  int nsamples = 64, seqlen = 0, holdout = 0;
  std::string seed = "0";  // parse_seed: an integer in [0, 2^64 − 1]
};

// Options every command that computes has: --threads and --quiet (group "Run").
struct RunArgs {
  int threads = 0;
  bool quiet = false;
  bool verbose = false;               // --verbose: memory plans item by item
  bool allow_unused_tensors = false;  // --allow-unused-tensors (model::LoadOptions)
  std::string weights = "f32";        // --weights (add_weights_option): "f32" or "stored"
  model::LoadOptions load(bool lazy = false, bool scan_finite = false) const {
    return {.lazy = lazy, .scan_finite = scan_finite, .allow_unused_tensors = allow_unused_tensors,
            .weights = model::parse_weights(weights)};
  }
};
void add_run_options(CLI::App* sub, RunArgs& a);
// Adds --weights f32|stored (group "Run", default stored): how the decoder layers' weights are held
// (model::LoadOptions::weights).
void add_weights_option(CLI::App* sub, RunArgs& a);
// Checks --threads (>= 0; a warning above the machine's cores), sets the thread count, and with --quiet
// keeps only warnings and errors on stderr (no progress, no plans).
void apply_run_options(const RunArgs& a);
// Whether --quiet was given: progress and plans printed by the CLI itself are then left out.
bool quiet();
// Prints a memory plan on stderr (unless --quiet) as `<command>: memory plan <title>: <total> of <budget>
// budget (fits|does not fit; <budget's source>)`, and with --verbose every item below it.
void print_memory_plan(const std::string& command, const core::MemoryPlan& plan, const std::string& budget_source);
// Under K > 1 ranks: `command` runs on rank 0 alone (Ranks::Root), which apply_run_options says in its
// "ranks:" line.
void run_on_root_only(const std::string& command);

// The tokenizer of `model_dir`, refused when it has more ids than the model's vocab_size
// (io::check_tokenizer_vocab): before any work, never garbage later.
std::unique_ptr<io::Tokenizer> model_tokenizer(const std::string& model_dir, const model::ModelConfig& config);
// Refuses a window longer than the model's trained context (`option` names it), before any work.
void check_seqlen(int seqlen, const model::ModelConfig& config, std::string_view option);

// --seed as given: an integer in [0, 2^64 − 1] (a negative or larger value is refused, not wrapped).
std::uint64_t parse_seed(const std::string& text, std::string_view option = "--seed");

// Adds --preset --junction --lambda --alpha --joint --qk-iters --vo-iters --joint-tol --ud-iters --ud-tokens
// --ud-min-tokens-per-ffn --rope-window --diagnostics --rank-alloc --alloc-score --alloc-tokens (group "Method") and --no-intra-layer --batch.
void add_method_options(CLI::App* sub, MethodArgs& a);
// Adds --calib --calib-data --nsamples --seqlen --seed --calib-sampling --calib-holdout (group "Calibration").
void add_calib_options(CLI::App* sub, CalibArgs& a);

// CompressOptions for `method` at `ratio`: the preset's, overridden by the options given. Throws
// ConfigError on an unknown preset, junction or --joint part, or a value out of range (validate).
// One --bpw budget: ConfigError "--bpw (expected 0 < bits per weight <= 16, got <text>)" otherwise.
double parse_bpw(const std::string& text);

compress::CompressOptions to_compress_options(const MethodArgs& a, const std::string& method, double ratio);
// --batch 0: about 4096 tokens a forward call, as ppl's --batch 0 (at least one window of seqlen).
void resolve_batch(const MethodArgs& a, compress::CompressOptions& o, int seqlen);
// The method options given on the command line that a run with `o` does not read (compress::reads_option).
std::vector<std::string> unread_options(const MethodArgs& a, const compress::CompressOptions& o);
// ConfigError naming the first of them and the method: an option is never recorded as if used.
void check_options_read(const MethodArgs& a, const compress::CompressOptions& o);
// The calibration options, seqlen defaulted to min(2048, max positions) of the model and checked against its
// context (calib::resolve_seqlen); without a config, seqlen stays 0 when not given, for the library to resolve.
calib::CalibOptions to_calib_options(const CalibArgs& a, const model::ModelConfig* config);
// "qk,ud", ..., or "none".
std::string joint_spec(const compress::JointParts& j);


// generate and eval hold a model in memory with its weights widened to float32: before they are, prints
// the plan (eval::plan_inference_memory for `positions` positions, plus a LLaVA's vision tower and
// projector) on stderr and throws ConfigError "--max-memory: budget too small for <command> (...)" when
// it does not fit the budget (`max_memory`, empty: physical memory - 2 GiB). Reads the checkpoint lazily.
// Returns the plan (serve sizes its KV caches by what the budget leaves).
core::MemoryPlan check_inference_memory(const std::string& command, const std::string& model_dir, const std::string& max_memory,
                            std::int64_t positions, const RunArgs& run);

// A rank plan as JSON: totals and per-module ranks, parameters and MACs.
nlohmann::json plan_json(const compress::RankPlan& p);

// Whether a perplexity on `dataset` from `eval_file` is held out of a calibration `calibration` (the
// checkpoint's `latent.calibration` or a sweep's calib_json; null = a dense model): false only for
// c4-heldout after a c4 calibration on a file of the same name that did not leave its last
// io::kC4HeldoutDocs documents out. Warns (log_warn) when false.
bool held_out(io::Dataset dataset, const std::string& eval_file, const nlohmann::json* calibration);

// The output directory as given, "dir/" naming "dir" (compress's progress is "dir.resume", not "dir/.resume").
std::string output_dir(const std::string& given);
// --dtype of an output: f16, bf16 or f32; ConfigError "--dtype (expected f16, bf16 or f32, got <s>)".
DType parse_storage_dtype(const std::string& s);

}  // namespace latentllm::cli
