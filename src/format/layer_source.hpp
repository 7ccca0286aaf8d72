// Where a checkpoint writer reads a model's decoder layers from: the model in memory, or, for a lazy
// model after compression, the per-layer factor files of the run's progress directory.
#pragma once

#include <filesystem>
#include <memory>

#include "latentllm/model.hpp"

namespace latentllm::format {

// A model's decoder layers as a writer reads them, one at a time, each with its modules as they stand
// (dense or factored, current biases). The reference layer(i) returns stays valid until the next call.
class LayerSource {
 public:
  virtual ~LayerSource() = default;
  // The model whose layers these are (its skeletons, stored <-> HF names, source checkpoint m.dir()).
  virtual const model::Model& model() const = 0;
  virtual const model::DecoderLayer& layer(int i) = 0;
  // Whether layer(i) holds every module of the layer (a layer in memory), or only the modules a
  // compression rewrote (a skeleton with its factors): the others are the source checkpoint's.
  virtual bool holds_all_modules(int i) const = 0;
};

// The layers of a model in memory: every layer must be loaded (Error naming the layer otherwise).
std::unique_ptr<LayerSource> model_layers(const model::Model& m);
// The layers of a lazy model after compression: a loaded layer from the model, any other as its skeleton
// with the factors of checkpoint::layer_factors_file(factors_dir, i) (the last one read is kept).
std::unique_ptr<LayerSource> progress_layers(const model::Model& m, const std::filesystem::path& factors_dir);

}  // namespace latentllm::format
