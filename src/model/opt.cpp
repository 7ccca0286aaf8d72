// OPT (OPTForCausalLM, HF modeling_opt.py): learned positions with offset 2, LayerNorm before
// (do_layer_norm_before) or after the residual add, ReLU MLP, biases on every linear, queries scaled
// by d_h^−½, optional project_in/project_out when word_embed_proj_dim ≠ hidden_size (OPT-350M).
#include <array>
#include <cmath>

#include "latentllm/error.hpp"
#include "model/attention.hpp"
#include "model/cached_attention.hpp"
#include "model/arch.hpp"
#include "model/linear_fused.hpp"
#include "model/ops.hpp"
#include "core/parallel.hpp"
#include "model/profile.hpp"

namespace latentllm::model {
namespace {

constexpr float kLayerNormEps = 1e-5f;  // OPT's nn.LayerNorm default
constexpr int kPositionOffset = 2;      // OPTLearnedPositionalEmbedding: position p uses row p + 2

// The per-layer linear modules, in forward order; the indices below address them.
constexpr std::array<ModuleSpec, 6> kModules = {{
    {"self_attn.q_proj", Role::Q, Site::AttnIn, Dim::Hidden, Dim::Hidden, BiasSwitch::Qkv},
    {"self_attn.k_proj", Role::K, Site::AttnIn, Dim::Hidden, Dim::Hidden, BiasSwitch::Qkv},
    {"self_attn.v_proj", Role::V, Site::AttnIn, Dim::Hidden, Dim::Hidden, BiasSwitch::Qkv},
    {"self_attn.out_proj", Role::O, Site::AttnOut, Dim::Hidden, Dim::Hidden, BiasSwitch::O},
    {"fc1", Role::Up, Site::MlpIn, Dim::Hidden, Dim::Ffn, BiasSwitch::Mlp},
    {"fc2", Role::Down, Site::MlpMid, Dim::Ffn, Dim::Hidden, BiasSwitch::Mlp},
}};
enum : std::size_t { kQ, kK, kV, kOut, kFc1, kFc2 };
constexpr std::array<std::string_view, 2> kNorms = {"self_attn_layer_norm", "final_layer_norm"};

// transformers OPTConfig: every linear has a bias when enable_bias; one FFN width ffn_dim; ReLU by default.
void parse_opt(const io::JsonKeys& k, ModelConfig& c) {
  c.vocab_size = k.positive("vocab_size");
  c.hidden_size = k.positive("hidden_size");
  c.num_hidden_layers = k.positive("num_hidden_layers");
  c.ffn_dim = k.positive("ffn_dim");
  c.num_attention_heads = k.positive("num_attention_heads");
  c.max_position_embeddings = k.positive("max_position_embeddings");
  k.check_multiple("hidden_size", c.hidden_size, "num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = c.num_attention_heads;
  c.head_dim = c.hidden_size / c.num_attention_heads;
  c.word_embed_proj_dim = k.positive_or("word_embed_proj_dim", c.hidden_size);
  c.do_layer_norm_before = k.boolean_or("do_layer_norm_before", true);
  c.enable_bias = k.boolean_or("enable_bias", true);
  c.layer_norm_elementwise_affine = k.boolean_or("layer_norm_elementwise_affine", true);
  c.hidden_act = k.string_or("activation_function", "relu");
  c.qkv_bias = c.o_bias = c.mlp_bias = c.enable_bias;
}

class OptModel final : public Model {
 public:
  OptModel(const ModelConfig& config, const std::filesystem::path& dir, WeightLoader& w) {
    config_ = config;
    dir_ = dir;
    const std::string origin = (dir / "config.json").string();
    act_ = parse_activation(config_.hidden_act, origin + ": activation_function");
    const int H = static_cast<int>(config_.num_attention_heads);
    attention_ = {static_cast<int>(config_.hidden_size), H, H, static_cast<int>(config_.head_dim), false, {}, false};
    mlp_ = {false, act_};
    const std::int64_t d = config_.hidden_size, V = config_.vocab_size;
    const std::int64_t p = config_.word_embed_proj_dim > 0 ? config_.word_embed_proj_dim : d;
    // save_pretrained writes "model.decoder.*"; OPTModel checkpoints (and some conversions) "decoder.*".
    const std::string pre = w.has_prefix("model.decoder.") ? "model.decoder." : "decoder.";

    auto eh = load_embed_and_head(w, pre + "embed_tokens.weight", "lm_head.weight", V, p, config_.tie_word_embeddings);
    embed_tokens_ = std::move(eh.embed);
    lm_head_ = std::move(eh.head);
    embed_positions_ = w.matrix(pre + "embed_positions.weight", config_.max_position_embeddings + kPositionOffset, d);
    if (p != d) {
      project_in_ = w.linear(pre + "project_in", p, d, false);
      project_out_ = w.linear(pre + "project_out", d, p, false);
    }
    // HF builds the decoder's final LayerNorm only for pre-LN models (and not _remove_final_layer_norm).
    has_final_norm_ = config_.do_layer_norm_before && !config_.raw.value("_remove_final_layer_norm", false);
    if (has_final_norm_ && config_.layer_norm_elementwise_affine) {
      final_norm_w_ = w.vector(pre + "final_layer_norm.weight", d);
      final_norm_b_ = w.vector(pre + "final_layer_norm.bias", d);
    }
    pre_ = pre;
  }

  std::string_view family() const override { return "opt"; }

  void embed(std::span<const std::int32_t> ids, int T, MatrixF& h) const override {
    if (T <= 0 || ids.size() % static_cast<std::size_t>(T) != 0 || T > config_.max_position_embeddings) {
      throw ConfigError(fmt::format("{}: window of {} tokens (expected 1..{} dividing {} ids)", dir_.string(), T,
                                    config_.max_position_embeddings, ids.size()));
    }
    embed_at(ids, T, 0, h);
  }

  void embed_from(std::span<const std::int32_t> ids, int first, MatrixF& h) const override {
    const auto n = static_cast<std::int64_t>(ids.size());
    if (n < 1 || first < 0 || first + n > config_.max_position_embeddings) {
      throw ConfigError(fmt::format("{}: positions {}..{} (expected within max_position_embeddings = {})",
                                    dir_.string(), first, first + n - 1, config_.max_position_embeddings));
    }
    embed_at(ids, static_cast<int>(n), first, h);
  }

  // Each block runs from the site the state stands at to the next (layer_resume in model.hpp).
  void layer_resume(int i, LayerState& s, int T, ForwardObserver* obs) const override {
    const DecoderLayer& L = layer(i);
    const bool pre_ln = config_.do_layer_norm_before;
    MatrixF& h = s.resid;  // [n, d]
    MatrixF& x = s.x;      // [n, width of s.at]
    check_hidden(h, T, config_.hidden_size, dir_);
    MatrixF y;  // [n, d] a module's output
    if (!s.at) {
      block_input(h, L, 0, x);
      if (reach(s, Site::AttnIn, obs, i)) return;
    }
    if (s.at == Site::AttnIn) {
      attention(L, x, T, s, y);
      x.swap(y);
      if (reach(s, Site::AttnOut, obs, i)) return;
    }
    if (s.at == Site::AttnOut) {
      linear_forward(L.linears[kOut], x, h, accumulated());  // the residual add, fused
      if (!pre_ln) norm(h, L, 0, h);
      block_input(h, L, 1, x);
      if (reach(s, Site::MlpIn, obs, i)) return;
    }
    if (s.at == Site::MlpIn) {
      linear_forward(L.linears[kFc1], x, y, activated(act_));  // [n, ffn] the activation, fused
      x.swap(y);
      if (reach(s, Site::MlpMid, obs, i)) return;
    }
    linear_forward(L.linears[kFc2], x, h, accumulated());
    if (!pre_ln) norm(h, L, 1, h);
    s.at.reset();
    x.resize(0, 0);
  }

  double attention_flops(int T, std::int64_t n_tok) const override {
    return causal_attention_flops(attention_shape(T), n_tok / T);
  }

 public:
  std::vector<std::pair<std::string, std::int64_t>> non_layer_params() const override {
    const std::int64_t embed = embed_tokens_.size() + embed_positions_.size() + project_in_.num_params() +
                               project_out_.num_params();
    std::vector<std::pair<std::string, std::int64_t>> out = {
        {"embed", embed}, {"norm", final_norm_w_.size() + final_norm_b_.size()}};
    if (!lm_head_.empty()) out.emplace_back("lm_head", lm_head_.size());
    return out;
  }

 protected:
  void final_hidden(const MatrixF& h, MatrixF& x) const override {
    MatrixF normed;  // [n, d]
    const MatrixF* cur = &h;
    if (has_final_norm_) {
      detail::ProfileScope scope(&ForwardProfile::other_s);
      layer_norm(h, final_norm_w_, final_norm_b_, kLayerNormEps, normed);
      cur = &normed;
    }
    if (project_out_.in > 0) {
      project_out_.forward(*cur, x);  // [n, p]
    } else {
      x = *cur;
    }
  }

  const WeightTable& lm_head() const override { return lm_head_.empty() ? embed_tokens_ : lm_head_; }

  DecoderLayer build_layer(WeightLoader& w, int i) const override {
    const std::string lp = fmt::format("{}layers.{}.", pre_, i);
    DecoderLayer L;
    L.linears = load_linears(w, lp, kModules, config_);
    if (config_.layer_norm_elementwise_affine) {
      for (const auto n : kNorms) {
        for (const char* leaf : {".weight", ".bias"}) {
          const std::string rel = std::string(n) + leaf;
          L.norms.emplace_back(rel, w.vector(lp + rel, config_.hidden_size));
        }
      }
    }
    return L;
  }

 private:
  AttentionShape attention_shape(int T) const {
    const int H = static_cast<int>(config_.num_attention_heads);
    const int d_h = static_cast<int>(config_.hidden_size / H);
    // HF scales the q_proj output (bias included) by d_h^−½; folded into the score GEMM.
    return {T, H, H, d_h, 1.0f / std::sqrt(static_cast<float>(d_h))};
  }

  // ids: [n_seq·T] -> h: [n_seq·T, d]; row i is at position first + i mod T.
  void embed_at(std::span<const std::int32_t> ids, int T, int first, MatrixF& h) const {
    detail::ProfileScope scope(&ForwardProfile::other_s);
    MatrixF e;  // [n, p]
    embed_tokens_.gather(ids, e);
    if (project_in_.in > 0) {
      project_in_.forward(e, h);  // [n, d]
    } else {
      h = std::move(e);
    }
    for (std::int64_t i = 0; i < h.rows(); ++i) h.row(i) += embed_positions_.row(first + i % T + kPositionOffset);
  }

  // x: [n, d] the attention block's input -> a: [n, d] the concatenated head outputs; with a KV cache
  // (s.kv), x holds T new positions after s.past cached ones, with a batch (s.kvs) one new position of
  // each sequence (cached_attention: no key transform, so latent keys are absorbed into the queries).
  void attention(const DecoderLayer& L, const MatrixF& x, int T, const LayerState& s, MatrixF& a) const {
    MatrixF q, k, v;  // [n, d]
    L.linears[kQ].forward(x, q);
    if (!s.kvs.empty()) {
      cached_attention_batch(q, x, L.linears[kK], L.linears[kV], {}, attention_shape(1), s.kvs, s.pasts, a);
      return;
    }
    if (s.kv != nullptr) {
      cached_attention(q, x, L.linears[kK], L.linears[kV], {}, attention_shape(T), *s.kv, s.past, a);
      return;
    }
    L.linears[kK].forward(x, k);
    L.linears[kV].forward(x, v);
    causal_attention(q, k, v, attention_shape(T), a);
  }

  // x = the input of block `which` (0: attention, 1: MLP): its LayerNorm of h before it (pre-LN), or
  // h itself (post-LN, the norm follows the residual add).  h, x: [n, d].
  void block_input(const MatrixF& h, const DecoderLayer& L, int which, MatrixF& x) const {
    if (config_.do_layer_norm_before) {
      norm(h, L, which, x);
    } else {
      x = h;
    }
  }

  // which = 0: self_attn_layer_norm, 1: final_layer_norm (of the layer).  x, y: [n, d], may alias.
  void norm(const MatrixF& x, const DecoderLayer& L, int which, MatrixF& y) const {
    detail::ProfileScope scope(&ForwardProfile::other_s);
    const std::string n(kNorms[static_cast<std::size_t>(which)]);
    layer_norm(x, L.norm(n + ".weight"), L.norm(n + ".bias"), kLayerNormEps, y);
  }

  Activation act_ = Activation::Relu;
  std::string pre_;          // "model.decoder." or "decoder."
  WeightTable embed_tokens_;  // [V, p]
  MatrixF embed_positions_;  // [max_position_embeddings + 2, d]
  WeightTable lm_head_;      // [V, p]; empty when tied to embed_tokens_
  Linear project_in_;        // [d, p] (in = 0 when absent)
  Linear project_out_;       // [p, d] (in = 0 when absent)
  bool has_final_norm_ = true;
  VectorF final_norm_w_, final_norm_b_;  // [d] or empty
};

std::unique_ptr<Model> make_opt(const ModelConfig& config, const std::filesystem::path& dir, WeightLoader& w) {
  return std::make_unique<OptModel>(config, dir, w);
}

constexpr std::array<Architecture, 1> kArchitectures = {{
    {"OPTForCausalLM", "opt", true, parse_opt, make_opt,
     R"({"vocab_size": 50272, "hidden_size": 768, "num_hidden_layers": 12, "ffn_dim": 3072,
         "num_attention_heads": 12, "max_position_embeddings": 2048})"},
}};

}  // namespace

std::span<const Architecture> opt_architectures() { return kArchitectures; }

}  // namespace latentllm::model
