// The Llama family (HF modeling_llama.py, modeling_qwen2.py, modeling_qwen3.py, modeling_mistral.py):
// RMSNorm before attention and MLP, RoPE with the rotate_half convention (rope_scaling "linear" or
// "llama3"), grouped-query attention, SwiGLU MLP down(silu(gate·x) ⊙ up·x). Qwen2 adds q/k/v biases;
// Llama's attention_bias / mlp_bias add theirs; Qwen3 normalizes each head of q and k (q_norm, k_norm:
// RMSNorm over d_h) before RoPE; Mistral's sliding_window limits each query to the last
// sliding_window keys.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "latentllm/error.hpp"
#include "model/attention.hpp"
#include "model/cached_attention.hpp"
#include "model/arch.hpp"
#include "model/linear_fused.hpp"
#include "model/ops.hpp"
#include "core/parallel.hpp"
#include "model/profile.hpp"
#include "model/rope.hpp"

namespace latentllm::model {
namespace {

using json = nlohmann::json;

// The per-layer linear modules, in forward order; the indices below address them.
constexpr std::array<ModuleSpec, 7> kModules = {{
    {"self_attn.q_proj", Role::Q, Site::AttnIn, Dim::Hidden, Dim::QHeads, BiasSwitch::Qkv},
    {"self_attn.k_proj", Role::K, Site::AttnIn, Dim::Hidden, Dim::KvHeads, BiasSwitch::Qkv},
    {"self_attn.v_proj", Role::V, Site::AttnIn, Dim::Hidden, Dim::KvHeads, BiasSwitch::Qkv},
    {"self_attn.o_proj", Role::O, Site::AttnOut, Dim::QHeads, Dim::Hidden, BiasSwitch::O},
    {"mlp.gate_proj", Role::Gate, Site::MlpIn, Dim::Hidden, Dim::Ffn, BiasSwitch::Mlp},
    {"mlp.up_proj", Role::Up, Site::MlpIn, Dim::Hidden, Dim::Ffn, BiasSwitch::Mlp},
    {"mlp.down_proj", Role::Down, Site::MlpMid, Dim::Ffn, Dim::Hidden, BiasSwitch::Mlp},
}};
enum : std::size_t { kQ, kK, kV, kO, kGate, kUp, kDown };
constexpr std::array<std::string_view, 2> kNorms = {"input_layernorm.weight", "post_attention_layernorm.weight"};
constexpr std::string_view kQNorm = "self_attn.q_norm.weight", kKNorm = "self_attn.k_norm.weight";  // Qwen3 [d_h]

// rope_scaling (transformers' ROPE_INIT_FUNCTIONS): absent, null or "default" -> none; "linear" ->
// factor; "llama3" -> factor, low_freq_factor, high_freq_factor, original_max_position_embeddings.
// "type" is the older spelling of "rope_type".
void parse_rope_scaling(const io::JsonKeys& k, RopeSpec& rope) {
  const json* rs = k.find("rope_scaling");
  if (rs == nullptr) return;
  if (!rs->is_object()) k.fail("rope_scaling", "null or an object", rs);
  const io::JsonKeys sub(*rs, k.origin() + ": rope_scaling");
  const std::string type = sub.string_or("rope_type", sub.string_or("type", "default"));
  if (type == "default") return;
  if (type == "linear") {
    rope.scaling = RopeSpec::Scaling::Linear;
    rope.factor = sub.positive_number_or("factor", 1.0);
    return;
  }
  if (type != "llama3") {
    throw ConfigError(fmt::format("{}: rope_scaling.rope_type (expected default, linear or llama3, got {})",
                                  k.origin(), type));
  }
  rope.scaling = RopeSpec::Scaling::Llama3;
  rope.factor = sub.positive_number_or("factor", 8.0);
  rope.low_freq_factor = sub.positive_number_or("low_freq_factor", 1.0);
  rope.high_freq_factor = sub.positive_number_or("high_freq_factor", 4.0);
  rope.original_max_position_embeddings = sub.positive_number_or("original_max_position_embeddings", 8192);
  if (!(rope.high_freq_factor > rope.low_freq_factor)) {
    throw ConfigError(fmt::format("{}: rope_scaling high_freq_factor {} (expected > low_freq_factor {})", k.origin(),
                                  rope.high_freq_factor, rope.low_freq_factor));
  }
}

// The keys LlamaConfig, Qwen2Config, Qwen3Config and MistralConfig share. head_dim_default: 0 means
// hidden_size / num_attention_heads (which must then divide).
void parse_common(const io::JsonKeys& k, ModelConfig& c, std::int64_t head_dim_default = 0) {
  c.vocab_size = k.positive("vocab_size");
  c.hidden_size = k.positive("hidden_size");
  c.intermediate_size = k.positive("intermediate_size");
  c.num_hidden_layers = k.positive("num_hidden_layers");
  c.num_attention_heads = k.positive("num_attention_heads");
  c.max_position_embeddings = k.positive("max_position_embeddings");
  c.num_key_value_heads = k.positive_or("num_key_value_heads", c.num_attention_heads);
  if (k.find("head_dim") != nullptr) {
    c.head_dim = k.positive("head_dim");
  } else if (head_dim_default > 0) {
    c.head_dim = head_dim_default;
  } else {
    k.check_multiple("hidden_size", c.hidden_size, "num_attention_heads", c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  k.check_multiple("num_attention_heads", c.num_attention_heads, "num_key_value_heads", c.num_key_value_heads);
  if (c.head_dim % 2 != 0) {
    throw ConfigError(fmt::format("{}: head_dim (expected even for RoPE, got {})", k.origin(), c.head_dim));
  }
  c.word_embed_proj_dim = c.hidden_size;
  c.rms_norm_eps = k.positive_number_or("rms_norm_eps", 1e-6);
  c.rope.theta = k.positive_number_or("rope_theta", 10000.0);
  parse_rope_scaling(k, c.rope);
  c.hidden_act = k.string_or("hidden_act", "silu");
}

// Qwen2 and Qwen3 slide the window only on layers >= max_window_layers: not implemented, so refused.
void refuse_qwen_sliding_window(const io::JsonKeys& k) {
  if (k.boolean_or("use_sliding_window", false)) {
    throw ConfigError(fmt::format("{}: use_sliding_window is unsupported (expected false, got true)", k.origin()));
  }
}

void parse_llama(const io::JsonKeys& k, ModelConfig& c) {
  parse_common(k, c);
  c.attention_bias = k.boolean_or("attention_bias", false);
  c.mlp_bias = k.boolean_or("mlp_bias", false);
  c.qkv_bias = c.o_bias = c.attention_bias;
}

void parse_qwen2(const io::JsonKeys& k, ModelConfig& c) {
  parse_common(k, c);
  c.qkv_bias = true;
  refuse_qwen_sliding_window(k);
}

// Qwen3Config: head_dim 128 by default, attention_bias (q, k, v, o), q_norm / k_norm always.
void parse_qwen3(const io::JsonKeys& k, ModelConfig& c) {
  parse_common(k, c, 128);
  c.attention_bias = k.boolean_or("attention_bias", false);
  c.qkv_bias = c.o_bias = c.attention_bias;
  c.qk_norm = true;
  refuse_qwen_sliding_window(k);
}

// MistralConfig(sliding_window=4096) when absent; an explicit null means no window.
void parse_mistral(const io::JsonKeys& k, ModelConfig& c) {
  parse_common(k, c);
  c.sliding_window = k.is_null("sliding_window") ? 0 : k.positive_or("sliding_window", 4096);
}

class LlamaModel final : public Model {
 public:
  LlamaModel(const ModelConfig& config, const std::filesystem::path& dir, WeightLoader& w) {
    config_ = config;
    dir_ = dir;
    act_ = parse_activation(config_.hidden_act, (dir / "config.json").string() + ": hidden_act");
    eps_ = static_cast<float>(config_.rms_norm_eps);
    attention_ = {static_cast<int>(config_.hidden_size), static_cast<int>(config_.num_attention_heads),
                  static_cast<int>(config_.num_key_value_heads), static_cast<int>(config_.head_dim), true,
                  config_.rope, config_.qk_norm};
    mlp_ = {true, act_};
    // Mistral's sliding window (a window longer than any int window T never masks anything).
    window_ = static_cast<int>(std::min<std::int64_t>(config_.sliding_window, std::numeric_limits<int>::max()));
    const std::int64_t d = config_.hidden_size;
    auto eh = load_embed_and_head(w, "model.embed_tokens.weight", "lm_head.weight", config_.vocab_size, d,
                                  config_.tie_word_embeddings);
    embed_tokens_ = std::move(eh.embed);
    lm_head_ = std::move(eh.head);
    norm_ = w.vector("model.norm.weight", d);
  }

  std::string_view family() const override { return "llama"; }

  void embed(std::span<const std::int32_t> ids, int T, MatrixF& h) const override {
    detail::ProfileScope scope(&ForwardProfile::other_s);
    if (T <= 0 || ids.size() % static_cast<std::size_t>(T) != 0) {
      throw ConfigError(fmt::format("{}: window of {} tokens does not divide {} ids", dir_.string(), T, ids.size()));
    }
    embed_tokens_.gather(ids, h);  // [n, d]
  }

  // RoPE needs no position here (attention rotates q and k at theirs); the window is checked by forward_cached.
  void embed_from(std::span<const std::int32_t> ids, int /*first*/, MatrixF& h) const override {
    detail::ProfileScope scope(&ForwardProfile::other_s);
    embed_tokens_.gather(ids, h);  // [n, d]
  }

  // Each block runs from the site the state stands at to the next (layer_resume in model.hpp).
  void layer_resume(int i, LayerState& s, int T, ForwardObserver* obs) const override {
    const DecoderLayer& L = layer(i);
    MatrixF& h = s.resid;  // [n, d]
    MatrixF& x = s.x;      // [n, width of s.at]
    check_hidden(h, T, config_.hidden_size, dir_);
    MatrixF y;  // [n, d] a module's output
    if (!s.at) {
      norm(h, L.norm(kNorms[0]), x);
      if (reach(s, Site::AttnIn, obs, i)) return;
    }
    if (s.at == Site::AttnIn) {
      attention(L, x, T, s, y);  // [n, H·d_h]
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

 public:
  std::vector<std::pair<std::string, std::int64_t>> non_layer_params() const override {
    std::vector<std::pair<std::string, std::int64_t>> out = {{"embed", embed_tokens_.size()}, {"norm", norm_.size()}};
    if (!lm_head_.empty()) out.emplace_back("lm_head", lm_head_.size());
    return out;
  }

 protected:
  void final_hidden(const MatrixF& h, MatrixF& x) const override { norm(h, norm_, x); }

  const WeightTable& lm_head() const override { return lm_head_.empty() ? embed_tokens_ : lm_head_; }

  DecoderLayer build_layer(WeightLoader& w, int i) const override {
    const std::string lp = fmt::format("model.layers.{}.", i);
    DecoderLayer L;
    L.linears = load_linears(w, lp, kModules, config_);
    for (const auto n : kNorms) L.norms.emplace_back(std::string(n), w.vector(lp + std::string(n), config_.hidden_size));
    if (config_.qk_norm) {
      for (const auto n : {kQNorm, kKNorm}) L.norms.emplace_back(std::string(n), w.vector(lp + std::string(n), config_.head_dim));
    }
    return L;
  }

 private:
  AttentionShape attention_shape(int T) const {
    const int H = static_cast<int>(config_.num_attention_heads), H_kv = static_cast<int>(config_.num_key_value_heads);
    const int d_h = static_cast<int>(config_.head_dim);
    return {T, H, H_kv, d_h, 1.0f / std::sqrt(static_cast<float>(d_h)), window_};
  }

  // x: [n, d] the attention block's input -> a: [n, H·d_h] the concatenated head outputs; with a KV
  // cache (s.kv), x holds T new positions past..past+T−1 of one sequence, with a batch (s.kvs) one new
  // position of each sequence (cached_attention: the keys' transform, k_norm and RoPE, sits between
  // k_proj and the cache).
  void attention(const DecoderLayer& L, const MatrixF& x, int T, const LayerState& s, MatrixF& a) const {
    const int d_h = static_cast<int>(config_.head_dim);
    const bool batched = !s.kvs.empty(), cached = batched || s.kv != nullptr;
    MatrixF q, k, v;  // q: [n, H·d_h]; k, v: [n, H_kv·d_h]
    L.linears[kQ].forward(x, q);
    {
      detail::ProfileScope scope(&ForwardProfile::other_s);
      if (config_.qk_norm) rms_norm_heads(q, d_h, L.norm(kQNorm), eps_);  // Qwen3: RMSNorm per head, before RoPE
      if (batched) {
        rope_rows(q, d_h, s.pasts);
      } else {
        apply_rope(q, T, d_h, rope_table(config_.rope, T, d_h, s.past));
      }
    }
    // k: [m, H_kv·d_h] k_proj outputs at positions first..first+m−1 (windows of T when not cached).
    const auto key_transform = [&](MatrixF& keys, int first) {
      detail::ProfileScope scope(&ForwardProfile::other_s);
      const int m = cached ? static_cast<int>(keys.rows()) : T;
      if (config_.qk_norm) rms_norm_heads(keys, d_h, L.norm(kKNorm), eps_);
      apply_rope(keys, m, d_h, rope_table(config_.rope, m, d_h, first));
    };
    if (batched) {
      cached_attention_batch(q, x, L.linears[kK], L.linears[kV], key_transform, attention_shape(1), s.kvs, s.pasts, a);
      return;
    }
    if (s.kv != nullptr) {
      cached_attention(q, x, L.linears[kK], L.linears[kV], key_transform, attention_shape(T), *s.kv, s.past, a);
      return;
    }
    L.linears[kK].forward(x, k);
    L.linears[kV].forward(x, v);
    key_transform(k, 0);
    causal_attention(q, k, v, attention_shape(T), a);
  }

  // q: [B, H·d_h], row b one position pasts[b] of its sequence: each row rotated as a one-row decoding
  // step at that position rotates it.
  void rope_rows(MatrixF& q, int d_h, std::span<const int> pasts) const {
    MatrixF row;  // [1, H·d_h]
    for (std::int64_t b = 0; b < q.rows(); ++b) {
      row = q.row(b);
      apply_rope(row, 1, d_h, rope_table(config_.rope, 1, d_h, pasts[static_cast<std::size_t>(b)]));
      q.row(b) = row.row(0);
    }
  }

  void norm(const MatrixF& x, const VectorF& weight, MatrixF& y) const {
    detail::ProfileScope scope(&ForwardProfile::other_s);
    rms_norm(x, weight, eps_, y);
  }

  Activation act_ = Activation::Silu;
  float eps_ = 1e-6f;
  int window_ = 0;        // sliding window in tokens (attention.hpp), 0 = none
  WeightTable embed_tokens_;  // [V, d]
  WeightTable lm_head_;       // [V, d]; empty when tied to embed_tokens_
  VectorF norm_;          // [d]
};

std::unique_ptr<Model> make_llama(const ModelConfig& config, const std::filesystem::path& dir, WeightLoader& w) {
  return std::make_unique<LlamaModel>(config, dir, w);
}

constexpr std::array<Architecture, 4> kArchitectures = {{
    {"LlamaForCausalLM", "llama", false, parse_llama, make_llama,
     R"({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
         "num_attention_heads": 32, "max_position_embeddings": 2048})"},
    {"Qwen2ForCausalLM", "qwen2", false, parse_qwen2, make_llama,
     R"({"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 32768})"},
    {"Qwen3ForCausalLM", "qwen3", false, parse_qwen3, make_llama,
     R"({"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 32768})"},
    {"MistralForCausalLM", "mistral", false, parse_mistral, make_llama,
     R"({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072})"},
}};

}  // namespace

std::span<const Architecture> llama_architectures() { return kArchitectures; }

}  // namespace latentllm::model
