// The architecture files' factories, dispatched on by Model::load (model.cpp holds the table).
#pragma once

#include <filesystem>
#include <memory>

#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "model/weights.hpp"

namespace latentllm::model {

// OPTForCausalLM (opt.cpp).
std::unique_ptr<Model> make_opt(const io::ModelConfig& config, const std::filesystem::path& dir, WeightLoader& w);
// LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM (llama.cpp).
std::unique_ptr<Model> make_llama(const io::ModelConfig& config, const std::filesystem::path& dir, WeightLoader& w);

// The layer forward reached `site` (whose input is s.x): records it in s and reports it to obs;
// true if the forward should stop there (ForwardObserver::done_after).
inline bool reach(LayerState& s, Site site, ForwardObserver* obs, int layer) {
  s.at = site;
  return report_input(obs, layer, site, s.x);
}

// The token embedding [V, p] and the LM head [V, p] (empty when tied). Tied per config: when tied,
// either of the pair stands in for the other when only one is stored (TinyStories-656K stores only
// lm_head); when untied, both must be stored (FormatError naming the missing tensor).
struct EmbedAndHead {
  MatrixF embed;  // [V, p]
  MatrixF head;   // [V, p] or empty (tied: the head is `embed`)
};
EmbedAndHead load_embed_and_head(const WeightLoader& w, const std::string& embed_name, const std::string& head_name,
                                 std::int64_t V, std::int64_t p, bool tie);

// Gathers embedding rows: h[i, :] = table[ids[i], :]. Throws FormatError for ids outside [0, rows).
void gather_rows(const MatrixF& table, std::span<const std::int32_t> ids, MatrixF& h);

}  // namespace latentllm::model
