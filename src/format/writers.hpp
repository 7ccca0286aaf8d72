// The checkpoint writers, one per format, all with one input: the decoder layers through a LayerSource
// (the model in memory, a lazy compression's per-layer files, or a latent checkpoint on disk) and what
// lies outside them from the source checkpoint layers.model().dir(). One registry row each
// (src/format/registry.cpp). A writer fills a staged directory; the caller checks the input and the
// output target before, and commits after.
#pragma once

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/layer_source.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/export.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"

namespace latentllm::format {

// What a writer is asked for besides its input.
struct WriteOptions {
  DType dtype = DType::F16;  // storage type of every floating tensor
  // latent: provenance (method, ratio, calibration, ...) copied into the `latent` section.
  nlohmann::json info;
  // Modules outside the decoder layers (a LLaVA's vision tower and projector compressed by compress
  // --components), under their stored names, in place of the source's tensors (latent, hf).
  std::vector<const model::Linear*> tower_modules;
  // latent: a quantized LM head (checkpoint::SaveOptions::head), or null.
  std::shared_ptr<const quant::PackedMatrix> head;
  model::KvCacheMode kv_cache = model::KvCacheMode::Auto;  // onnx (ExportOptions::kv_cache)
  std::int64_t onnx_external_data_above = kOnnxExternalDataAbove;
  // Provenance (include/latentllm/provenance.hpp) of an export: completed with the output and written as
  // its model card, README.md; null writes none. (latent: info["provenance"], also kept in config.json.)
  nlohmann::json provenance;
};

// `provenance` with what the writer knows: output {format, dtype}, size.after of the folder `dir` (after
// its weights are written).
nlohmann::json complete_provenance(nlohmann::json provenance, const std::filesystem::path& dir,
                                   std::string_view format, DType dtype);
// README.md in `dir`: the model card of `provenance` (format::model_card).
void write_model_card(const std::filesystem::path& dir, const nlohmann::json& provenance);

// Writes the latent checkpoint (src/format/latent.cpp) into `dir`: the tensors of the source checkpoint in
// its order, each module as `layers` holds it (factored: A and B), opt.tower_modules in place of their
// source tensors, config.json with its `latent` section, the companion files. Reads one layer and one
// tensor at a time. NumericError when a value overflows opt.dtype.
ExportSummary write_latent(LayerSource& layers, const std::filesystem::path& dir, const WriteOptions& opt);

// Writes the dense Hugging Face checkpoint (src/format/hf.cpp) into `dir`.
ExportSummary write_hf(LayerSource& layers, const std::filesystem::path& dir, const WriteOptions& opt);

// Refuses, before any work, what the ONNX writer does not reproduce (src/format/onnx.cpp): a multimodal or
// post-LN OPT model, bf16.
void check_onnx(const model::Model& m, const WriteOptions& opt);
// Writes the ONNX decoder graph (src/format/onnx.cpp) into `dir`: onnx/model.onnx (and
// onnx/model.onnx_data above opt.onnx_external_data_above bytes of weights), config.json with its
// `latentllm_export` record, the tokenizer files. Encoded by the ONNX encoder module (onnx_module.hpp).
ExportSummary write_onnx(LayerSource& layers, const std::filesystem::path& dir, const WriteOptions& opt);

// The safetensors metadata key that marks a model.safetensors latentllm exported (its value: the format).
inline constexpr const char* kExportMetadataKey = "latentllm_export";

}  // namespace latentllm::format
