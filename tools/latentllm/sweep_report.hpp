// What `latentllm sweep` writes: results.{csv,json}, the paper's Table 2 layout (table2.md, with the
// zero-shot tasks' accuracies beside the perplexities), Table 3 (table3.{md,json}: parameters, FLOPs, MACs),
// mc.csv for the zero-shot tasks, and the quality-vs-ratio plots (ppl_<dataset>.png, mc_<task>.png, gnuplot).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"

namespace latentllm::cli {

// One zero-shot task's scores of a run (eval::mc::Result): fractions in [0, 1]; NaN stderr below 2 items.
struct McScore {
  int items = 0;
  double acc = 0, acc_stderr = 0, acc_norm = 0, acc_norm_stderr = 0;
};

// One cell of the grid (method "dense" at ratio 0 is the reference row).
struct SweepRun {
  std::string method;
  double ratio = 0;
  double budget = 0;           // sweep --bpw: the run's budget in bits per weight (0: a ratio run)
  double bits_per_weight = 0;  // quantized runs: the compressed modules' stored bits per weight (16-bit storage)
  std::map<std::string, double> ppl;  // dataset -> perplexity
  std::int64_t model_params = 0;      // whole model, stored weights and biases
  std::int64_t params = 0, dense_params = 0;  // compressed modules' weights
  std::int64_t macs = 0;  // the whole forward's MACs at 128 tokens under the plan the run used (Table 3)
  double compress_s = 0, eval_s = 0;
  double qk_loss_ratio = 0, ud_loss_ratio = 0;  // mean joint/local over layers (NaN: not measured)
  // Mean relative output error ‖(W − Ŵ)X‖²/‖WX‖² over the calibration tokens of the modules
  // compressed one at a time (joint up-down modules excluded): what the pre-conditioners minimize.
  double output_error = 0;
  nlohmann::json options;  // the run's options record (method_json); null for the dense row
  // ScienceQA accuracy in percent by category (eval::scienceqa::category_names; an LMM sweep), and the
  // per-problem predictions ({pid, pred, answer, correct}).
  std::map<std::string, double> accuracy;
  nlohmann::json predictions;
  // Zero-shot multiple choice (sweep --mc) by task: lm-eval's acc and acc_norm with their standard errors.
  std::map<std::string, McScore> mc;
};

// Σ d'·d over the linear modules of attention and MLP: the dense row's weights in compressed modules.
std::int64_t dense_linear_params(const model::Model& m);

struct SweepResults {
  std::string model;                  // the --model directory
  std::string label;                  // its name for titles
  std::string calibration_title;      // "N x L tokens of FILE, seed S"
  std::vector<std::string> datasets;  // column names, in order
  std::vector<std::string> mc_tasks;  // sweep --mc: the zero-shot tasks' names, in order (columns after the datasets)
  nlohmann::json info;                // calibration, settings, datasets, evaluation window (results.json)
  std::vector<SweepRun> runs;

  nlohmann::json to_json() const;
  std::string table2() const;  // Paper Table 2 layout: a row per (ratio, method), a column per dataset
  std::string table4() const;  // Paper Table 4 layout: a row per (ratio, method), a column per ScienceQA category
  bool budgets() const;        // a sweep --bpw grid: rows by budget, plots against bits per weight
  bool multimodal = false;     // the runs carry ScienceQA accuracies (table4.md, radar_<ratio>.png)
  std::string table3;          // Table 3 of the planned ratios (write_table3); write_results adds the runs
  nlohmann::json table3_rows;
  std::int64_t other_macs = 0;  // MACs at 128 tokens outside the compressed modules (LM head, attention)
};

// The run's summary numbers from its compression report (qk/ud ratios, mean output error).
void summarize(const compress::CompressReport& rep, SweepRun& r);

// results.csv, results.json, table2.md and with zero-shot tasks mc.csv, each written atomically (after every run, so a killed sweep
// keeps what it finished).
void write_results(const std::filesystem::path& out, const SweepResults& r);
// The names of the files write_results writes for r, in order.
std::vector<std::string> result_files(const SweepResults& r);

// Paper Table 3 for the dense model m: parameters, FLOPs and MACs at 128 tokens per ratio, with and
// without the block-identity junction, planned with `base` (its ratio and junction replaced): into
// r.table3 / r.table3_rows; write_results writes table3.{md,json} with each run's plan as it ran.
void write_table3(SweepResults& r, const model::Model& m, const std::vector<double>& ratios,
                  const compress::CompressOptions& base);

// Figure 4 analogue: perplexity vs ratio per method, log y, one PNG per dataset, and acc_norm vs ratio
// per zero-shot task (gnuplot; a warning and no PNG when gnuplot fails). An LMM sweep also gets the paper's radar figure: one chart per ratio,
// axes NAT ... G7-12, one polygon per method and the dense model's (radar_<ratio>.png). Returns the
// names of the files written: each gnuplot script (.gp) and each PNG gnuplot made.
std::vector<std::string> plot(const std::filesystem::path& out, const SweepResults& r);

}  // namespace latentllm::cli
