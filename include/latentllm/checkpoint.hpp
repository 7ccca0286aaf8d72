// Writing latent checkpoints: a Hugging Face directory whose factored linear modules are stored as two
// matrices, described by a `latent` section in config.json (docs/FORMAT.md; the reader is
// io::parse_latent_modules).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/model.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::checkpoint {

struct SaveOptions {
  DType dtype = DType::F16;   // storage type of every floating tensor
  nlohmann::json info;        // method, ratio, calibration, ... copied into latent (besides modules)
  bool overwrite = false;     // replace an existing output directory
};

// Writes `m` (dense and factored modules, current biases) as a checkpoint in `out_dir`: the
// non-linear tensors are copied from the source checkpoint m.dir(), tokenizer files are copied.
// Atomic: everything is written (and fsynced) into the sibling `<out>.partial-<pid>`, which is then
// renamed into place; an existing `out` (overwrite) is exchanged in one step, so `out` always holds
// a complete checkpoint. Partial directories of killed runs (their pid gone) are removed. Throws
// IoError when a directory or file cannot be created or written (the partial directory is removed),
// NumericError when a value overflows the storage type (e.g. |x| > 65504 in F16).
void save(const model::Model& m, const std::filesystem::path& out_dir, const SaveOptions& opt);

// Checks, before hours of work, that `out_dir` can be created: creates its parent directories and
// a probe file there. Throws IoError "<out>: output directory is not writable (…)" otherwise.
void check_output_writable(const std::filesystem::path& out_dir);

}  // namespace latentllm::checkpoint
