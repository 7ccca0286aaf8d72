// The whole compress flow as one call: what `latentllm compress` runs, for any program.
//
// From a dense checkpoint directory to a latent checkpoint (or its hf / onnx export): every option and
// output checked before any work, the calibration set sampled (text windows, or for a LLaVA checkpoint
// ScienceQA prompts with their images), the memory plan checked, the ranks planned once (compress::plan_run,
// with the towers of --components beside the language model), the towers compressed first and the language
// model layer by layer on their compressed features, progress saved after every layer to <out>.resume (kept
// on failure and on --stop-after-layers, removed once the output is written), and the output written
// atomically with its provenance.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/export.hpp"
#include "latentllm/model.hpp"
#include "latentllm/provenance.hpp"
#include "latentllm/resources.hpp"

namespace latentllm::compress {

// What --ratio counts: the compressed linear modules' weights (the paper's ratio, the planner's), or the
// whole model's parameters or weight-file bytes, converted to the linear modules' ratio before planning.
enum class Target { Linear, Params, Bytes };
std::string_view target_name(Target t);  // "linear", "params", "bytes"
Target parse_target(std::string_view name);

struct Request {
  std::filesystem::path model;  // a dense Hugging Face checkpoint directory
  // The output directory, without a trailing separator (its progress is "<out>.resume"); may be empty
  // for a dry run.
  std::filesystem::path out;
  // The method's options (checked by validate). Set by run: state_dir, resume, layer_done and, for a
  // ScienceQA calibration, pipeline.lengths and pipeline.input_embeddings.
  CompressOptions options;
  std::string preset = "default";  // recorded beside the options (the checkpoint's latent.preset)
  // What options.ratio counts. Params or Bytes: options.ratio is the fraction of the whole model's stored
  // parameters (or weight-file bytes, in the output's storage type) to remove; run replaces it by the
  // linear modules' ratio that removes as much (recorded as latent.target).
  Target target = Target::Linear;
  // The calibration set; none: a dry run without data, which can show only the uniform plan. A ScienceQA
  // source (`scienceqa`) calibrates a LLaVA checkpoint on its train split's prompts and images.
  std::optional<calib::CalibOptions> calibration;
  // options.pipeline.batch_windows from about 4096 tokens a forward call once the window length is known.
  bool batch_auto = false;
  format::ExportOptions output;  // format (latent, hf, onnx), dtype, kv_cache, force
  model::LoadOptions load;       // weights, unused tensors (run loads lazily and scans for non-finite values)
  std::int64_t memory_budget = 0;  // bytes; 0: core::default_memory_budget()
  bool dry_run = false;            // plan only: no compression, no output
  bool resume = false;             // continue from <out>.resume
};

// Called on rank 0 while the run goes, for a caller that prints: the memory plan before any work (not
// when it does not fit: run throws then) and the ranks before the compression.
struct Observer {
  // budget_source: which bound set the budget ("--max-memory", or the default's: core::default_budget).
  std::function<void(const core::MemoryPlan& plan, const std::string& budget_source)> memory;
  std::function<void(const PlannedRanks& planned)> planned;
};

struct Outcome {
  PlannedRanks planned;
  bool dry_run = false;
  bool stopped = false;  // options.stop_after_layers reached: no output, the progress kept in `progress`
  bool written = false;  // this rank wrote the output (rank 0 of a finished run)
  std::filesystem::path out, progress;
  std::optional<core::MemoryPlan> memory;  // the plan checked before the work (none for a dry run)
  CompressReport report;                   // the language model's and the towers' merged
  std::int64_t language_dense_params = 0, language_params = 0;  // the language model's part of report
  std::int64_t tower_dense_params = 0, tower_params = 0;         // the towers' (--components)
  // What the checkpoint records in its latent section: the options as run (joint up-down may have been
  // skipped for few tokens), the preset, the calibration and the numerical notes.
  nlohmann::json options_record;
  format::WeightsSize before, after;  // the whole model's stored weights (after: when written)
  // The compressed modules as written, when quantized (--bits, --bpw) into a latent checkpoint.
  std::optional<eval::CompressedModules> compressed_modules;
  std::optional<eval::QuantizedHead> head;  // the LM head as written, when quantized (--head-bits)
  double write_s = 0;
  std::int64_t model_params = 0, planned_model_params = 0;  // a dry run: the whole model, as planned
};

// Runs the compression `r` asks for. Throws ConfigError for a bad option, input or output before any
// work (the message names the option, as docs/ERRORS.md lists), NumericError / IoError / FormatError
// as the work goes (the finished layers kept in <out>.resume).
Outcome run(Request r, const Observer& observe = {});

// Refuses a latent checkpoint where a dense one is needed (`what`: "compress", "sweep"), before any work.
void require_dense(const model::Model& m, std::string_view what);

// The options as a checkpoint records them: the options record (CompressOptions::to_json) and the
// preset it started from.
nlohmann::json options_record(const CompressOptions& o, std::string_view preset);

}  // namespace latentllm::compress
