// Fetches named weights from a checkpoint for the architecture files: resolves aliases (tied
// embeddings, safetensors "__metadata__" renames), checks shapes against the config and values for
// finiteness, widens to float32, and builds Linear modules (dense, or factored from the `latent`
// section of a latent checkpoint, docs/FORMAT.md).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "latentllm/io.hpp"
#include "latentllm/model.hpp"

namespace latentllm::model {

class WeightLoader {
 public:
  WeightLoader(const io::TensorStore& store, std::map<std::string, io::LatentModule> latent);

  // True when `name` (or its metadata alias) is stored.
  bool has(const std::string& name) const;
  // True when some stored tensor name starts with `prefix`.
  bool has_prefix(const std::string& prefix) const;
  // The stored name of a tensor: itself, or the name "__metadata__" maps it to (TinyStories-656K
  // stores model.embed_tokens.weight as lm_head.weight). Throws FormatError when neither exists.
  std::string resolve(const std::string& name) const;

  // [rows, cols] float copy. FormatError when missing or of another shape, NumericError when not finite.
  MatrixF matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const;
  // [n] float copy; same checks.
  VectorF vector(const std::string& name, std::int64_t n) const;
  // The linear module `module` ("model.layers.0.self_attn.q_proj") of shape [out, in], with a bias
  // if has_bias; factored when the latent section lists it.
  Linear linear(const std::string& module, std::int64_t in, std::int64_t out, bool has_bias);
  // Throws FormatError naming a latent module no architecture file asked for.
  void check_latent_used() const;

  const std::filesystem::path& dir() const { return store_.dir(); }

 private:
  const TensorView& view(const std::string& name, std::initializer_list<std::int64_t> shape) const;

  const io::TensorStore& store_;
  std::map<std::string, io::LatentModule> latent_;
  std::set<std::string> latent_used_;
};

}  // namespace latentllm::model
