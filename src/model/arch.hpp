// What an architecture file (opt.cpp, llama.cpp) declares and the helpers the files share.
//
// An architecture file holds everything that differs between architectures: the config.json keys it
// reads (with its config class's defaults), the HF tensor names, the module table (which linear
// modules a layer has, their role, input site, dims and bias) and the forward pass. The registry
// (config.cpp) only lists the files' architectures. Adding an architecture to a family touches that
// family's file; adding a family, a new file and one line of the registry.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "io/json_keys.hpp"
#include "latentllm/model.hpp"
#include "model/weights.hpp"

namespace latentllm::model {

struct Architecture {
  std::string_view architecture;  // config.json architectures[0], e.g. "Qwen3ForCausalLM"
  std::string_view model_type;    // config.json model_type, e.g. "qwen3"
  bool tie_word_embeddings;       // the transformers default of tie_word_embeddings
  // Reads the architecture's keys into c (the registry has set architecture, model_type and the keys
  // every architecture shares); throws ConfigError through keys.fail for a bad key.
  void (*parse)(const io::JsonKeys& keys, ModelConfig& c);
  // The model with its weights outside the decoder layers (Model::load then loads or checks the layers).
  std::unique_ptr<Model> (*make)(const ModelConfig& c, const std::filesystem::path& dir, WeightLoader& w);
  // The transformers config class's defaults of the keys `parse` requires, as a JSON object: a nested
  // config (LLaVA's text_config) is saved without the values equal to its class's defaults.
  std::string_view class_defaults;
};
std::span<const Architecture> opt_architectures();    // opt.cpp
std::span<const Architecture> llama_architectures();  // llama.cpp

// doc with the class_defaults of the architecture it names (architectures[0], or model_type) under its
// own keys (config.cpp); doc itself when it names no supported architecture.
nlohmann::json with_class_defaults(const nlohmann::json& doc);

// llava.cpp: the key-prefix rules that map the language model's HF names onto those of the LLaVA
// checkpoint w reads (hub or newer transformers layout); FormatError when it has neither.
std::vector<WeightLoader::PrefixRule> multimodal_language_rules(const WeightLoader& w);
// The stored prefixes of a LLaVA checkpoint's vision tower and projector: their latent modules are
// LlavaModel::load's, not the language model's.
std::vector<std::string> multimodal_tower_prefixes(const WeightLoader& w);

// ---- module tables ----------------------------------------------------------------------------

enum class Dim { Hidden, QHeads, KvHeads, Ffn };  // d, H·d_h, H_kv·d_h, FFN width
enum class BiasSwitch { Qkv, O, Mlp };            // which ModelConfig switch gives the module a bias

// One linear module of a decoder layer: HF name relative to the layer, role, input site, dims, bias.
struct ModuleSpec {
  std::string_view rel;
  Role role;
  Site site;
  Dim in, out;
  BiasSwitch bias;
};

std::int64_t dim_of(const ModelConfig& c, Dim d);
// The linears of the layer whose tensors start with `prefix` ("model.layers.3."), in table order.
std::vector<Linear> load_linears(WeightLoader& w, const std::string& prefix, std::span<const ModuleSpec> table,
                                 const ModelConfig& c);

// ---- forward helpers --------------------------------------------------------------------------

// The layer forward reached `site` (whose input is s.x): records it in s and reports it to obs;
// true if the forward should stop there (ForwardObserver::done_after).
inline bool reach(LayerState& s, Site site, ForwardObserver* obs, int layer) {
  s.at = site;
  return report_input(obs, layer, site, s.x);
}

// The token embedding [V, p] and the LM head [V, p] (empty when tied). Tied per config: when tied,
// either of the pair stands in for the other when only one is stored (TinyStories-656K stores only
// lm_head); when untied, both must be stored (FormatError naming the missing tensor). Mapped tables
// when the loader is lazy. A head the latent section lists quantized (compress --head-bits: the module
// "lm_head", tied or not) is its packed table, and the embedding stays the stored float table.
struct EmbedAndHead {
  WeightTable embed;  // [V, p]
  WeightTable head;   // [V, p] or empty (tied: the head is `embed`)
};
EmbedAndHead load_embed_and_head(WeightLoader& w, const std::string& embed_name, const std::string& head_name,
                                 std::int64_t V, std::int64_t p, bool tie);

// Throws Error "<dir>: hidden states [r, c] (expected [n_seq·T, d])" unless h is whole windows of width d.
void check_hidden(const MatrixF& h, int T, std::int64_t d, const std::filesystem::path& dir);

}  // namespace latentllm::model
