// The CLIP vision tower (HF modeling_clip.py, CLIPVisionModel as LLaVA uses it): a patch
// convolution without bias (kernel = stride = patch_size), a learned class embedding prepended, learned
// position embeddings, pre_layrnorm, then pre-LN encoder layers (LayerNorm with bias, multi-head
// attention with biases over all positions of an image, not causal, scores scaled by d_h^−½; MLP fc1 →
// hidden_act → fc2 with biases). post_layernorm only feeds CLIP's pooled output, which LLaVA does not
// use: it is not loaded.
#include <algorithm>
#include <array>
#include <cmath>

#include "core/gemm.hpp"
#include "core/parallel.hpp"
#include "latentllm/error.hpp"
#include "model/arch.hpp"
#include "model/linear_fused.hpp"
#include "model/ops.hpp"
#include "model/vision.hpp"

namespace latentllm::model {
namespace {

// The per-layer linear modules (CLIPEncoderLayer), in forward order; the indices below address them.
constexpr std::array<ModuleSpec, 6> kModules = {{
    {"self_attn.q_proj", Role::Q, Site::AttnIn, Dim::Hidden, Dim::QHeads, BiasSwitch::Qkv},
    {"self_attn.k_proj", Role::K, Site::AttnIn, Dim::Hidden, Dim::KvHeads, BiasSwitch::Qkv},
    {"self_attn.v_proj", Role::V, Site::AttnIn, Dim::Hidden, Dim::KvHeads, BiasSwitch::Qkv},
    {"self_attn.out_proj", Role::O, Site::AttnOut, Dim::QHeads, Dim::Hidden, BiasSwitch::O},
    {"mlp.fc1", Role::Up, Site::MlpIn, Dim::Hidden, Dim::Ffn, BiasSwitch::Mlp},
    {"mlp.fc2", Role::Down, Site::MlpMid, Dim::Ffn, Dim::Hidden, BiasSwitch::Mlp},
}};
enum : std::size_t { kQ, kK, kV, kOut, kFc1, kFc2 };
constexpr std::array<std::string_view, 2> kNorms = {"layer_norm1", "layer_norm2"};

// CLIPVisionConfig: every size has a default (ViT-B/32); the head count must divide the width.
void parse_clip(const io::JsonKeys& k, VisionConfig& c) {
  c.hidden_size = k.positive_or("hidden_size", 768);
  c.intermediate_size = k.positive_or("intermediate_size", 3072);
  c.num_hidden_layers = k.positive_or("num_hidden_layers", 12);
  c.num_attention_heads = k.positive_or("num_attention_heads", 12);
  c.num_channels = k.positive_or("num_channels", 3);
  c.image_size = k.positive_or("image_size", 224);
  c.patch_size = k.positive_or("patch_size", 32);
  c.layer_norm_eps = k.positive_number_or("layer_norm_eps", 1e-5);
  c.hidden_act = k.string_or("hidden_act", "quick_gelu");
  k.check_multiple("hidden_size", c.hidden_size, "num_attention_heads", c.num_attention_heads);
  k.check_multiple("image_size", c.image_size, "patch_size", c.patch_size);
}

// The dims the shared module-table loader reads (load_linears): every linear has a bias.
ModelConfig module_dims(const VisionConfig& v) {
  ModelConfig c;
  c.hidden_size = v.hidden_size;
  c.num_attention_heads = c.num_key_value_heads = v.num_attention_heads;
  c.head_dim = v.head_dim();
  c.intermediate_size = v.intermediate_size;
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  return c;
}

// out: [n_img·P, H·d_h] = softmax(scale·Q_h·K_hᵀ)·V_h per image and head over all P positions
// (CLIPAttention: no mask for the vision tower). q, k, v: [n_img·P, H·d_h].
void full_attention(const MatrixF& q, const MatrixF& k, const MatrixF& v, int P, int H, int d_h, MatrixF& out) {
  const std::int64_t n_img = q.rows() / P;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_h));
  const int ld = static_cast<int>(q.cols());
  out.resize(q.rows(), q.cols());
  core::BlasSingleThreaded single;
  const core::Work work = (core::gemm_work(P, P, d_h) + core::gemm_work(P, d_h, P)) * static_cast<double>(n_img * H);
  core::parallel_for(n_img * H, 1, work, [&](std::int64_t t0, std::int64_t t1) {
    MatrixF s(P, P);  // [P, P] scores, then probabilities
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t off = (t / H) * P * ld + (t % H) * d_h;
      core::sgemm_rm(false, true, P, P, d_h, scale, q.data() + off, ld, k.data() + off, ld, 0.0f, s.data(), P);
      for (int r = 0; r < P; ++r) {
        auto row = s.row(r).array();
        row = (row - row.maxCoeff()).exp();
        row /= row.sum();
      }
      core::sgemm_rm(false, false, P, d_h, P, 1.0f, s.data(), P, v.data() + off, ld, 0.0f, out.data() + off, ld);
    }
  });
}

class ClipVisionModel final : public VisionModel {
 public:
  ClipVisionModel(const VisionConfig& c, WeightLoader& w, const std::string& prefix, int n_layers) {
    config_ = c;
    dims_ = module_dims(c);
    act_ = parse_activation(c.hidden_act, "vision_config: hidden_act");
    eps_ = static_cast<float>(c.layer_norm_eps);
    const std::int64_t d = c.hidden_size, C = c.num_channels, p = c.patch_size;
    const std::string e = prefix + "embeddings.";
    patch_ = w.matrix_of(e + "patch_embedding.weight", {d, C, p, p}, d, C * p * p);
    class_ = w.vector(e + "class_embedding", d);
    positions_ = w.matrix(e + "position_embedding.weight", c.num_positions(), d);
    pre_w_ = w.vector(prefix + "pre_layrnorm.weight", d);
    pre_b_ = w.vector(prefix + "pre_layrnorm.bias", d);
    for (int i = 0; i < n_layers; ++i) layers_.push_back(build_layer(w, prefix, i));
  }

  std::string_view family() const override { return "clip"; }

  // CLIPVisionEmbeddings + pre_layrnorm (CLIPVisionTransformer.forward): row 0 of an image is the class
  // embedding, row 1 + y·(S/p) + x the patch at (y, x) (conv output flattened row-major), plus positions.
  void embed(std::span<const float> pixels, int n_img, MatrixF& h) const override {
    const std::int64_t P = config_.num_positions(), d = config_.hidden_size;
    MatrixF patches;  // [n_img·(P−1), C·p·p] each patch's pixels in the conv weight's (c, ky, kx) order
    im2col(pixels, n_img, patches);
    MatrixF emb = patches * patch_.transpose();  // [n_img·(P−1), d]
    MatrixF x(n_img * P, d);                     // [n_img·P, d]
    for (std::int64_t i = 0; i < n_img; ++i) {
      x.row(i * P) = class_.transpose() + positions_.row(0);
      x.middleRows(i * P + 1, P - 1) = emb.middleRows(i * (P - 1), P - 1) + positions_.bottomRows(P - 1);
    }
    layer_norm(x, pre_w_, pre_b_, eps_, h);
  }

  Activation activation() const override { return act_; }

  // CLIPEncoderLayer: h += out_proj(attn(layer_norm1(h))); h += fc2(act(fc1(layer_norm2(h)))), each block
  // from the site the state stands at to the next (Model::layer_resume's contract).
  void layer_resume(const DecoderLayer& L, int i, LayerState& s, ForwardObserver* obs) const override {
    const int P = static_cast<int>(config_.num_positions()), H = static_cast<int>(config_.num_attention_heads);
    MatrixF& h = s.resid;  // [n_img·P, d_v]
    MatrixF& x = s.x;      // [n_img·P, width of s.at]
    if (h.cols() != config_.hidden_size || h.rows() % P != 0) {
      throw Error(fmt::format("vision tower: hidden states [{}, {}] (expected [n_img·{}, {}])", h.rows(), h.cols(), P,
                              config_.hidden_size));
    }
    MatrixF y;  // [n_img·P, width] a module's output
    if (!s.at) {
      norm(h, L, kNorms[0], x);
      if (reach(s, Site::AttnIn, obs, i)) return;
    }
    if (s.at == Site::AttnIn) {
      MatrixF q, k, v;  // [n_img·P, d_v]
      L.linears[kQ].forward(x, q);
      L.linears[kK].forward(x, k);
      L.linears[kV].forward(x, v);
      full_attention(q, k, v, P, H, static_cast<int>(config_.head_dim()), y);
      x.swap(y);
      if (reach(s, Site::AttnOut, obs, i)) return;
    }
    if (s.at == Site::AttnOut) {
      linear_forward(L.linears[kOut], x, h, accumulated());
      norm(h, L, kNorms[1], x);
      if (reach(s, Site::MlpIn, obs, i)) return;
    }
    if (s.at == Site::MlpIn) {
      linear_forward(L.linears[kFc1], x, y, activated(act_));  // [n_img·P, ffn]
      x.swap(y);
      if (reach(s, Site::MlpMid, obs, i)) return;
    }
    linear_forward(L.linears[kFc2], x, h, accumulated());
    s.at.reset();
    x.resize(0, 0);
  }

 private:
  DecoderLayer build_layer(WeightLoader& w, const std::string& prefix, int i) const {
    const std::string lp = fmt::format("{}encoder.layers.{}.", prefix, i);
    DecoderLayer L;
    L.linears = load_linears(w, lp, kModules, dims_);
    for (const auto n : kNorms) {
      for (const auto part : {".weight", ".bias"}) {
        const std::string rel = std::string(n) + part;
        L.norms.emplace_back(rel, w.vector(lp + rel, config_.hidden_size));
      }
    }
    return L;
  }

  void norm(const MatrixF& h, const DecoderLayer& L, std::string_view n, MatrixF& x) const {
    layer_norm(h, L.norm(std::string(n) + ".weight"), L.norm(std::string(n) + ".bias"), eps_, x);
  }

  // pixels: [n_img, C, S, S] -> out: [n_img·(S/p)², C·p·p], patch (y, x) of image i at row
  // i·(S/p)² + y·(S/p) + x, its columns ordered (c, ky, kx) as the conv weight flattens.
  void im2col(std::span<const float> pixels, int n_img, MatrixF& out) const {
    const std::int64_t C = config_.num_channels, S = config_.image_size, p = config_.patch_size, g = S / p;
    out.resize(n_img * g * g, C * p * p);
    for (std::int64_t i = 0; i < n_img; ++i)
      for (std::int64_t y = 0; y < g; ++y)
        for (std::int64_t x = 0; x < g; ++x) {
          float* row = out.row((i * g + y) * g + x).data();
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t ky = 0; ky < p; ++ky) {
              const float* src = pixels.data() + ((i * C + c) * S + y * p + ky) * S + x * p;
              std::copy(src, src + p, row + (c * p + ky) * p);
            }
        }
  }

  ModelConfig dims_;      // the module table's dims
  Activation act_ = Activation::QuickGelu;
  float eps_ = 1e-5f;
  MatrixF patch_;         // [d_v, C·p·p] the patch conv weight
  VectorF class_;         // [d_v]
  MatrixF positions_;     // [P, d_v]
  VectorF pre_w_, pre_b_;  // [d_v] pre_layrnorm
};

std::unique_ptr<VisionModel> make_clip(const VisionConfig& c, WeightLoader& w, const std::string& prefix,
                                       int n_layers) {
  return std::make_unique<ClipVisionModel>(c, w, prefix, n_layers);
}

constexpr std::array<VisionArchitecture, 1> kArchitectures = {{
    {"clip_vision_model", parse_clip, make_clip},
}};

}  // namespace

std::span<const VisionArchitecture> clip_architectures() { return kArchitectures; }

}  // namespace latentllm::model
