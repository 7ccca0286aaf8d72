// Whole-model compression: calibrate, plan ranks, compress every linear module of attention and MLP
// with the chosen method, layer by layer. The CLI's `compress` and `sweep` call this.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::compress {

// Method names for --method: the six local pre-conditioners (compress.hpp) and "latentllm"
// (root-covariance + block identity + the joint parts selected in CompressOptions::joint_*).
std::vector<std::string> method_names();

struct CompressOptions {
  std::string method = "latentllm";
  double ratio = 0.2;          // R: fraction of each compressed module's weights removed
  LocalOptions local;          // junction, damping, α; the pre-conditioner follows `method`
  // Joint parts of --method latentllm (--joint qk,vo,ud). Default: Q-K and up-down joint, V and O local.
  bool joint_qk = true;
  bool joint_vo = false;
  bool joint_ud = true;
  int qk_iters = 8;            // alternating RightSingular updates (paper: 8)
  int ud_iters = 4;            // auxiliary-variable iterations (paper: 4)
  int rope_window = 0;         // RoPE-aware joint Q-K over offsets 0..w (0 = plain)
  // Joint up-down keeps several [ffn, n] double matrices: above this many calibration tokens it runs
  // on evenly strided rows (0 = all tokens). 32768 = 64 windows of 512.
  std::int64_t ud_max_tokens = 32768;
  calib::PipelineOptions pipeline;
  // Per-layer progress (src/compress/resume.hpp): when set, the state after every layer is saved
  // here, and with `resume` a matching state is restored and the run continues after its last layer.
  std::filesystem::path state_dir;
  bool resume = false;
  // Called on entering (begin = true) and leaving each decomposition part ("local", "joint-qk",
  // "joint-vo", "joint-ud") of every layer, on the calling thread; parts never nest. For profilers
  // (bench/compress_time attributes BLAS FLOPs and LAPACK time to parts); empty = no calls.
  std::function<void(std::string_view part, bool begin)> part_observer;
};

// The budget of one module (or joint group) and what it achieved.
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

struct CompressReport {
  std::string method;
  double ratio = 0;
  std::vector<ModuleReport> modules;
  // Numerical fallbacks in the order they happened (NumericNote, latentllm/compress.hpp); written to
  // the checkpoint as latent.notes.
  std::vector<NumericNote> notes;
  void add_note(const NumericNote& n);  // appends unless an identical note is already there
  // Per layer (latentllm joint parts): {local, joint} attention-map loss and MLP output loss.
  std::vector<std::pair<double, double>> qk_losses;
  std::vector<std::pair<double, double>> ud_losses;
  std::vector<std::pair<double, double>> vo_losses;  // own-token-attention block output loss (--joint vo)
  calib::PipelineTimes times;
  std::map<std::string, double> part_seconds;  // decompositions by part: local, joint-qk, joint-vo, joint-ud
  double calib_sample_s = 0;        // tokenizing and sampling the calibration set
  double total_s = 0;
  std::int64_t dense_params = 0;    // Σ over compressed modules
  std::int64_t params = 0;
  nlohmann::json to_json() const;
};

// NumericNote <-> {"module", "kind", "detail"} (config.json latent.notes, the resume state).
nlohmann::json note_to_json(const NumericNote& n);
NumericNote note_from_json(const nlohmann::json& j);

// The ranks `method` at `ratio` gives each module of `m`, without touching data (for --dry-run and for
// the plan printed before work starts). n_tok: tokens the MACs are counted for.
RankPlan plan_model(const model::Model& m, const CompressOptions& opt, std::int64_t n_tok = 128);

// Compresses `m` in place on the calibration windows `ids` ([N·L]).
CompressReport compress_model(model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                              const CompressOptions& opt);

}  // namespace latentllm::compress
