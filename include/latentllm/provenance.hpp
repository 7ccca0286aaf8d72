// Provenance of latentllm's outputs: what a model was made from and how. Every output folder (a latent
// checkpoint, an export) gets a model card, README.md, written from one provenance object, which a latent
// checkpoint also keeps in config.json as `latent.provenance` (docs/FORMAT.md "Provenance"). The object:
//   latentllm    {version, commit} of the build that wrote it (latentllm::version, git_commit)
//   source       the source model: {path, sha256 [, weights_sha256]} (source_identity)
//   compression  {method, ratio, preset} (absent for a dense model's export)
//   calibration  the calibration set as `latent.calibration`, plus its sha256 (data_sha256)
//   size         {before, after}: weights_size of the source and of the output (after: set by the writer)
//   output       {format, dtype} (set by the writer); export {from, format, dtype} for `latentllm export`
//   quality      measured figures, when the run measured any (none from compress)
// Nothing in it depends on threads, processes, timings or the machine, so an output's bytes stay those
// of any other run of the same inputs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace latentllm::format {

// Weight files at most this large are hashed whole in source_identity; larger ones by their headers.
inline constexpr std::int64_t kHashWholeWeightsBelow = std::int64_t{64} << 20;

// A checkpoint folder's stored weights.
struct WeightsSize {
  std::int64_t params = 0;  // the weights stored (safetensors: every tensor's elements, a quantized matrix
                            // counted as the weights its codes encode, its scales and zero points not; 0 for ONNX)
  std::int64_t bytes = 0;   // bytes of its weight files: *.safetensors, and onnx/ of an ONNX export
  std::string dtypes;       // the stored types, "F32" or "F16, F32" (empty for an ONNX export)
};
// Reads the safetensors headers only. IoError / FormatError as io::TensorStore::open.
WeightsSize weights_size(const std::filesystem::path& dir);
nlohmann::json to_json(const WeightsSize& s);  // {"model_params", "bytes", "dtypes"}

// The identity of the checkpoint `dir`: {"path" (absolute), "sha256": of config.json, the shard index if
// any and every safetensors file's tensor list (name, dtype, shape, bytes; metadata) — cheap at any
// size}, and
// "weights_sha256" of the whole weight files when they total at most kHashWholeWeightsBelow.
nlohmann::json source_identity(const std::filesystem::path& dir);

// The SHA-256 of a data file, or of a ScienceQA folder's problems.json and pid_splits.json.
std::string data_sha256(const std::filesystem::path& path);

// {"version", "commit"} of this build.
nlohmann::json tool_identity();

// The model card (Markdown) of an output folder from its provenance (its `output.format`: "latent", "hf"
// or "onnx"): what it is and how it was made, the sizes before and after, the quality measured if any,
// how to run and export it.
std::string model_card(const nlohmann::json& provenance);

}  // namespace latentllm::format
