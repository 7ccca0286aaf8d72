// Per-layer progress of a compression run, so that an interrupted run can resume without redoing
// finished layers and still produce a bit-identical checkpoint.
//
// The state directory holds, after layer i is compressed and the calibration hidden states have been
// propagated through it:
//   layer-<i>.safetensors  the factors of layer i's compressed modules (<name>.B, <name>.A,
//                          <name>.perm as float, <name>.bias), float32 so they reload exactly;
//   hidden-<i>.safetensors the hidden states after layer i ("hidden" [N·L, d], float32), and with
//                          error-compensating fits the dense stream's ("dense" [N·L, d]); the one of
//                          layer i − 1 is removed once progress.json names layer i's;
//   progress.json          {fingerprint, layers_done, hidden (the file name), report so far}, written last;
//   plan.json              with global rank allocation, {fingerprint, the plan}, written before layer 0,
//                          so that a resumed run does not repeat the dense pre-pass.
// Every file is written atomically and a layer's files never overwrite the previous layer's, so a kill
// at any point leaves the previous layer's state valid.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

#include "latentllm/compress.hpp"

namespace latentllm::compress {

// Identifies a run: calibration ids, seqlen, every option that changes the result, and the model.
std::string run_fingerprint(const model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                            const CompressOptions& opt);

class ResumeState {
 public:
  // dense_modules: the run rewrites dense weights (the sparse methods), which its layer files then hold.
  ResumeState(std::filesystem::path dir, std::string fingerprint, bool dense_modules = false);

  // Restores the finished layers into `m` (their factors), the hidden states after the last of them
  // (and, when dense is not null, the dense stream's: FormatError if the state has none) and the
  // report so far. Returns the number of finished layers (0 when there is no state). Throws
  // ConfigError when the state belongs to a different run (fingerprint mismatch).
  int restore(model::Model& m, MatrixF& hidden, MatrixF* dense, CompressReport& report) const;

  // Records layer `layer` as done (dense: the dense stream's hidden states, or null). Throws IoError
  // when the state cannot be written.
  void save_layer(const model::Model& m, int layer, const MatrixF& hidden, const MatrixF* dense,
                  const CompressReport& report) const;

  // Throws the ConfigError of restore() when the directory holds the progress of a different run: called
  // before any work of a resumed run (the pre-pass alone takes an hour at 8 B).
  void check_fingerprint() const;

  // The global rank allocation's plan of this run (plan.json), saved before the first layer; restored
  // only when the file exists and carries this run's fingerprint (else nullopt).
  void save_plan(const RankPlan& plan) const;
  std::optional<RankPlan> restore_plan() const;

  // Creates the state directory (IoError naming it when impossible), so an unwritable location fails
  // before the first layer's work rather than after it.
  void create() const;
  static std::string hidden_file(int layer);  // "hidden-<layer>.safetensors"
  std::filesystem::path layer_file(int layer) const;  // checkpoint::layer_factors_file in dir()

  const std::filesystem::path& dir() const { return dir_; }
  // Whether `dir` holds saved work (finished layers, or a global rank plan): what a run without
  // --resume must not discard, and what a failed run keeps.
  static bool holds_progress(const std::filesystem::path& dir);
  // Throws ConfigError when `dir` holds saved work and the run does not resume: "<dir>: progress of an
  // earlier run exists (...; expected --resume to continue it, or remove the directory to start over)".
  static void check_not_discarded(const std::filesystem::path& dir, bool resume);

 private:
  std::filesystem::path dir_;
  std::string fingerprint_;
  bool sparse_ = false;  // dense_modules
};

}  // namespace latentllm::compress
