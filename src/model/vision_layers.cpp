// A vision tower's encoder layers as a Model (vision.hpp): what lets every compression method, written
// against a decoder layer's roles and sites, compress a ViT too. The ViT's encoder layer has the
// roles of OPT's pre-LN decoder layer (q, k, v, out_proj with biases; fc1 → act → fc2), no RoPE, and
// attends over all positions of its image; the compressor's joint Q-K and V-O work from the input
// statistics (the attention-map and output losses summed over all query-key pairs and tokens), which
// do not depend on a mask.
#include <utility>

#include "latentllm/error.hpp"
#include "model/vision.hpp"

namespace latentllm::model {

void VisionModel::layer_forward(int i, MatrixF& h, ForwardObserver* obs) const {
  LayerState s;
  s.resid.swap(h);
  try {
    layer_resume(layer(i), i, s, obs);
  } catch (...) {
    h.swap(s.resid);
    throw;
  }
  h.swap(s.resid);
}

class VisionLayers final : public Model {
 public:
  VisionLayers(VisionModel& v, const std::filesystem::path& dir) : v_(v) {
    const VisionConfig& c = v.config();
    config_.model_type = c.model_type;
    config_.architecture = "CLIPVisionModel";
    config_.hidden_size = c.hidden_size;
    config_.num_hidden_layers = v.num_layers();
    config_.num_attention_heads = config_.num_key_value_heads = c.num_attention_heads;
    config_.head_dim = c.head_dim();
    config_.intermediate_size = c.intermediate_size;
    config_.max_position_embeddings = c.num_positions();
    config_.qkv_bias = config_.o_bias = config_.mlp_bias = true;
    attention_.hidden = static_cast<int>(c.hidden_size);
    attention_.num_heads = attention_.num_kv_heads = static_cast<int>(c.num_attention_heads);
    attention_.head_dim = static_cast<int>(c.head_dim());
    attention_.validate(dir.string() + ": vision_config");
    mlp_.gated = false;
    mlp_.act = v.activation();
    dir_ = dir;
    adopt_layers(std::move(v.layers_));
    v.layers_.clear();
  }
  ~VisionLayers() override { v_.layers_ = take_layers(); }
  VisionLayers(const VisionLayers&) = delete;
  VisionLayers& operator=(const VisionLayers&) = delete;

  std::string_view family() const override { return v_.family(); }

  void embed(std::span<const std::int32_t>, int, MatrixF&) const override { no_tokens("embed"); }
  void embed_from(std::span<const std::int32_t>, int, MatrixF&) const override { no_tokens("embed_from"); }

  void layer_resume(int i, LayerState& s, int T, ForwardObserver* obs) const override {
    const std::int64_t P = v_.config().num_positions();
    if (T != P || s.kv != nullptr) {
      throw Error(fmt::format("{}: vision layer {} over windows of {} positions{} (expected one image of {} "
                              "positions per window, no KV cache)", dir_.string(), i, T, s.kv ? " with a KV cache" : "",
                              P));
    }
    v_.layer_resume(layer(i), i, s, obs);
  }

  // Q·Kᵀ and P·V over all P × P pairs of each image, 2 FLOPs per multiply-add.
  double attention_flops(int T, std::int64_t n_tok) const override {
    return 4.0 * static_cast<double>(n_tok) * T * attention_.num_heads * attention_.head_dim;
  }

  std::vector<std::pair<std::string, std::int64_t>> non_layer_params() const override { return {}; }

 protected:
  void final_hidden(const MatrixF&, MatrixF&) const override { no_tokens("final_hidden"); }
  const WeightTable& lm_head() const override { no_tokens("lm_head"); }
  DecoderLayer build_layer(WeightLoader&, int) const override { no_tokens("build_layer"); }

 private:
  [[noreturn]] void no_tokens(std::string_view what) const {
    throw Error(fmt::format("{}: {} of a vision tower's layers (expected a language model: the vision layers take "
                            "image embeddings, calib::PipelineOptions::input_embeddings)", dir_.string(), what));
  }

  VisionModel& v_;
};

std::unique_ptr<Model> vision_layers(VisionModel& v, const std::filesystem::path& dir) {
  return std::make_unique<VisionLayers>(v, dir);
}

}  // namespace latentllm::model
