// Tiny synthetic OPT / Llama-family checkpoints (random weights, written with io::write_safetensors
// into a temporary directory) and a naive double-precision reference forward written straight from
// the HF modeling files, one token and one window at a time. For tests of the model and of anything
// that runs it.
#pragma once

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/io.hpp"
#include "test_support.hpp"

namespace latentllm::test {

using Json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Synthetic checkpoints

struct Checkpoint {
  Json config;
  std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<float>>> tensors;
  std::map<std::string, std::string> metadata;

  void add(const std::string& name, std::vector<std::int64_t> shape, std::mt19937& rng, float scale = 0.3f,
           float mean = 0.0f) {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    std::normal_distribution<float> d(mean, scale);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = d(rng);
    tensors[name] = {std::move(shape), std::move(v)};
  }
  std::vector<float>& data(const std::string& name) { return tensors.at(name).second; }

  std::filesystem::path write(const std::string& tag) const {
    const auto dir = test::make_temp_dir(tag);
    std::ofstream(dir / "config.json") << config.dump(2);
    std::vector<io::TensorToWrite> list;
    for (const auto& [name, t] : tensors) list.push_back({name, DType::F32, t.first, t.second});
    io::write_safetensors(dir / "model.safetensors", list, metadata);
    return dir;
  }
};

struct OptDims {
  std::int64_t V = 40, d = 16, H = 2, ffn = 24, layers = 2, pos = 12, p = 16;
  bool pre_ln = true;
  std::string prefix = "model.decoder.";
};

inline Checkpoint make_opt(const OptDims& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Checkpoint c;
  c.config = {{"architectures", {"OPTForCausalLM"}}, {"model_type", "opt"}, {"vocab_size", s.V},
              {"hidden_size", s.d}, {"num_hidden_layers", s.layers}, {"ffn_dim", s.ffn},
              {"num_attention_heads", s.H}, {"max_position_embeddings", s.pos},
              {"do_layer_norm_before", s.pre_ln}, {"word_embed_proj_dim", s.p},
              {"activation_function", "relu"}, {"enable_bias", true}, {"tie_word_embeddings", true}};
  const std::string& pre = s.prefix;
  c.add(pre + "embed_tokens.weight", {s.V, s.p}, rng, 1.0f);
  c.add(pre + "embed_positions.weight", {s.pos + 2, s.d}, rng, 0.5f);
  if (s.p != s.d) {
    c.add(pre + "project_in.weight", {s.d, s.p}, rng);
    c.add(pre + "project_out.weight", {s.p, s.d}, rng);
  }
  if (s.pre_ln) {
    c.add(pre + "final_layer_norm.weight", {s.d}, rng, 0.1f, 1.0f);
    c.add(pre + "final_layer_norm.bias", {s.d}, rng, 0.1f);
  }
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const std::string lp = pre + "layers." + std::to_string(i) + ".";
    for (const char* m : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      c.add(lp + "self_attn." + m + ".weight", {s.d, s.d}, rng);
      c.add(lp + "self_attn." + m + ".bias", {s.d}, rng, 0.1f);
    }
    c.add(lp + "fc1.weight", {s.ffn, s.d}, rng);
    c.add(lp + "fc1.bias", {s.ffn}, rng, 0.1f);
    c.add(lp + "fc2.weight", {s.d, s.ffn}, rng);
    c.add(lp + "fc2.bias", {s.d}, rng, 0.1f);
    for (const char* n : {"self_attn_layer_norm", "final_layer_norm"}) {
      c.add(lp + n + ".weight", {s.d}, rng, 0.1f, 1.0f);
      c.add(lp + n + ".bias", {s.d}, rng, 0.1f);
    }
  }
  return c;
}

struct LlamaDims {
  std::int64_t V = 48, d = 16, H = 4, H_kv = 2, d_h = 6, ffn = 20, layers = 2;
  std::string arch = "LlamaForCausalLM", type = "llama";
  bool qkv_bias = false;
  bool tie = true;
  bool head_only = false;  // store only lm_head (+ metadata alias), as TinyStories-656K
  // Mistral (type "mistral") only: config sliding_window; 0 writes null (no window).
  std::int64_t sliding_window = 0;
};

inline Checkpoint make_llama(const LlamaDims& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Checkpoint c;
  c.config = {{"architectures", {s.arch}}, {"model_type", s.type}, {"vocab_size", s.V}, {"hidden_size", s.d},
              {"num_hidden_layers", s.layers}, {"intermediate_size", s.ffn}, {"num_attention_heads", s.H},
              {"num_key_value_heads", s.H_kv}, {"head_dim", s.d_h}, {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-5}, {"rope_theta", 100.0}, {"hidden_act", "silu"},
              {"tie_word_embeddings", s.tie}};
  if (s.type == "mistral") c.config["sliding_window"] = s.sliding_window > 0 ? Json(s.sliding_window) : Json(nullptr);
  if (s.head_only) {
    c.add("lm_head.weight", {s.V, s.d}, rng, 1.0f);
    c.metadata["model.embed_tokens.weight"] = "lm_head.weight";
  } else {
    c.add("model.embed_tokens.weight", {s.V, s.d}, rng, 1.0f);
    if (!s.tie) c.add("lm_head.weight", {s.V, s.d}, rng, 1.0f);
  }
  c.add("model.norm.weight", {s.d}, rng, 0.1f, 1.0f);
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const std::string lp = "model.layers." + std::to_string(i) + ".";
    c.add(lp + "self_attn.q_proj.weight", {s.H * s.d_h, s.d}, rng);
    c.add(lp + "self_attn.k_proj.weight", {s.H_kv * s.d_h, s.d}, rng);
    c.add(lp + "self_attn.v_proj.weight", {s.H_kv * s.d_h, s.d}, rng);
    if (s.qkv_bias) {
      c.add(lp + "self_attn.q_proj.bias", {s.H * s.d_h}, rng, 0.3f);
      c.add(lp + "self_attn.k_proj.bias", {s.H_kv * s.d_h}, rng, 0.3f);
      c.add(lp + "self_attn.v_proj.bias", {s.H_kv * s.d_h}, rng, 0.3f);
    }
    c.add(lp + "self_attn.o_proj.weight", {s.d, s.H * s.d_h}, rng);
    c.add(lp + "mlp.gate_proj.weight", {s.ffn, s.d}, rng);
    c.add(lp + "mlp.up_proj.weight", {s.ffn, s.d}, rng);
    c.add(lp + "mlp.down_proj.weight", {s.d, s.ffn}, rng);
    c.add(lp + "input_layernorm.weight", {s.d}, rng, 0.1f, 1.0f);
    c.add(lp + "post_attention_layernorm.weight", {s.d}, rng, 0.1f, 1.0f);
    if (s.type == "qwen3") {  // per-head q/k RMSNorm weights
      c.add(lp + "self_attn.q_norm.weight", {s.d_h}, rng, 0.1f, 1.0f);
      c.add(lp + "self_attn.k_norm.weight", {s.d_h}, rng, 0.1f, 1.0f);
    }
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Naive double-precision reference, one window at a time, straight from the HF modeling code.

using Vec = std::vector<double>;
using Seq = std::vector<Vec>;  // [T][width]

struct Ref {
  const Checkpoint& c;
  Vec vec(const std::string& n) const {
    const auto& v = c.tensors.at(n).second;
    return Vec(v.begin(), v.end());
  }
  bool has(const std::string& n) const { return c.tensors.count(n) > 0; }
  // y = W x (+ b); W [out, in] row-major.
  Vec lin(const std::string& m, const Vec& x, bool bias) const {
    const auto& t = c.tensors.at(m + ".weight");
    const auto out = t.first[0], in = t.first[1];
    Vec y(static_cast<std::size_t>(out), 0.0);
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < in; ++i) y[o] += t.second[o * in + i] * x[i];
    if (bias && has(m + ".bias"))
      for (std::int64_t o = 0; o < out; ++o) y[o] += c.tensors.at(m + ".bias").second[o];
    return y;
  }
  Vec row(const std::string& n, std::int64_t r) const {
    const auto& t = c.tensors.at(n);
    const auto w = t.first[1];
    return Vec(t.second.begin() + r * w, t.second.begin() + (r + 1) * w);
  }
  static Vec layer_norm(const Vec& x, const Vec& w, const Vec& b) {
    double m = 0, v = 0;
    for (double e : x) m += e;
    m /= x.size();
    for (double e : x) v += (e - m) * (e - m);
    v /= x.size();
    Vec y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - m) / std::sqrt(v + 1e-5) * w[i] + b[i];
    return y;
  }
  static Vec rms_norm(const Vec& x, const Vec& w, double eps) {
    double ms = 0;
    for (double e : x) ms += e * e;
    ms /= x.size();
    Vec y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(ms + eps) * w[i];
    return y;
  }
  // Causal attention; q: [T][H·dh], k, v: [T][Hkv·dh]. window > 0: query t sees keys u with
  // t − window < u ≤ t (HF's sliding-window mask kv_idx > q_idx − sliding_window).
  static Seq attention(const Seq& q, const Seq& k, const Seq& v, int H, int H_kv, int dh, double scale,
                       int window = 0) {
    const std::size_t T = q.size();
    Seq out(T, Vec(static_cast<std::size_t>(H * dh), 0.0));
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / H_kv);
      for (std::size_t t = 0; t < T; ++t) {
        const auto w = static_cast<std::size_t>(window);
        const std::size_t lo = w > 0 && t + 1 > w ? t + 1 - w : 0;
        Vec s(t + 1, -1e300);  // keys before lo stay masked: exp(−1e300 − max) = 0
        double mx = -1e300;
        for (std::size_t u = lo; u <= t; ++u) {
          double dot = 0;
          for (int j = 0; j < dh; ++j) dot += q[t][h * dh + j] * k[u][g * dh + j];
          s[u] = dot * scale;
          mx = std::max(mx, s[u]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (std::size_t u = 0; u <= t; ++u)
          for (int j = 0; j < dh; ++j) out[t][h * dh + j] += s[u] / z * v[u][g * dh + j];
      }
    }
    return out;
  }
  // Σ −log p(ids[t+1] | ids[..t]) from final hidden states through the logits table.
  double nll(const Seq& x, const std::string& table, const std::vector<std::int32_t>& ids) const {
    const auto V = c.tensors.at(table).first[0];
    double total = 0;
    for (std::size_t t = 0; t + 1 < ids.size(); ++t) {
      Vec logits(static_cast<std::size_t>(V));
      for (std::int64_t o = 0; o < V; ++o) {
        const Vec w = row(table, o);
        double s = 0;
        for (std::size_t j = 0; j < w.size(); ++j) s += w[j] * x[t][j];
        logits[o] = s;
      }
      const double mx = *std::max_element(logits.begin(), logits.end());
      double z = 0;
      for (double l : logits) z += std::exp(l - mx);
      total += std::log(z) + mx - logits[static_cast<std::size_t>(ids[t + 1])];
    }
    return total;
  }
};

inline double reference_opt_nll(const Checkpoint& c, const OptDims& s, const std::vector<std::int32_t>& ids) {
  Ref r{c};
  const std::string& pre = s.prefix;
  const int T = static_cast<int>(ids.size()), dh = static_cast<int>(s.d / s.H);
  Seq h(T);
  for (int t = 0; t < T; ++t) {
    Vec e = r.row(pre + "embed_tokens.weight", ids[t]);
    if (s.p != s.d) e = r.lin(pre + "project_in", e, false);
    const Vec p = r.row(pre + "embed_positions.weight", t + 2);
    for (std::size_t j = 0; j < e.size(); ++j) e[j] += p[j];
    h[t] = e;
  }
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const std::string lp = pre + "layers." + std::to_string(i) + ".";
    auto ln = [&](const Vec& x, const std::string& n) { return Ref::layer_norm(x, r.vec(lp + n + ".weight"), r.vec(lp + n + ".bias")); };
    Seq q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const Vec x = s.pre_ln ? ln(h[t], "self_attn_layer_norm") : h[t];
      q[t] = r.lin(lp + "self_attn.q_proj", x, true);
      for (auto& e : q[t]) e /= std::sqrt(static_cast<double>(dh));  // HF scales q after the bias
      k[t] = r.lin(lp + "self_attn.k_proj", x, true);
      v[t] = r.lin(lp + "self_attn.v_proj", x, true);
    }
    const Seq a = Ref::attention(q, k, v, static_cast<int>(s.H), static_cast<int>(s.H), dh, 1.0);
    for (int t = 0; t < T; ++t) {
      const Vec o = r.lin(lp + "self_attn.out_proj", a[t], true);
      for (std::size_t j = 0; j < o.size(); ++j) h[t][j] += o[j];
      if (!s.pre_ln) h[t] = ln(h[t], "self_attn_layer_norm");
      Vec f = r.lin(lp + "fc1", s.pre_ln ? ln(h[t], "final_layer_norm") : h[t], true);
      for (auto& e : f) e = std::max(e, 0.0);
      const Vec y = r.lin(lp + "fc2", f, true);
      for (std::size_t j = 0; j < y.size(); ++j) h[t][j] += y[j];
      if (!s.pre_ln) h[t] = ln(h[t], "final_layer_norm");
    }
  }
  for (int t = 0; t < T; ++t) {
    if (s.pre_ln) h[t] = Ref::layer_norm(h[t], r.vec(pre + "final_layer_norm.weight"), r.vec(pre + "final_layer_norm.bias"));
    if (s.p != s.d) h[t] = r.lin(pre + "project_out", h[t], false);
  }
  return r.nll(h, pre + "embed_tokens.weight", ids);
}

inline double reference_llama_nll(const Checkpoint& c, const LlamaDims& s, const std::vector<std::int32_t>& ids) {
  Ref r{c};
  const int T = static_cast<int>(ids.size()), dh = static_cast<int>(s.d_h), half = dh / 2;
  const std::string embed = s.head_only ? "lm_head.weight" : "model.embed_tokens.weight";
  Seq h(T);
  for (int t = 0; t < T; ++t) h[t] = r.row(embed, ids[t]);
  auto rope = [&](Vec& x, int t) {  // rotate_half convention, theta 100
    for (std::size_t h0 = 0; h0 < x.size(); h0 += dh)
      for (int j = 0; j < half; ++j) {
        const double ang = t * std::pow(100.0, -2.0 * j / dh);
        const double x1 = x[h0 + j], x2 = x[h0 + j + half];
        x[h0 + j] = x1 * std::cos(ang) - x2 * std::sin(ang);
        x[h0 + j + half] = x2 * std::cos(ang) + x1 * std::sin(ang);
      }
  };
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const std::string lp = "model.layers." + std::to_string(i) + ".";
    Seq q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const Vec x = Ref::rms_norm(h[t], r.vec(lp + "input_layernorm.weight"), 1e-5);
      q[t] = r.lin(lp + "self_attn.q_proj", x, true);
      k[t] = r.lin(lp + "self_attn.k_proj", x, true);
      v[t] = r.lin(lp + "self_attn.v_proj", x, true);
      rope(q[t], t);
      rope(k[t], t);
    }
    const Seq a = Ref::attention(q, k, v, static_cast<int>(s.H), static_cast<int>(s.H_kv), dh, 1.0 / std::sqrt(dh),
                                 static_cast<int>(s.sliding_window));
    for (int t = 0; t < T; ++t) {
      const Vec o = r.lin(lp + "self_attn.o_proj", a[t], false);
      for (std::size_t j = 0; j < o.size(); ++j) h[t][j] += o[j];
      const Vec x = Ref::rms_norm(h[t], r.vec(lp + "post_attention_layernorm.weight"), 1e-5);
      Vec g = r.lin(lp + "mlp.gate_proj", x, false);
      const Vec u = r.lin(lp + "mlp.up_proj", x, false);
      for (std::size_t j = 0; j < g.size(); ++j) g[j] = g[j] / (1.0 + std::exp(-g[j])) * u[j];
      const Vec y = r.lin(lp + "mlp.down_proj", g, false);
      for (std::size_t j = 0; j < y.size(); ++j) h[t][j] += y[j];
    }
  }
  for (int t = 0; t < T; ++t) h[t] = Ref::rms_norm(h[t], r.vec("model.norm.weight"), 1e-5);
  return r.nll(h, s.tie ? embed : "lm_head.weight", ids);
}

inline std::vector<std::int32_t> random_ids(std::size_t n, std::int64_t V, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(V - 1));
  std::vector<std::int32_t> ids(n);
  for (auto& i : ids) i = d(rng);
  return ids;
}

}  // namespace latentllm::test
