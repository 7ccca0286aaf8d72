// Checkpoint I/O: safetensors (single file or sharded), config.json -> ModelConfig, and the
// safetensors writer used for latent checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/tensor.hpp"

namespace latentllm::io {

// config.json of a Hugging Face causal LM. Field names copy the config.json keys verbatim; keys an
// architecture does not use keep their defaults. `raw` keeps the whole document (including our
// `latent` section in latent checkpoints).
struct ModelConfig {
  std::string model_type;       // "opt", "llama", "qwen2", "mistral"
  std::string architecture;     // architectures[0], e.g. "OPTForCausalLM"
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;             // d
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;     // = num_attention_heads when absent (MHA)
  std::int64_t head_dim = 0;                // = hidden_size / num_attention_heads when absent
  std::int64_t intermediate_size = 0;       // Llama family FFN width
  std::int64_t ffn_dim = 0;                 // OPT FFN width
  std::int64_t max_position_embeddings = 0;
  std::int64_t word_embed_proj_dim = 0;     // OPT; = hidden_size when absent
  double rms_norm_eps = 1e-6;               // Llama family
  double rope_theta = 10000.0;              // Llama family
  bool do_layer_norm_before = true;         // OPT
  bool enable_bias = true;                  // OPT
  bool layer_norm_elementwise_affine = true;  // OPT
  bool attention_bias = false;              // Llama/Mistral; Qwen2 always has q/k/v biases
  bool mlp_bias = false;
  bool tie_word_embeddings = true;
  std::string hidden_act;                   // "relu" (OPT activation_function), "silu", ...
  std::optional<std::int64_t> bos_token_id, eos_token_id, pad_token_id;
  std::string torch_dtype;
  nlohmann::json raw;

  // FFN width for either family.
  std::int64_t ffn_width() const { return ffn_dim > 0 ? ffn_dim : intermediate_size; }
};

// Parses and validates config.json. Throws ConfigError "<path>: <key>: ..." for missing or
// invalid keys and for unsupported architectures (the message lists the supported ones).
ModelConfig load_config(const std::filesystem::path& config_json);
ModelConfig parse_config(const nlohmann::json& doc, const std::string& origin);

// One memory-mapped safetensors file, fully validated on open (header size cap, JSON, dtypes,
// shape × dtype = byte length, offsets in range, in order, not overlapping, data filling the file).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const;
  const std::vector<TensorView>& tensors() const;   // in file order
  const TensorView* find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const;  // "__metadata__"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// All tensors of a checkpoint directory: model.safetensors, or the shards listed by
// model.safetensors.index.json.
class TensorStore {
 public:
  static TensorStore open(const std::filesystem::path& dir);
  TensorStore(TensorStore&&) noexcept;
  TensorStore& operator=(TensorStore&&) noexcept;
  ~TensorStore();

  bool has(const std::string& name) const;
  // Throws FormatError "<dir>: missing tensor <name>" when absent.
  const TensorView& get(const std::string& name) const;
  // get() plus a shape check: FormatError "<name>: shape (expected [a, b], got [c, d])".
  const TensorView& get(const std::string& name, std::span<const std::int64_t> expected_shape) const;
  std::vector<std::string> names() const;
  const std::filesystem::path& dir() const;
  // Merged "__metadata__" of all files.
  const std::map<std::string, std::string>& metadata() const;

 private:
  TensorStore();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A tensor to write, converted from float32 to `dtype` by the writer.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::span<const float> data;  // numel(shape) values, row-major
};

// Writes a safetensors file atomically (temporary name + rename). Tensors are stored in the order
// given; names must be unique. Throws IoError naming the path on failure.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace latentllm::io
