// Writing latent checkpoints: a Hugging Face directory whose factored linear modules are stored as two
// matrices, described by a `latent` section in config.json (docs/FORMAT.md; the section's entries are
// read and written by io::parse_latent_modules / io::latent_module_json). Implemented in src/format/
// (latent.cpp: the writer; layer_source.cpp: where it reads layers from and the per-layer factor files;
// output.cpp: what every output of ours shares). Not loadable by Hugging Face transformers: use
// format::export_checkpoint (include/latentllm/export.hpp) for HF tools.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
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
  // Where the compressed modules of layers the model does not hold are (a lazy model after
  // compression: the per-layer files below, compress keeps them in its progress directory). Layers
  // that are loaded are written from the model.
  std::filesystem::path layer_factors_dir;
  // Modules outside the model's decoder layers, under their stored names (a LLaVA checkpoint's vision
  // tower and projector compressed by compress --components): written from these in place of the
  // source's tensors, listed in the latent section under those names. Must outlive save().
  std::vector<const model::Linear*> tower_modules;
  // A quantized LM head (compress --head-bits) [V, p]: written as the dense quantized module "lm_head"
  // (docs/FORMAT.md "Quantized tensors") in place of an untied source's lm_head.weight; a tied source's
  // stored table stays, as the embedding. Null: the head as the source stores it.
  std::shared_ptr<const quant::PackedMatrix> head;
};

// Writes `m` (dense and factored modules, current biases) as a checkpoint in `out_dir`: the
// non-linear tensors are copied from the source checkpoint m.dir(), tokenizer files are copied.
// Streamed (io::SafetensorsWriter): besides the model, it holds one tensor and one decoder layer's
// factors at a time, so a lazy model of any size can be written; a layer that is not loaded is read
// from opt.layer_factors_dir (its modules absent there are copied unchanged from the source).
// Atomic: everything is written (and fsynced) into the sibling `<out>.partial-<pid>`, which is then
// renamed into place; an existing `out` (overwrite) is exchanged in one step, so `out` always holds
// a complete checkpoint. Partial directories of killed runs (their pid gone) are removed. Throws
// IoError when a directory or file cannot be created or written (the partial directory is removed),
// NumericError when a value overflows the storage type (e.g. |x| > 65504 in F16).
void save(const model::Model& m, const std::filesystem::path& out_dir, const SaveOptions& opt);

// Checks, before hours of work, that `out_dir` can be created: creates its parent directories and
// a probe file there. Throws IoError "<out>: output directory is not writable (…)" otherwise.
void check_output_writable(const std::filesystem::path& out_dir);

// Never lose a user's files: checks, before any work, that writing a checkpoint to `out_dir` can only
// replace an earlier output of ours. Throws ConfigError when out_dir (resolved, symlinks included) is
// the model directory `model_dir`, lies inside it or contains it (with or without `force`); IoError
// when out_dir exists and is not a directory, exists without `force`, or exists and is neither empty
// nor a latentllm output (is_latent_output) — `force` replaces only those.
void check_output_target(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir, bool force);
// True when `dir` holds a checkpoint latentllm wrote: a config.json with a `latent` object, or an export
// of one (format::export_checkpoint: model.safetensors with the metadata key `latentllm_export`).
bool is_latent_output(const std::filesystem::path& dir);
// The files copied unchanged beside the weights of a checkpoint or an export (those the source has):
// tokenizer, generation defaults, image processor, chat template.
std::span<const char* const> companion_files();

// ---- Per-layer factor files ----------------------------------------------------------------------
// One decoder layer's compressed modules in a safetensors file, float32 so they reload exactly:
// <module>.B [out, r], <module>.A [r, in] (or [r, in − r]), <module>.perm [in] (block identity, as
// floats) and <module>.bias [out], by HF module name. Compression writes one per finished layer (its
// progress, compress::ResumeState) and save() writes a lazy model's checkpoint from them.
std::filesystem::path layer_factors_file(const std::filesystem::path& dir, int layer);  // dir/layer-<i>.safetensors
// Writes the factored modules of `layer` (atomically; IoError when it cannot). With `dense_modules`, also
// every module left in dense form, as <module>.weight [out, in] (and its bias): a compression that
// rewrites the dense weights themselves (the sparse methods) keeps them here, not in the source.
void write_layer_factors(const std::filesystem::path& file, const model::DecoderLayer& layer,
                         bool dense_modules = false);
// Installs the modules `file` holds into `layer` (factors, perm, bias, or a dense <module>.weight; a
// factored module's dense weight dropped); modules absent from the file are left as they are. IoError /
// FormatError naming the file.
void read_layer_factors(const std::filesystem::path& file, model::DecoderLayer& layer);
// Checks that every factor in `file` fits the storage type `dtype`, as save() will require, so that a run
// fails at the layer whose factors overflow (its progress kept) rather than when the checkpoint is
// written. NumericError as save(): "<module>.B.weight: value at [i, j] overflows F16 (...)".
void check_layer_factors_storable(const std::filesystem::path& file, DType dtype);

}  // namespace latentllm::checkpoint
