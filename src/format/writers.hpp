// The checkpoint writers, one function per format: the latent checkpoint (checkpoint::save) and the
// exports behind format::export_checkpoint (one registry row each, src/format/registry.cpp). A writer
// fills a staged directory; the caller checks the input and the output target before, and commits after.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "format/layer_source.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/export.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"

namespace latentllm::format {

// What every writer reads: the latent model (loaded lazily: names and shapes checked, stored name <-> HF
// module name), its checkpoint's tensors, config.json as stored and its factored modules.
struct ExportSource {
  const model::Model& model;
  const io::TensorStore& store;
  const nlohmann::json& config;                             // config.json, with its `latent` section
  const std::map<std::string, io::LatentModule>& modules;   // by HF module name
  const ExportOptions& options;
};

// What the latent writer wrote.
struct LatentSummary {
  std::size_t tensors = 0;  // tensors in model.safetensors
  std::size_t modules = 0;  // factored modules (entries of latent.modules)
};

// Writes the latent checkpoint of `layers` (src/format/latent.cpp) into `dir`: the tensors of the source
// checkpoint layers.model().dir() in its order, each module as `layers` holds it (factored: A and B),
// opt.tower_modules in place of their source tensors, config.json with its `latent` section, the
// companion files. Reads one layer and one tensor at a time. opt.overwrite and opt.layer_factors_dir are
// the caller's (checkpoint::save). NumericError when a value overflows opt.dtype.
LatentSummary write_latent(LayerSource& layers, const std::filesystem::path& dir, const checkpoint::SaveOptions& opt);

// Writes the dense Hugging Face checkpoint (src/format/hf.cpp) into `dir`.
ExportSummary write_hf(const ExportSource& src, const std::filesystem::path& dir, DType dtype);

// Writes the ONNX decoder graph (src/format/onnx.cpp) into `dir`: onnx/model.onnx (and
// onnx/model.onnx_data above options.onnx_external_data_above bytes of weights), config.json with its
// `latentllm_export` record, the tokenizer files. Encoded by the ONNX encoder module (onnx_module.hpp).
ExportSummary write_onnx(const ExportSource& src, const std::filesystem::path& dir, DType dtype);

// The safetensors metadata key that marks a model.safetensors latentllm exported (its value: the format).
inline constexpr const char* kExportMetadataKey = "latentllm_export";

}  // namespace latentllm::format
