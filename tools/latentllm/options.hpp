// Options shared by `compress` and `sweep` (the method's knobs and the calibration set), and helpers of the commands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/model.hpp"

namespace latentllm::cli {

struct MethodArgs {
  // "auto" / NaN: the preset's value for the method (compress::preset_options).
  std::string preset = "default", junction = "auto", joint = "auto", covariance = "auto", ud_precision = "f32";
  std::string rank_alloc = "auto", alloc_score = "relative", fit = "auto", output_side = "on";
  double lambda_rel = std::numeric_limits<double>::quiet_NaN(), alpha = 0.5;
  int qk_iters = 8, vo_iters = 8, ud_iters = 4, rope_window = 0, batch = 8;
  std::int64_t ud_tokens = compress::CompressOptions{}.ud_max_tokens;
  std::int64_t alloc_tokens = compress::CompressOptions{}.alloc_max_tokens;
  double ud_min_tokens_per_ffn = std::numeric_limits<double>::quiet_NaN();
  std::optional<double> joint_tol;  // unset: the preset's
  bool no_intra_layer = false, diagnostics = false;
};

struct CalibArgs {
  std::string source = "c4", data, sampling = "random";
  int nsamples = 64, seqlen = 0, holdout = 0;
  std::uint64_t seed = 0;
};

// Adds --preset --junction --lambda --alpha --joint --qk-iters --vo-iters --joint-tol --ud-iters --ud-tokens
// --ud-min-tokens-per-ffn --rope-window --diagnostics --rank-alloc --alloc-score --alloc-tokens (group "Method") and --no-intra-layer --batch.
void add_method_options(CLI::App* sub, MethodArgs& a);
// Adds --calib --calib-data --nsamples --seqlen --seed --calib-sampling --calib-holdout (group "Calibration").
void add_calib_options(CLI::App* sub, CalibArgs& a);

// CompressOptions for `method` at `ratio`: the preset's, overridden by the options given. Throws
// ConfigError on an unknown preset, junction or --joint part.
compress::CompressOptions to_compress_options(const MethodArgs& a, const std::string& method, double ratio);
// The calibration options, seqlen defaulted to min(2048, max positions) of the model.
calib::CalibOptions to_calib_options(const CalibArgs& a, const model::ModelConfig& config);
// The method's settings as recorded in a checkpoint's latent.info and in sweep results.
// (The values used, presets and "auto" resolved.)
nlohmann::json method_json(const MethodArgs& a, const std::string& method, double ratio);
// "qk,ud", ..., or "none".
std::string joint_spec(const compress::JointParts& j);
nlohmann::json calib_json(const calib::CalibOptions& c, const std::string& sampling);

// "--max-memory 10G": a byte count rounded up to whole GiB, for advice in messages.
std::string gib_option(std::int64_t bytes);

// A rank plan as JSON: totals and per-module ranks, parameters and MACs.
nlohmann::json plan_json(const compress::RankPlan& p);

// Whether a perplexity on `dataset` from `eval_file` is held out of a calibration `calibration` (the
// checkpoint's `latent.calibration` or a sweep's calib_json; null = a dense model): false only for
// c4-heldout after a c4 calibration on a file of the same name that did not leave its last
// io::kC4HeldoutDocs documents out. Warns (log_warn) when false.
bool held_out(io::Dataset dataset, const std::string& eval_file, const nlohmann::json* calibration);

}  // namespace latentllm::cli
