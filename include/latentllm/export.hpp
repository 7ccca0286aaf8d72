// Exporting a latent checkpoint to other formats (`latentllm export`). A latent checkpoint keeps its
// source's `architectures` with factored modules in place of dense weights, so a Hugging Face tool would
// load it with randomly initialised projections; an export is a plain checkpoint of the format the
// tool reads. One writer per format, one row each in the registry of src/format/registry.cpp; every writer
// reads the decoder layers through one interface (src/format/layer_source.hpp), so `compress --format`
// writes an export directly from the compression (export_model) as `export` does from a latent checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/model.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::format {

// Protobuf's limit on one file is 2 GiB: above this many bytes of weights, --format onnx writes them to
// onnx/model.onnx_data (external data), leaving room for the graph in model.onnx.
inline constexpr std::int64_t kOnnxExternalDataAbove = (std::int64_t{1} << 31) - (std::int64_t{64} << 20);

struct ExportOptions {
  std::string format = "hf";      // a registry row's name (export_formats(), or output_formats() for export_model)
  // Storage type of every floating tensor; unset: the format's default (hf: the latent checkpoint's, or
  // f16 from a compression as a latent checkpoint's; onnx: f32, which is also its input/output type).
  std::optional<DType> dtype;
  bool force = false;             // replace an earlier output (checkpoint::check_output_target's rules)
  // onnx: which past inputs carry the latent. Auto: where `generate --kv-cache auto` caches it
  // (model::kv_cache_form); Dense: none, every past [batch, H_kv, past, d_h] as Optimum's (what
  // transformers.js's generate builds). Latent is refused (keys with RoPE cannot be absorbed).
  model::KvCacheMode kv_cache = model::KvCacheMode::Auto;
  // onnx: weight bytes above which the weights go to an external data file (tests lower it).
  std::int64_t onnx_external_data_above = kOnnxExternalDataAbove;
  // Provenance (latentllm/provenance.hpp) written as the output's model card, README.md. export_model:
  // the compression's (null: no card); export_checkpoint: null takes the latent checkpoint's
  // latent.provenance (or the dense input's identity) with the export step added.
  nlohmann::json provenance;
};

// What an export wrote.
struct ExportSummary {
  std::size_t tensors = 0;              // tensors in the output
  std::size_t multiplied = 0;           // factored modules multiplied back into dense weights
  std::size_t factored = 0;             // factored modules kept factored (latent, onnx)
  std::size_t nbits = 0;                // quantized matrices written as com.microsoft::MatMulNBits (onnx)
  DType dtype = DType::F32;             // the storage type used
};

// The registered format names, e.g. {"hf", "onnx"} (onnx is listed in every build; without the ONNX
// encoder module, built when libonnx is installed, its export fails with the one ConfigError that says so).
std::vector<std::string> export_formats();

// The formats a model can be written in after compression (export_model, compress --format): "latent"
// (the latent checkpoint, checkpoint::save) and export_formats().
std::vector<std::string> output_formats();

// Checks, before any work, that the model `m` (the dense model about to be compressed, or a latent one)
// can be written as opt.format, with `what` naming the option in messages ("export format",
// "--format"): ConfigError for an unknown format (latent only when allow_latent), --kv-cache other than
// auto with a format that has no KV cache, and what the format's writer refuses (onnx: a multimodal or
// post-LN OPT model, --dtype bf16, --kv-cache latent), then what the writer needs of this installation
// (onnx: the encoder module). export_checkpoint and export_model check the same, but the installation
// only when they write.
void check_format(const model::Model& m, const ExportOptions& opt, std::string_view what, bool allow_latent);

// Writes the compressed model `m` as opt.format (one of export_formats()) into out_dir, from its layers in
// memory or, for a lazy model, from the per-layer factor files of layer_factors_dir (the compression's
// progress; checkpoint::SaveOptions::layer_factors_dir); outside the layers from its source checkpoint
// m.dir(). tower_modules as checkpoint::SaveOptions's (hf only). The bytes equal those of
// checkpoint::save with --dtype f32 followed by export_checkpoint with the same options. Checks as
// export_checkpoint (check_format, then checkpoint::check_output_target against m.dir()); staged and
// streamed as it. Without opt.dtype: the format's default, else f16.
ExportSummary export_model(const model::Model& m, const std::filesystem::path& layer_factors_dir,
                           const std::filesystem::path& out_dir, const ExportOptions& opt,
                           const std::vector<const model::Linear*>& tower_modules = {});

// Exports the latent checkpoint `model_dir` to `out_dir` in opt.format. Before any work: ConfigError
// "export format (expected one of hf, got <name>)" for an unknown format, checkpoint::check_output_target's
// errors for `out_dir`, ConfigError "<dir>: not a latent checkpoint (...)" for a dense input to hf (which
// would copy it); onnx exports a dense checkpoint too (every module one MatMul). Written
// atomically (core::StagedDirectory) and streamed one tensor at a time (io::SafetensorsWriter), so the
// model is never held whole. NumericError when a value overflows the storage type.
ExportSummary export_checkpoint(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                                const ExportOptions& opt);

}  // namespace latentllm::format
