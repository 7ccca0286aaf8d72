// Exporting a latent checkpoint to other formats (`latentllm export`). A latent checkpoint keeps its
// source's `architectures` with factored modules in place of dense weights, so a Hugging Face tool would
// load it with randomly initialised projections; an export is a plain checkpoint of the format the
// tool reads. One writer per format, one row each in the registry of src/format/registry.cpp.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "latentllm/tensor.hpp"

namespace latentllm::format {

struct ExportOptions {
  std::string format = "hf";      // a registry row's name (export_formats())
  std::optional<DType> dtype;     // storage type of every floating tensor; unset: the latent checkpoint's
  bool force = false;             // replace an earlier output (checkpoint::check_output_target's rules)
};

// What an export wrote.
struct ExportSummary {
  std::size_t tensors = 0;              // tensors in the output
  std::size_t multiplied = 0;           // factored modules multiplied back into dense weights
  DType dtype = DType::F32;             // the storage type used
};

// The registered format names, e.g. {"hf"}.
std::vector<std::string> export_formats();

// Exports the latent checkpoint `model_dir` to `out_dir` in opt.format. Before any work: ConfigError
// "export format (expected one of hf, got <name>)" for an unknown format, checkpoint::check_output_target's
// errors for `out_dir`, ConfigError "<dir>: not a latent checkpoint (...)" for a dense input. Written
// atomically (core::StagedDirectory) and streamed one tensor at a time (io::SafetensorsWriter), so the
// model is never held whole. NumericError when a value overflows the storage type.
ExportSummary export_checkpoint(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                                const ExportOptions& opt);

}  // namespace latentllm::format
