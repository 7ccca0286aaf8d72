// Where every checkpoint writer reads a model's decoder layers from: the model in memory, the per-layer
// factor files of a lazy model's compression (its progress directory), or a latent checkpoint on disk.
// What lies outside the layers (embeddings, norms, head, config.json, companion files) the writers read
// from the source checkpoint, model().dir().
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "latentllm/model.hpp"

namespace latentllm::format {

// A module as a layer source will hold it, known before its values are read.
struct ModuleForm {
  std::int64_t rank = 0;        // 0: dense (weight [out, in]); else B [out, r], A [r, in] or [r, in − r]
  bool block_identity = false;
  bool bias = false;            // bias [out]
  int bits = 16;                // < 16: its weight or factors stored quantized in groups of `group` inputs
  int group = 0;
  // Parameters of its matrices and bias (of the module `spec`: in, out).
  std::int64_t params(const model::Linear& spec) const;
};

// A model's decoder layers as a writer reads them, one at a time, each whole (its norms, and its modules
// dense or factored with their current biases). The reference layer(i) returns stays valid until the
// next call.
class LayerSource {
 public:
  virtual ~LayerSource() = default;
  // The model whose layers these are (its skeletons, stored <-> HF names, source checkpoint m.dir()).
  virtual const model::Model& model() const = 0;
  virtual const model::DecoderLayer& layer(int i) = 0;
  // The form of each module of layer i (in the order of model().layer_spec(i).linears), without reading
  // their values: what a writer needs for the header it writes before any value.
  virtual std::vector<ModuleForm> forms(int i) = 0;
};

// The layers of a model in memory: every layer must be loaded (Error naming the layer otherwise).
std::unique_ptr<LayerSource> model_layers(const model::Model& m);
// The layers of a lazy model after compression: a loaded layer from the model, any other as its skeleton
// with the factors of checkpoint::layer_factors_file(factors_dir, i), its norms and the modules the file
// does not hold from the source checkpoint (the last layer read is kept).
std::unique_ptr<LayerSource> progress_layers(const model::Model& m, const std::filesystem::path& factors_dir);
// The layers of the latent checkpoint `dir` (loaded lazily, checked as any load; each layer widened when
// asked for, the previous one released). ConfigError "<dir>: not a latent checkpoint (...)" for a dense one
// unless `allow_dense` (every module then dense, as stored).
std::unique_ptr<LayerSource> latent_layers(const std::filesystem::path& dir, bool allow_dense = false);

// Where each decoder-layer module of m is: HF module name -> (layer, index in its linears).
std::map<std::string, std::pair<int, std::size_t>> layer_modules(const model::Model& m);
// The HF prefix of a decoder layer's names ("model.layers.3."): its q_proj's name without "self_attn.q_proj".
std::string layer_prefix(const model::DecoderLayer& L);
// The stored module name a stored tensor belongs to: <module> of <module>.weight, .bias, .A.weight,
// .B.weight and the quantized parts (io::parse_latent_tensor_name); any other name up to its last dot.
std::string tensor_module(const std::string& name);

}  // namespace latentllm::format
