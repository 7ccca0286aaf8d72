// The ONNX export (docs/FORMAT.md "ONNX export"): the latent model as one decoder graph with a KV cache,
// in the input/output layout of Optimum's decoders (input_ids, attention_mask, position_ids,
// past_key_values.<i>.key/.value -> logits, present.<i>.key/.value), written with libonnx's protobuf
// classes. It keeps the savings: a factored module is two MatMuls over its stored factors (block
// identity: the identity columns are a Gather of the input, never B·A), and where `generate --kv-cache
// auto` caches a latent the past input carries it, the attention absorbing B_k and B_v as
// src/model/cached_attention.cpp does. The graph's float initializers are exactly the checkpoint's
// parameters; constants (RoPE frequencies, scales) are Constant nodes, gather indices int64. A quantized
// matrix that ONNX Runtime's MatMulNBits takes is one com.microsoft::MatMulNBits node over the
// checkpoint's codes, scales and zero points (src/format/onnx_nbits.hpp); one it does not take, and the
// B_k / B_v that a latent past absorbs, are written dequantized to float.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/mapped_file.hpp"
#include "format/onnx_graph.hpp"
#include "format/onnx_module.hpp"
#include "format/onnx_nbits.hpp"
#include "format/writers.hpp"
#include "io/latent_format.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/log.hpp"
#include "model/weight_table.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;
using onnx_graph::attr;
using onnx_graph::Graph;
using Dims = std::vector<Graph::Dim>;
using I64 = std::vector<std::int64_t>;

constexpr std::int64_t kOpset = 17;
constexpr const char* kMsDomain = "com.microsoft";
constexpr std::int64_t kMsOpset = 1;
constexpr int kFloat = onnx_graph::kFloat;
constexpr int kF16 = onnx_graph::kFloat16;
constexpr int kInt64 = onnx_graph::kInt64;
constexpr int kUint8 = onnx_graph::kUint8;
constexpr float kOptLayerNormEps = 1e-5f;  // OPT's nn.LayerNorm default (src/model/opt.cpp)
constexpr std::int64_t kOptPositionOffset = 2;
constexpr float kMaskedScore = -3.4028234663852886e38f;  // the lowest float: exp() of it after the max is 0

const Graph::Dim kBatch{"batch_size"}, kSeq{"sequence_length"}, kPast{"past_sequence_length"},
    kTotal{"total_sequence_length"};

Graph::Dim fixed(std::int64_t v) { return {"", v}; }

std::vector<float> values_of(const MatrixF& m) { return {m.data(), m.data() + m.size()}; }  // row-major
std::vector<float> values_of(const VectorF& v) { return {v.data(), v.data() + v.size()}; }
MatrixF transposed(const MatrixF& m) { return m.transpose(); }
template <class T>
std::span<const char> bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

// What the layers' builders share: the graph, the model, the I/O type and the values every layer reads.
struct Ctx {
  Ctx(Graph& graph, const model::Model& model, DType io_type)
      : g(graph), m(model), io(io_type), H(model.attention().num_heads), H_kv(model.attention().num_kv_heads),
        d_h(model.attention().head_dim), scale(1.0f / std::sqrt(static_cast<float>(d_h))) {}
  Graph& g;
  const model::Model& m;
  DType io;
  int H, H_kv, d_h;
  float scale;
  std::string mask;          // [B, 1, 1, S, K] 0 where a query sees a key, the lowest float elsewhere
  std::string cos, sin;      // [B, 1, S, d_h/2] RoPE at position_ids (Llama family)
  std::size_t nbits = 0;     // MatMulNBits nodes written
  std::map<std::string, int> dequantized;  // quantized matrices written as float, by reason
};

std::string stored(const Ctx& c, const std::string& hf_name) { return c.m.stored_name(hf_name); }

std::string weight(Ctx& c, const std::string& name, const I64& dims, const std::vector<float>& v) {
  return c.g.weight(name, dims, v);
}

// A graph input of the I/O type as float32, and a float32 value as a graph output of the I/O type.
std::string io_input(Ctx& c, const std::string& name, const Dims& dims) {
  c.g.input(name, c.io == DType::F16 ? kF16 : kFloat, dims);
  return c.io == DType::F16 ? c.g.op("Cast", {name}, {attr("to", std::int64_t{kFloat})}) : name;
}
void io_output(Ctx& c, const std::string& value, const std::string& name, const Dims& dims) {
  c.g.output(name, c.io == DType::F16 ? kF16 : kFloat, dims);
  if (c.io == DType::F16) {
    c.g.op("Cast", {value}, {attr("to", std::int64_t{kF16})}, name);
  } else {
    c.g.op("Identity", {value}, {}, name);
  }
}

// An F16 initializer [n] (the checkpoint's bytes) as a float32 value.
std::string widened(Ctx& c, const std::string& name, const std::vector<std::uint16_t>& h) {
  return c.g.op("Cast", {c.g.raw(name, kF16, {static_cast<std::int64_t>(h.size())}, bytes_of(h))},
                {attr("to", std::int64_t{kFloat})});
}

// [B, S, N]: Σ_g (z_g − z₀)·s_g·Σ_{k∈g} x_k of fractional zero points z, the part of x·W'ᵀ that
// MatMulNBits without zero points (z₀ = 2^(bits−1)) leaves out (src/format/onnx_nbits.hpp).
// x: [B, S, K]; scales, zeros: [N·n_g] float32.
std::string zero_point_term(Ctx& c, const NBitsTensors& t, const std::string& x, const std::string& scales,
                            const std::string& zeros) {
  const std::int64_t n_g = t.blocks(), G = t.block_size;
  const std::string padded = n_g * G == t.K ? x : c.g.op("Pad", {x, c.g.ints({0, 0, 0, 0, 0, n_g * G - t.K})});  // [B, S, n_g·G]
  const std::string sums = c.g.op("ReduceSum", {c.g.op("Reshape", {padded, c.g.ints({0, 0, n_g, G})}), c.g.ints({-1})},
                                  {attr("keepdims", std::int64_t{0})});  // [B, S, n_g]
  const std::string zs = c.g.op("Mul", {c.g.op("Sub", {zeros, c.g.scalar(static_cast<float>(t.default_zero()))}), scales});  // [N·n_g]
  const std::string zst = c.g.op("Transpose", {c.g.op("Reshape", {zs, c.g.ints({t.N, n_g})})});  // [n_g, N]
  return c.g.op("MatMul", {sums, zst});
}

// y: [B, S, N] = x: [B, S, K]·W'ᵀ for the quantized matrix `f` of `module`, W' [N, K]: one
// com.microsoft::MatMulNBits node over initializers named as the checkpoint's codes, scales and zero
// points (fractional zero points: MatMulNBits without them, less zero_point_term).
std::string nbits_matmul(Ctx& c, const std::string& module, io::Factor f, const quant::PackedMatrix& p,
                         const std::string& x) {
  const NBitsTensors t = nbits_tensors(p);
  auto name = [&](io::Piece piece) { return io::latent_tensor_name(module, f, piece); };
  const std::string scales = widened(c, name(io::Piece::Scales), t.scales);  // [N·n_g]
  std::vector<std::string> in = {x, c.g.raw(name(io::Piece::Codes), kUint8, t.b_dims, bytes_of(t.b)), scales};
  if (!t.zeros_u8.empty()) {
    in.push_back(c.g.raw(name(io::Piece::Zeros), kUint8, {static_cast<std::int64_t>(t.zeros_u8.size())}, bytes_of(t.zeros_u8)));
  }
  ++c.nbits;
  const std::string y = c.g.domain_op(kMsDomain, kMsOpset, "MatMulNBits", in,
                                      {attr("K", t.K), attr("N", t.N), attr("bits", std::int64_t{t.bits}),
                                       attr("block_size", std::int64_t{t.block_size})});
  if (!t.zeros_u8.empty()) return y;
  return c.g.op("Sub", {y, zero_point_term(c, t, x, scales, widened(c, name(io::Piece::Zeros), t.zeros_f16))});
}

// y: [B, S, rows] = x: [B, S, cols]·Wᵀ for the matrix `f` of `module`: MatMulNBits when w is kept
// quantized, else a MatMul over its float initializer (stored transposed, [cols, rows]).
std::string matmul(Ctx& c, const std::string& module, io::Factor f, const model::Weight& w, const std::string& x) {
  if (w.packed() != nullptr) return nbits_matmul(c, module, f, *w.packed(), x);
  return c.g.op("MatMul", {x, weight(c, io::latent_tensor_name(module, f), {w.cols(), w.rows()}, values_of(transposed(w.f32())))});
}

// z: [B, S, r] = x: [B, S, in] · A_denseᵀ of the factored l (block identity: the identity block is a
// Gather of the columns perm[:r], the rest x[:, :, perm[r:]]·Aᵀ; src/model/linear.cpp latent_block).
std::string latent(Ctx& c, const model::Linear& l, const std::string& x) {
  const std::string n = stored(c, l.name);
  if (!l.block_identity) return matmul(c, n, io::Factor::A, l.A, x);
  const std::int64_t r = l.B.cols();
  const I64 perm(l.perm.begin(), l.perm.end());
  const std::string id = c.g.indices(n + ".perm.identity", {perm.begin(), perm.begin() + r});
  const std::string z = c.g.op("Gather", {x, id}, {attr("axis", std::int64_t{2})});
  if (r == l.in) return z;
  const std::string rest_idx = c.g.indices(n + ".perm.rest", {perm.begin() + r, perm.end()});
  const std::string rest = c.g.op("Gather", {x, rest_idx}, {attr("axis", std::int64_t{2})});
  return c.g.op("Add", {z, matmul(c, n, io::Factor::A, l.A, rest)});
}

// The layer as the graph holds it (in `copy` when that differs): 16-bit matrices widened to float32;
// quantized ones kept for MatMulNBits where it takes them, else dequantized to float32 (the values
// latentllm's prefill multiplies by; c.dequantized counts why). The B of a module whose latent the
// past caches (`absorbed`: names of k_proj / v_proj) is dequantized too: the attention absorbs it
// per head, a product MatMulNBits does not express.
const model::DecoderLayer& export_layer(Ctx& c, const model::DecoderLayer& L, model::DecoderLayer& copy,
                                        const std::vector<std::string>& absorbed) {
  const auto f32 = [](const model::Linear& l) { return l.weight.is_f32() && l.B.is_f32() && l.A.is_f32(); };
  if (std::all_of(L.linears.begin(), L.linears.end(), f32)) return L;
  copy = L;
  for (auto& l : copy.linears) {
    const bool latent_past = std::find(absorbed.begin(), absorbed.end(), l.name) != absorbed.end();
    for (model::Weight* w : {&l.weight, &l.B, &l.A}) {
      if (w->is_f32()) continue;
      if (w->packed() != nullptr) {
        const std::string why = w == &l.B && latent_past ? "the B factor of a latent past (absorbed into the attention)"
                                                         : nbits_unsupported(*w->packed());
        if (why.empty()) continue;
        ++c.dequantized[why];
      }
      *w = w->to_f32();
    }
  }
  return copy;
}

// y: [B, S, out] = x·Wᵀ + b, W dense or B·A (each matrix float, stored transposed, or quantized).
std::string linear(Ctx& c, const model::Linear& l, const std::string& x) {
  const std::string n = stored(c, l.name);
  std::string y = l.factored() ? matmul(c, n, io::Factor::B, l.B, latent(c, l, x))
                               : matmul(c, n, io::Factor::Weight, l.weight, x);
  if (l.bias.size() > 0) y = c.g.op("Add", {y, weight(c, n + ".bias", {l.out}, values_of(l.bias))});
  return y;
}

// RMSNorm over the last axis (x·(mean(x²) + eps)^−½·w, as HF and src/model/ops.cpp).
std::string rms_norm(Ctx& c, const std::string& x, const std::string& w_name, const VectorF& w, float eps) {
  const std::string ms = c.g.op("ReduceMean", {c.g.op("Mul", {x, x})}, {attr("axes", I64{-1}), attr("keepdims", std::int64_t{1})});
  const std::string inv = c.g.op("Reciprocal", {c.g.op("Sqrt", {c.g.op("Add", {ms, c.g.scalar(eps)})})});
  return c.g.op("Mul", {weight(c, w_name, {w.size()}, values_of(w)), c.g.op("Mul", {x, inv})});
}

std::string layer_norm(Ctx& c, const std::string& x, const std::string& prefix, const VectorF& w, const VectorF& b) {
  return c.g.op("LayerNormalization",
                {x, weight(c, prefix + ".weight", {w.size()}, values_of(w)), weight(c, prefix + ".bias", {b.size()}, values_of(b))},
                {attr("axis", std::int64_t{-1}), attr("epsilon", kOptLayerNormEps)});
}

// x: [B, heads, S, d_h] rotated by RoPE at position_ids (rotate_half: pairs (j, j + d_h/2)).
std::string rope(Ctx& c, const std::string& x) {
  const std::int64_t half = c.d_h / 2;
  const std::string axis = c.g.ints({3});
  const std::string x1 = c.g.op("Slice", {x, c.g.ints({0}), c.g.ints({half}), axis});
  const std::string x2 = c.g.op("Slice", {x, c.g.ints({half}), c.g.ints({c.d_h}), axis});
  const std::string y1 = c.g.op("Sub", {c.g.op("Mul", {x1, c.cos}), c.g.op("Mul", {x2, c.sin})});
  const std::string y2 = c.g.op("Add", {c.g.op("Mul", {x2, c.cos}), c.g.op("Mul", {x1, c.sin})});
  return c.g.op("Concat", {y1, y2}, {attr("axis", std::int64_t{-1})});
}

// [B, S, heads·d_h] -> [B, heads, S, d_h]
std::string split_heads(Ctx& c, const std::string& x, int heads) {
  return c.g.op("Transpose", {c.g.op("Reshape", {x, c.g.ints({0, 0, heads, c.d_h})})}, {attr("perm", I64{0, 2, 1, 3})});
}

// The per-head transform of queries and keys between their projection and the attention: Qwen3's
// q_norm / k_norm, then RoPE (Llama family); nothing for OPT.
std::string head_transform(Ctx& c, const model::DecoderLayer& L, const std::string& prefix, const std::string& x4,
                           std::string_view norm) {
  const model::AttentionInfo& a = c.m.attention();
  std::string y = x4;
  if (a.qk_norm) {
    y = rms_norm(c, y, stored(c, prefix + std::string(norm)), L.norm(norm),
                 static_cast<float>(c.m.config().rms_norm_eps));
  }
  return a.rope ? rope(c, y) : y;
}

struct LayerIo {
  std::string past_k, past_v;        // float32 values of the past inputs
  model::KvForm k_form, v_form;
  std::int64_t k_rank = 0, v_rank = 0;  // of a latent form
  std::string present_k, present_v;  // float32 values of the presents
};

// The attention block: x: [B, S, d] -> [B, S, H·d_h]. Queries as [B, H_kv, g, S, d_h] (query head h
// reads kv head h / g); a latent key cache is absorbed into the queries (q̃ = q·B_k per kv head, plus
// q·b_k, the constant src/model/cached_attention.cpp drops and that the graph keeps so its parameters
// are the checkpoint's), a latent value cache after the softmax (B_v·(P·c_v) + b_v).
std::string attention(Ctx& c, const model::DecoderLayer& L, const std::string& prefix, const std::string& x, LayerIo& io) {
  const model::Linear& qp = L.linear(model::Role::Q);
  const model::Linear& kp = L.linear(model::Role::K);
  const model::Linear& vp = L.linear(model::Role::V);
  const int g = c.H / c.H_kv;
  const std::string q4 = head_transform(c, L, prefix, split_heads(c, linear(c, qp, x), c.H), "self_attn.q_norm.weight");
  const std::string q5 = c.g.op("Reshape", {q4, c.g.ints({0, c.H_kv, g, -1, c.d_h})});  // [B, H_kv, g, S, d_h]
  std::string scores;  // [B, H_kv, g, S, K]
  if (io.k_form == model::KvForm::Latent) {
    const std::string n = stored(c, kp.name);
    const std::int64_t r = kp.B.cols();
    io.present_k = c.g.op("Concat", {io.past_k, latent(c, kp, x)}, {attr("axis", std::int64_t{1})});  // [B, K, r]
    const std::string bk = weight(c, io::latent_tensor_name(n, io::Factor::B), {c.H_kv, 1, c.d_h, r}, values_of(kp.B.f32()));
    const std::string ck = c.g.op("Unsqueeze", {c.g.op("Transpose", {io.present_k}, {attr("perm", I64{0, 2, 1})}),
                                                c.g.ints({1, 2})});  // [B, 1, 1, r, K]
    scores = c.g.op("MatMul", {c.g.op("MatMul", {q5, bk}), ck});
    if (kp.bias.size() > 0) {
      const std::string b = weight(c, n + ".bias", {c.H_kv, 1, c.d_h, 1}, values_of(kp.bias));
      scores = c.g.op("Add", {scores, c.g.op("MatMul", {q5, b})});
    }
  } else {
    const std::string k4 = head_transform(c, L, prefix, split_heads(c, linear(c, kp, x), c.H_kv), "self_attn.k_norm.weight");
    io.present_k = c.g.op("Concat", {io.past_k, k4}, {attr("axis", std::int64_t{2})});  // [B, H_kv, K, d_h]
    const std::string kt = c.g.op("Transpose", {c.g.op("Unsqueeze", {io.present_k, c.g.ints({2})})},
                                  {attr("perm", I64{0, 1, 2, 4, 3})});  // [B, H_kv, 1, d_h, K]
    scores = c.g.op("MatMul", {q5, kt});
  }
  scores = c.g.op("Add", {c.g.op("Mul", {scores, c.g.scalar(c.scale)}), c.mask});
  const std::string p = c.g.op("Softmax", {scores}, {attr("axis", std::int64_t{-1})});
  std::string o5;  // [B, H_kv, g, S, d_h]
  if (io.v_form == model::KvForm::Latent) {
    const std::string n = stored(c, vp.name);
    const std::int64_t r = vp.B.cols();
    io.present_v = c.g.op("Concat", {io.past_v, latent(c, vp, x)}, {attr("axis", std::int64_t{1})});  // [B, K, r]
    std::vector<float> bt(static_cast<std::size_t>(vp.B.size()));  // [H_kv, 1, r, d_h]: B_v,gᵀ per kv head
    for (int h = 0; h < c.H_kv; ++h)
      for (std::int64_t j = 0; j < r; ++j)
        for (int i = 0; i < c.d_h; ++i) bt[static_cast<std::size_t>((h * r + j) * c.d_h + i)] = vp.B.f32()(h * c.d_h + i, j);
    const std::string pc = c.g.op("MatMul", {p, c.g.op("Unsqueeze", {io.present_v, c.g.ints({1, 2})})});  // [B, H_kv, g, S, r]
    o5 = c.g.op("MatMul", {pc, weight(c, io::latent_tensor_name(n, io::Factor::B), {c.H_kv, 1, r, c.d_h}, bt)});
    if (vp.bias.size() > 0) o5 = c.g.op("Add", {o5, weight(c, n + ".bias", {c.H_kv, 1, 1, c.d_h}, values_of(vp.bias))});
  } else {
    const std::string v4 = split_heads(c, linear(c, vp, x), c.H_kv);
    io.present_v = c.g.op("Concat", {io.past_v, v4}, {attr("axis", std::int64_t{2})});  // [B, H_kv, K, d_h]
    o5 = c.g.op("MatMul", {p, c.g.op("Unsqueeze", {io.present_v, c.g.ints({2})})});
  }
  const std::string o = c.g.op("Transpose", {o5}, {attr("perm", I64{0, 3, 1, 2, 4})});  // [B, S, H_kv, g, d_h]
  return c.g.op("Reshape", {o, c.g.ints({0, 0, static_cast<std::int64_t>(c.H) * c.d_h})});
}

std::string activation(Ctx& c, const std::string& x, model::Activation act) {
  using model::Activation;
  switch (act) {
    case Activation::Relu: return c.g.op("Relu", {x});
    case Activation::Silu: return c.g.op("Mul", {x, c.g.op("Sigmoid", {x})});
    case Activation::QuickGelu: return c.g.op("Mul", {x, c.g.op("Sigmoid", {c.g.op("Mul", {x, c.g.scalar(1.702f)})})});
    case Activation::Gelu: {  // x·Φ(x) = 0.5·x·(1 + erf(x/√2))
      const std::string e = c.g.op("Erf", {c.g.op("Mul", {x, c.g.scalar(0.70710678118654752f)})});
      return c.g.op("Mul", {c.g.op("Mul", {x, c.g.scalar(0.5f)}), c.g.op("Add", {e, c.g.scalar(1.0f)})});
    }
    case Activation::GeluTanh: {  // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
      const std::string x3 = c.g.op("Mul", {c.g.op("Mul", {x, x}), x});
      const std::string in = c.g.op("Add", {x, c.g.op("Mul", {x3, c.g.scalar(0.044715f)})});
      const std::string t = c.g.op("Tanh", {c.g.op("Mul", {in, c.g.scalar(0.79788456080286536f)})});
      return c.g.op("Mul", {c.g.op("Mul", {x, c.g.scalar(0.5f)}), c.g.op("Add", {t, c.g.scalar(1.0f)})});
    }
  }
  return x;
}

std::string mlp(Ctx& c, const model::DecoderLayer& L, const std::string& x) {
  const model::MlpInfo& info = c.m.mlp();
  const std::string up = linear(c, L.linear(model::Role::Up), x);
  std::string mid;
  if (info.gated) {
    mid = c.g.op("Mul", {activation(c, linear(c, L.linear(model::Role::Gate), x), info.act), up});
  } else {
    mid = activation(c, up, info.act);
  }
  return linear(c, L.linear(model::Role::Down), mid);
}

// One decoder layer: h: [B, S, d] -> [B, S, d] (pre-LN OPT or the Llama family).
std::string decoder_layer(Ctx& c, const model::DecoderLayer& L, const std::string& h, LayerIo& io) {
  const std::string prefix = layer_prefix(L);
  const bool opt = c.m.family() == "opt";
  const float eps = static_cast<float>(c.m.config().rms_norm_eps);
  auto norm = [&](const std::string& x, const char* opt_name, const char* llama_name) {
    if (opt) {
      return layer_norm(c, x, stored(c, prefix + opt_name), L.norm(std::string(opt_name) + ".weight"),
                        L.norm(std::string(opt_name) + ".bias"));
    }
    return rms_norm(c, x, stored(c, prefix + llama_name), L.norm(llama_name), eps);
  };
  const std::string a = attention(c, L, prefix, norm(h, "self_attn_layer_norm", "input_layernorm.weight"), io);
  const std::string h1 = c.g.op("Add", {h, linear(c, L.linear(model::Role::O), a)});
  return c.g.op("Add", {h1, mlp(c, L, norm(h1, "final_layer_norm", "post_attention_layernorm.weight"))});
}

// The attention mask of every layer: query t (at index past + t of the sequence) sees key n when n <=
// past + t, attention_mask[b, n] = 1 and (Mistral) n > past + t − sliding_window. [B, 1, 1, S, K].
std::string attention_mask(Ctx& c) {
  Graph& g = c.g;
  const std::string one = g.int_scalar(1), zero = g.int_scalar(0);
  const std::string total = g.op("Gather", {g.op("Shape", {"attention_mask"}), one});
  const std::string seq = g.op("Gather", {g.op("Shape", {"input_ids"}), one});
  const std::string qpos = g.op("Unsqueeze", {g.op("Range", {g.op("Sub", {total, seq}), total, one}), g.ints({1})});  // [S, 1]
  const std::string kpos = g.op("Unsqueeze", {g.op("Range", {zero, total, one}), g.ints({0})});  // [1, K]
  std::string seen = g.op("LessOrEqual", {kpos, qpos});  // [S, K]
  if (const std::int64_t w = c.m.config().sliding_window; w > 0 && c.m.attention().rope) {
    seen = g.op("And", {seen, g.op("Greater", {kpos, g.op("Sub", {qpos, g.int_scalar(w)})})});
  }
  const std::string pad = g.op("Cast", {g.op("Unsqueeze", {"attention_mask", g.ints({1, 2, 3})})},
                               {attr("to", std::int64_t{onnx_graph::kBool})});  // [B, 1, 1, 1, K]
  return g.op("Where", {g.op("And", {seen, pad}), g.scalar(0.0f), g.scalar(kMaskedScore)});
}

// cos, sin: [B, 1, S, d_h/2] of position_ids·ω_j, the angles in double as src/model/rope.cpp.
void rope_tables(Ctx& c) {
  std::vector<double> inv(static_cast<std::size_t>(c.d_h / 2));
  for (int j = 0; j < c.d_h / 2; ++j) inv[static_cast<std::size_t>(j)] = c.m.config().rope.inv_freq(j, c.d_h);
  const std::string pos = c.g.op("Unsqueeze", {c.g.op("Cast", {"position_ids"}, {attr("to", std::int64_t{onnx_graph::kDouble})}),
                                               c.g.ints({2})});  // [B, S, 1]
  const std::string ang = c.g.op("Mul", {pos, c.g.doubles(inv)});  // [B, S, d_h/2]
  auto table = [&](const char* fn) {
    const std::string t = c.g.op("Cast", {c.g.op(fn, {ang})}, {attr("to", std::int64_t{kFloat})});
    return c.g.op("Unsqueeze", {t, c.g.ints({1})});
  };
  c.cos = table("Cos");
  c.sin = table("Sin");
}

// The token embedding's initializer (tied: whichever of embed_tokens / lm_head is stored, once) and the
// LM head's ([V, d], read by Gemm with transB). A quantized head (compress --head-bits) has no float
// initializer when MatMulNBits takes it (head is then ""), else its dequantized values.
struct Tables {
  std::string embed, head;
};
Tables tables(Ctx& c, const io::TensorStore& store, const std::string& embed_name) {
  const model::ModelConfig& cfg = c.m.config();
  auto table = [&](const std::string& hf) {
    const std::string s = stored(c, hf);
    const TensorView& t = store.get(s);
    return weight(c, s, {t.shape[0], t.shape[1]}, t.to_f32());
  };
  const bool has_embed = store.has(stored(c, embed_name));
  const std::string embed = table(cfg.tie_word_embeddings && !has_embed ? "lm_head.weight" : embed_name);
  if (const quant::PackedMatrix* q = c.m.head_weight().packed()) {
    if (nbits_unsupported(*q).empty()) return {embed, ""};
    const MatrixF w = quant::dequantize(quant::unpack(*q)).cast<float>();  // [V, d]
    return {embed, weight(c, stored(c, "lm_head.weight"), {q->rows, q->cols}, {w.data(), w.data() + w.size()})};
  }
  return {embed, cfg.tie_word_embeddings ? embed : table("lm_head.weight")};
}

std::string embed(Ctx& c, const io::TensorStore& store, const std::string& table, const std::string& opt_pre) {
  const std::string h = c.g.op("Gather", {table, "input_ids"});  // [B, S, d]
  if (c.m.family() != "opt") return h;
  const std::string name = stored(c, opt_pre + "embed_positions.weight");
  const TensorView& t = store.get(name);
  const std::string pos = weight(c, name, {t.shape[0], t.shape[1]}, t.to_f32());
  const std::string idx = c.g.op("Add", {"position_ids", c.g.ints({kOptPositionOffset})});
  return c.g.op("Add", {h, c.g.op("Gather", {pos, idx})});
}

// Final norm and LM head: h: [B, S, d] -> logits [B, S, V].
std::string head(Ctx& c, const io::TensorStore& store, const std::string& h, const std::string& table, const std::string& opt_pre) {
  std::string x;
  const std::int64_t d = c.m.config().hidden_size;
  if (c.m.family() == "opt") {
    const std::string n = stored(c, opt_pre + "final_layer_norm");
    x = c.g.op("LayerNormalization",
               {h, weight(c, n + ".weight", {d}, store.get(n + ".weight").to_f32()),
                weight(c, n + ".bias", {d}, store.get(n + ".bias").to_f32())},
               {attr("axis", std::int64_t{-1}), attr("epsilon", kOptLayerNormEps)});
  } else {
    const std::string n = stored(c, "model.norm.weight");
    const std::vector<float> w = store.get(n).to_f32();
    x = rms_norm(c, h, n, Eigen::Map<const VectorF>(w.data(), d), static_cast<float>(c.m.config().rms_norm_eps));
  }
  if (table.empty()) {  // a quantized head: one MatMulNBits, [B, S, V]
    return nbits_matmul(c, stored(c, "lm_head"), io::Factor::Weight, *c.m.head_weight().packed(), x);
  }
  const std::string flat = c.g.op("Reshape", {x, c.g.ints({-1, d})});
  const std::string logits = c.g.op("Gemm", {flat, table}, {attr("transB", std::int64_t{1})});  // [B·S, V]
  const std::string shape = c.g.op("Concat", {c.g.op("Shape", {"input_ids"}), c.g.ints({c.m.config().vocab_size})},
                                   {attr("axis", std::int64_t{0})});
  return c.g.op("Reshape", {logits, shape});
}

// Bytes of module `spec`'s initializers in the form f: a quantized matrix MatMulNBits takes at most
// quant::packed_bytes (codes, F16 scales and zero points), any other matrix and the bias `elem` bytes
// per value. The B of k_proj / v_proj counts as float (a latent past absorbs it dequantized).
std::int64_t module_bytes(const ModuleForm& f, const model::Linear& spec, std::int64_t elem) {
  if (f.bits >= 16 || !nbits_unsupported(f.bits, f.group).empty()) return f.params(spec) * elem;
  const quant::QuantSpec q{f.bits, f.group, quant::Grid::MinMax};
  const std::int64_t bias = f.bias ? spec.out * elem : 0;
  if (f.rank == 0) return bias + quant::packed_bytes(spec.out, spec.in, q);
  const bool kv = spec.role == model::Role::K || spec.role == model::Role::V;
  const std::int64_t b = kv ? spec.out * f.rank * elem : quant::packed_bytes(spec.out, f.rank, q);
  return bias + b + quant::packed_bytes(f.rank, spec.in - (f.block_identity ? f.rank : 0), q);
}

// Bytes of every initializer: the source's tensors outside the decoder layers' modules and the layers'
// modules as `layers` holds them, in the export's type (perm indices aside).
std::int64_t weight_bytes(LayerSource& layers, const io::TensorStore& store, DType dtype) {
  const model::Model& m = layers.model();
  const auto where = layer_modules(m);
  const std::int64_t elem = dtype == DType::F16 ? 2 : 4;
  std::int64_t n = 0;
  for (const auto& name : store.names())
    if (!where.count(m.module_name(tensor_module(name)))) n += store.get(name).numel() * elem;
  for (int i = 0; i < m.num_layers(); ++i) {
    const std::vector<ModuleForm> forms = layers.forms(i);
    for (std::size_t k = 0; k < forms.size(); ++k) n += module_bytes(forms[k], m.layer_spec(i).linears[k], elem);
  }
  return n;
}

// config.json's record of the past inputs: per layer the form of key and value (latent: its rank).
nlohmann::json past_json(const std::vector<LayerIo>& ios) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerIo& io : ios) {
    auto form = [](model::KvForm f, std::int64_t r) {
      return f == model::KvForm::Latent ? nlohmann::json{{"form", "latent"}, {"rank", r}} : nlohmann::json{{"form", "dense"}};
    };
    layers.push_back({{"key", form(io.k_form, io.k_rank)}, {"value", form(io.v_form, io.v_rank)}});
  }
  return layers;
}

}  // namespace

void check_onnx(const model::Model& m, const WriteOptions& opt) {
  if (opt.kv_cache == model::KvCacheMode::Latent) {
    throw ConfigError("--kv-cache latent with --format onnx (expected auto or dense: the graph absorbs a latent "
                      "past into the attention, which keys rotated by RoPE do not allow)");
  }
  const model::ModelConfig& cfg = m.config();
  const std::string dir = m.dir().string();
  if (!cfg.multimodal_architecture.empty()) {
    throw ConfigError(fmt::format("{}: --format onnx exports causal language models (expected OPT or the Llama family, "
                                  "got {})", dir, cfg.multimodal_architecture));
  }
  if (m.family() == "opt" &&
      (!cfg.do_layer_norm_before || cfg.word_embed_proj_dim != cfg.hidden_size || !cfg.layer_norm_elementwise_affine ||
       cfg.raw.value("_remove_final_layer_norm", false))) {
    throw ConfigError(fmt::format("{}: --format onnx supports pre-LN OPT only (expected do_layer_norm_before, "
                                  "word_embed_proj_dim = hidden_size, layer norms with weights and a final layer "
                                  "norm, got do_layer_norm_before = {}, word_embed_proj_dim = {})", dir,
                                  cfg.do_layer_norm_before, cfg.word_embed_proj_dim));
  }
  if (opt.dtype == DType::BF16) {
    throw ConfigError("--dtype bf16 with --format onnx (expected f32 or f16: onnxruntime-node cannot read bfloat16)");
  }
}

ExportSummary write_onnx(LayerSource& layers, const fs::path& dir, const WriteOptions& opt) {
  check_onnx(layers.model(), opt);
  const model::Model* m = &layers.model();
  const DType dtype = opt.dtype;
  const auto store = io::TensorStore::open(m->dir());
  const model::ModelConfig& cfg = m->config();
  const model::AttentionInfo& a = m->attention();

  fs::create_directories(dir / "onnx");
  std::unique_ptr<onnx_graph::ExternalData> ext;
  if (weight_bytes(layers, store, dtype) > opt.onnx_external_data_above) {
    ext = std::make_unique<onnx_graph::ExternalData>(dir / "onnx" / "model.onnx_data");
  }
  Graph g(dtype, ext.get());
  Ctx c(g, *m, dtype);

  g.input("input_ids", kInt64, {kBatch, kSeq});
  g.input("attention_mask", kInt64, {kBatch, kTotal});
  g.input("position_ids", kInt64, {kBatch, kSeq});
  std::vector<LayerIo> ios(static_cast<std::size_t>(m->num_layers()));
  c.mask = attention_mask(c);
  if (a.rope) rope_tables(c);
  const std::string opt_pre = store.has(m->stored_name("model.decoder.embed_tokens.weight")) ||
                                      store.has(m->stored_name("model.decoder.embed_positions.weight"))
                                  ? "model.decoder."
                                  : "decoder.";
  const std::string embed_name = m->family() == "opt" ? opt_pre + "embed_tokens.weight" : "model.embed_tokens.weight";
  const Tables t = tables(c, store, embed_name);
  std::string h = embed(c, store, t.embed, opt_pre);
  for (int i = 0; i < m->num_layers(); ++i) {
    const model::DecoderLayer& source = layers.layer(i);
    LayerIo& io = ios[static_cast<std::size_t>(i)];
    // The form `generate --kv-cache <mode>` gives each module (src/model/kv_cache.cpp), hence the past's
    // shape (mode auto or dense; latent is refused by the registry).
    io.k_form = model::kv_cache_form(source.find(model::Role::K), true, a, opt.kv_cache);
    io.v_form = model::kv_cache_form(source.find(model::Role::V), false, a, opt.kv_cache);
    std::vector<std::string> absorbed;
    if (io.k_form == model::KvForm::Latent) absorbed.push_back(source.linear(model::Role::K).name);
    if (io.v_form == model::KvForm::Latent) absorbed.push_back(source.linear(model::Role::V).name);
    model::DecoderLayer copy;
    const model::DecoderLayer& L = export_layer(c, source, copy, absorbed);
    io.k_rank = L.linear(model::Role::K).rank();
    io.v_rank = L.linear(model::Role::V).rank();
    auto dims = [&](model::KvForm f, std::int64_t r, const Graph::Dim& len) {
      return f == model::KvForm::Latent ? Dims{kBatch, len, fixed(r)} : Dims{kBatch, fixed(c.H_kv), len, fixed(c.d_h)};
    };
    io.past_k = io_input(c, fmt::format("past_key_values.{}.key", i), dims(io.k_form, io.k_rank, kPast));
    io.past_v = io_input(c, fmt::format("past_key_values.{}.value", i), dims(io.v_form, io.v_rank, kPast));
    h = decoder_layer(c, L, h, io);
    io_output(c, io.present_k, fmt::format("present.{}.key", i), dims(io.k_form, io.k_rank, kTotal));
    io_output(c, io.present_v, fmt::format("present.{}.value", i), dims(io.v_form, io.v_rank, kTotal));
  }
  io_output(c, head(c, store, h, t.head, opt_pre), "logits", {kBatch, kSeq, fixed(cfg.vocab_size)});
  // Outputs in Optimum's order: logits, then the presents.
  auto& outputs = g.ir()["outputs"];
  std::rotate(outputs.begin(), outputs.end() - 1, outputs.end());
  nlohmann::json meta = nlohmann::json::object();
  for (std::size_t i = 0; i < ios.size(); ++i) {
    meta[fmt::format("latentllm.past_key_values.{}.key", i)] = model::kv_form_name(ios[i].k_form);
    meta[fmt::format("latentllm.past_key_values.{}.value", i)] = model::kv_form_name(ios[i].v_form);
  }
  g.ir()["metadata"] = meta;
  g.ir()["name"] = cfg.architecture + " (latent)";
  g.ir()["opset"] = kOpset;
  for (const auto& [why, n] : c.dequantized) {
    log_warn("export --format onnx: {} quantized matri{} written dequantized to float32: {}", n, n == 1 ? "x" : "ces", why);
  }
  g.ir()["producer"] = "latentllm";
  if (ext) ext->close();
  write_onnx_model(g.ir(), g.blobs(), dir / "onnx" / "model.onnx");

  nlohmann::json config = cfg.raw;
  config.erase("latent");
  config["torch_dtype"] = dtype == DType::F16 ? "float16" : "float32";
  config["latentllm_export"] = {{"format", "onnx"}, {"past_key_values", past_json(ios)}};
  core::write_text_atomic(dir / "config.json", config.dump(2) + "\n");
  const fs::path from = m->dir();
  for (const char* f : checkpoint::companion_files())
    if (fs::exists(from / f)) core::write_text_atomic(dir / f, core::read_file(from / f));

  ExportSummary s;
  s.dtype = dtype;
  s.tensors = g.initializers();
  s.nbits = c.nbits;
  return s;
}

}  // namespace latentllm::format
