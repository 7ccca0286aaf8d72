// The Llama family (HF modeling_llama.py, modeling_qwen2.py, modeling_mistral.py): RMSNorm before
// attention and MLP, RoPE with the rotate_half convention, grouped-query attention, SwiGLU MLP
// down(silu(gate·x) ⊙ up·x). Qwen2 adds q/k/v biases; Llama's attention_bias / mlp_bias add theirs;
// Mistral's sliding_window limits each query to the last sliding_window keys.
// (rope_scaling is refused by io::load_config.)
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "latentllm/error.hpp"
#include "model/attention.hpp"
#include "model/families.hpp"
#include "model/linear_fused.hpp"
#include "model/ops.hpp"
#include "core/parallel.hpp"
#include "model/profile.hpp"
#include "model/rope.hpp"

namespace latentllm::model {
namespace {

enum class Dim { Hidden, QHeads, KvHeads, Ffn };  // d, H·d_h, H_kv·d_h, ffn
enum class Bias { Qkv, O, Mlp };                   // which config switch gives the module a bias

struct LinearSpec {
  std::string_view rel;  // HF name relative to the layer
  Dim in, out;
  Bias bias;
};

// The per-layer linear modules, in forward order; the indices below address them.
constexpr std::array<LinearSpec, 7> kLinears = {{
    {"self_attn.q_proj", Dim::Hidden, Dim::QHeads, Bias::Qkv},
    {"self_attn.k_proj", Dim::Hidden, Dim::KvHeads, Bias::Qkv},
    {"self_attn.v_proj", Dim::Hidden, Dim::KvHeads, Bias::Qkv},
    {"self_attn.o_proj", Dim::QHeads, Dim::Hidden, Bias::O},
    {"mlp.gate_proj", Dim::Hidden, Dim::Ffn, Bias::Mlp},
    {"mlp.up_proj", Dim::Hidden, Dim::Ffn, Bias::Mlp},
    {"mlp.down_proj", Dim::Ffn, Dim::Hidden, Bias::Mlp},
}};
enum : std::size_t { kQ, kK, kV, kO, kGate, kUp, kDown };
constexpr std::array<std::string_view, 2> kNorms = {"input_layernorm.weight", "post_attention_layernorm.weight"};

void check_config(const io::ModelConfig& c, const std::string& origin) {
  auto positive = [&](std::string_view key, std::int64_t v) {
    if (v <= 0) throw ConfigError(fmt::format("{}: {} (expected > 0, got {})", origin, key, v));
  };
  positive("vocab_size", c.vocab_size);
  positive("hidden_size", c.hidden_size);
  positive("num_hidden_layers", c.num_hidden_layers);
  positive("num_attention_heads", c.num_attention_heads);
  positive("num_key_value_heads", c.num_key_value_heads);
  positive("head_dim", c.head_dim);
  positive("intermediate_size", c.intermediate_size);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw ConfigError(fmt::format("{}: num_attention_heads {} (expected a multiple of num_key_value_heads {})",
                                  origin, c.num_attention_heads, c.num_key_value_heads));
  }
  if (c.head_dim % 2 != 0) throw ConfigError(fmt::format("{}: head_dim (expected even for RoPE, got {})", origin, c.head_dim));
}

class LlamaModel final : public Model {
 public:
  LlamaModel(const io::ModelConfig& config, const std::filesystem::path& dir, WeightLoader& w) {
    config_ = config;
    dir_ = dir;
    const std::string origin = (dir / "config.json").string();
    check_config(config_, origin);
    act_ = parse_activation(config_.hidden_act.empty() ? "silu" : config_.hidden_act, origin + ": hidden_act");
    eps_ = static_cast<float>(config_.rms_norm_eps);
    rope_.theta = config_.rope_theta;
    // Mistral's sliding window (a window longer than any int window T never masks anything).
    window_ = static_cast<int>(std::min<std::int64_t>(config_.sliding_window, std::numeric_limits<int>::max()));
    const std::int64_t d = config_.hidden_size;
    auto eh = load_embed_and_head(w, "model.embed_tokens.weight", "lm_head.weight", config_.vocab_size, d,
                                  config_.tie_word_embeddings);
    embed_tokens_ = std::move(eh.embed);
    lm_head_ = std::move(eh.head);
    norm_ = w.vector("model.norm.weight", d);
    for (std::int64_t i = 0; i < config_.num_hidden_layers; ++i) layers_.push_back(load_layer(w, i));
  }

  std::string_view family() const override { return "llama"; }

  void embed(std::span<const std::int32_t> ids, int T, MatrixF& h) const override {
    detail::ProfileScope scope(&ForwardProfile::other_s);
    if (T <= 0 || ids.size() % static_cast<std::size_t>(T) != 0) {
      throw ConfigError(fmt::format("{}: window of {} tokens does not divide {} ids", dir_.string(), T, ids.size()));
    }
    gather_rows(embed_tokens_, ids, h);  // [n, d]
  }

  // Each block runs from the site the state stands at to the next (layer_resume in model.hpp).
  void layer_resume(int i, LayerState& s, int T, ForwardObserver* obs) const override {
    const DecoderLayer& L = layers_.at(static_cast<std::size_t>(i));
    MatrixF& h = s.resid;  // [n, d]
    MatrixF& x = s.x;      // [n, width of s.at]
    check_window(h, T);
    MatrixF y;  // [n, d] a module's output
    if (!s.at) {
      norm(h, L.norm(kNorms[0]), x);
      if (reach(s, Site::AttnIn, obs, i)) return;
    }
    if (s.at == Site::AttnIn) {
      attention(L, x, T, y);  // [n, H·d_h]
      x.swap(y);
      if (reach(s, Site::AttnOut, obs, i)) return;
    }
    if (s.at == Site::AttnOut) {
      linear_forward(L.linears[kO], x, h, accumulated());  // the residual add, fused
      norm(h, L.norm(kNorms[1]), x);
      if (reach(s, Site::MlpIn, obs, i)) return;
    }
    if (s.at == Site::MlpIn) {
      MatrixF u;  // [n, ffn]
      L.linears[kUp].forward(x, u);
      linear_forward(L.linears[kGate], x, y, activated(act_, &u));  // σ(gate) ⊙ up, fused
      x.swap(y);
      if (reach(s, Site::MlpMid, obs, i)) return;
    }
    linear_forward(L.linears[kDown], x, h, accumulated());
    s.at.reset();
    x.resize(0, 0);
  }

  double attention_flops(int T, std::int64_t n_tok) const override {
    return causal_attention_flops(attention_shape(T), n_tok / T);
  }

 protected:
  std::vector<std::pair<std::string, std::int64_t>> outer_params() const override {
    std::vector<std::pair<std::string, std::int64_t>> out = {{"embed", embed_tokens_.size()}, {"norm", norm_.size()}};
    if (lm_head_.size() > 0) out.emplace_back("lm_head", lm_head_.size());
    return out;
  }

  void final_hidden(const MatrixF& h, MatrixF& x) const override { norm(h, norm_, x); }

  const MatrixF& lm_head_weight() const override { return lm_head_.size() > 0 ? lm_head_ : embed_tokens_; }

 private:
  DecoderLayer load_layer(WeightLoader& w, std::int64_t i) const {
    const std::string lp = fmt::format("model.layers.{}.", i);
    const std::int64_t d_h = config_.head_dim;
    auto dim = [&](Dim d) {
      switch (d) {
        case Dim::Hidden: return config_.hidden_size;
        case Dim::QHeads: return config_.num_attention_heads * d_h;
        case Dim::KvHeads: return config_.num_key_value_heads * d_h;
        case Dim::Ffn: return config_.intermediate_size;
      }
      return std::int64_t{0};
    };
    // io::load_config resolves the per-family bias switches (Qwen2: q/k/v always; Llama: attention_bias).
    auto has_bias = [&](Bias b) {
      switch (b) {
        case Bias::Qkv: return config_.qkv_bias;
        case Bias::O: return config_.o_bias;
        case Bias::Mlp: return config_.mlp_bias;
      }
      return false;
    };
    DecoderLayer L;
    for (const auto& s : kLinears)
      L.linears.push_back(w.linear(lp + std::string(s.rel), dim(s.in), dim(s.out), has_bias(s.bias)));
    for (const auto n : kNorms) L.norms.emplace_back(std::string(n), w.vector(lp + std::string(n), config_.hidden_size));
    return L;
  }

  AttentionShape attention_shape(int T) const {
    const int H = static_cast<int>(config_.num_attention_heads), H_kv = static_cast<int>(config_.num_key_value_heads);
    const int d_h = static_cast<int>(config_.head_dim);
    return {T, H, H_kv, d_h, 1.0f / std::sqrt(static_cast<float>(d_h)), window_};
  }

  // x: [n, d] the attention block's input -> a: [n, H·d_h] the concatenated head outputs.
  void attention(const DecoderLayer& L, const MatrixF& x, int T, MatrixF& a) const {
    const int d_h = static_cast<int>(config_.head_dim);
    MatrixF q, k, v;  // q: [n, H·d_h]; k, v: [n, H_kv·d_h]
    L.linears[kQ].forward(x, q);
    L.linears[kK].forward(x, k);
    L.linears[kV].forward(x, v);
    {
      detail::ProfileScope scope(&ForwardProfile::other_s);
      const RopeTable rope = rope_table(rope_, T, d_h);
      apply_rope(q, T, d_h, rope);
      apply_rope(k, T, d_h, rope);
    }
    causal_attention(q, k, v, attention_shape(T), a);
  }

  void norm(const MatrixF& x, const VectorF& weight, MatrixF& y) const {
    detail::ProfileScope scope(&ForwardProfile::other_s);
    rms_norm(x, weight, eps_, y);
  }

  void check_window(const MatrixF& h, int T) const {
    if (T <= 0 || h.cols() != config_.hidden_size || h.rows() % T != 0) {
      throw Error(fmt::format("{}: hidden states [{}, {}] (expected [n_seq·{}, {}])", dir_.string(), h.rows(),
                              h.cols(), T, config_.hidden_size));
    }
  }

  Activation act_ = Activation::Silu;
  float eps_ = 1e-6f;
  RopeSpec rope_;
  int window_ = 0;        // sliding window in tokens (attention.hpp), 0 = none
  MatrixF embed_tokens_;  // [V, d]
  MatrixF lm_head_;       // [V, d]; empty when tied to embed_tokens_
  VectorF norm_;          // [d]
};

}  // namespace

std::unique_ptr<Model> make_llama(const io::ModelConfig& config, const std::filesystem::path& dir, WeightLoader& w) {
  return std::make_unique<LlamaModel>(config, dir, w);
}

}  // namespace latentllm::model
