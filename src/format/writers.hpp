// The format writers behind format::export_checkpoint: one function per format, one registry row each
// (src/format/registry.cpp). A writer fills a staged directory; the caller checks the input and the
// output target before, and commits after.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

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
};

// Writes the dense Hugging Face checkpoint (src/format/hf.cpp) into `dir`.
ExportSummary write_hf(const ExportSource& src, const std::filesystem::path& dir, DType dtype);

// The safetensors metadata key that marks a model.safetensors latentllm exported (its value: the format).
inline constexpr const char* kExportMetadataKey = "latentllm_export";

}  // namespace latentllm::format
