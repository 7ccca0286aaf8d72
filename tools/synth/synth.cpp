// The RNG, the tensor plan (names, shapes, value ranges in state-dict order), config.json and the
// shard plan of a synthetic checkpoint (synth.hpp). Compiled with -ffp-contract=off: the RNG's
// center + scale·t must round the product before the sum, as numpy does (scripts/gen_arch_golden.py).
#include <cmath>

#include <fmt/format.h>

#include "latentllm/error.hpp"
#include "synth.hpp"

namespace latentllm::synth {
namespace {

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

enum class Kind { Embedding, Linear, Bias, NormWeight, NormBias };

// center and scale of a tensor kind (synth.hpp's table); `in` = input width of a linear weight.
std::pair<float, float> init_range(InitScheme scheme, Kind kind, std::int64_t in) {
  const double hf = 0.02 * std::sqrt(3.0);
  const bool tiny = scheme == InitScheme::Tiny;
  switch (kind) {
    case Kind::Embedding: return {0.0f, static_cast<float>(tiny ? std::sqrt(3.0) : hf)};
    case Kind::Linear: return {0.0f, static_cast<float>(tiny ? std::sqrt(3.0 / static_cast<double>(in)) : hf)};
    case Kind::Bias: return {0.0f, static_cast<float>(tiny ? 0.1 * std::sqrt(3.0) : hf)};
    case Kind::NormWeight: return {1.0f, static_cast<float>(tiny ? 0.2 : 0.1)};
    case Kind::NormBias: return {0.0f, static_cast<float>(tiny ? 0.1 * std::sqrt(3.0) : hf)};
  }
  return {0.0f, 0.0f};
}

class PlanBuilder {
 public:
  explicit PlanBuilder(const SynthSpec& s) : s_(s) {}

  // `in` of a weight [out, in...] is the product of its trailing dims (a convolution's C·p·p).
  void add(std::string name, std::vector<std::int64_t> shape, Kind kind) {
    std::int64_t in = shape.size() >= 2 ? 1 : 0;
    for (std::size_t i = 1; i < shape.size(); ++i) in *= shape[i];
    const auto [center, scale] = init_range(s_.init, kind, in);
    plan_.push_back({std::move(name), std::move(shape), center, scale});
  }
  // A Linear: weight [out, in] (+ bias [out]).
  void linear(const std::string& name, std::int64_t out, std::int64_t in, bool bias) {
    add(name + ".weight", {out, in}, Kind::Linear);
    if (bias) add(name + ".bias", {out}, Kind::Bias);
  }
  void layer_norm(const std::string& name, std::int64_t n) {
    add(name + ".weight", {n}, Kind::NormWeight);
    add(name + ".bias", {n}, Kind::NormBias);
  }
  std::vector<TensorPlan> take() { return std::move(plan_); }

 private:
  const SynthSpec& s_;
  std::vector<TensorPlan> plan_;
};

// OPTForCausalLM: the decoder registers embed_tokens, embed_positions and final_layer_norm before
// its layers; OPTAttention registers k, v, q, out_proj in that order.
std::vector<TensorPlan> opt_plan(const SynthSpec& s) {
  PlanBuilder b(s);
  const std::int64_t d = s.hidden_size, f = s.ffn_width;
  b.add("model.decoder.embed_tokens.weight", {s.vocab_size, d}, Kind::Embedding);
  b.add("model.decoder.embed_positions.weight", {s.max_position_embeddings + 2, d}, Kind::Embedding);  // offset 2
  b.layer_norm("model.decoder.final_layer_norm", d);
  for (std::int64_t i = 0; i < s.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.decoder.layers.{}.", i);
    for (const char* m : {"k_proj", "v_proj", "q_proj", "out_proj"}) b.linear(p + "self_attn." + m, d, d, true);
    b.layer_norm(p + "self_attn_layer_norm", d);
    b.linear(p + "fc1", f, d, true);
    b.linear(p + "fc2", d, f, true);
    b.layer_norm(p + "final_layer_norm", d);
  }
  if (!s.tie_word_embeddings) b.add("lm_head.weight", {s.vocab_size, d}, Kind::Linear);
  return b.take();
}

// LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM.
std::vector<TensorPlan> llama_plan(const SynthSpec& s) {
  PlanBuilder b(s);
  const std::int64_t d = s.hidden_size, f = s.ffn_width, dh = s.head_dim;
  const std::int64_t q_out = s.num_attention_heads * dh, kv_out = s.num_key_value_heads * dh;
  b.add("model.embed_tokens.weight", {s.vocab_size, d}, Kind::Embedding);
  for (std::int64_t i = 0; i < s.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    b.linear(p + "self_attn.q_proj", q_out, d, s.qkv_bias);
    b.linear(p + "self_attn.k_proj", kv_out, d, s.qkv_bias);
    b.linear(p + "self_attn.v_proj", kv_out, d, s.qkv_bias);
    b.linear(p + "self_attn.o_proj", d, q_out, false);
    if (s.qk_norm) {
      b.add(p + "self_attn.q_norm.weight", {dh}, Kind::NormWeight);
      b.add(p + "self_attn.k_norm.weight", {dh}, Kind::NormWeight);
    }
    b.linear(p + "mlp.gate_proj", f, d, false);
    b.linear(p + "mlp.up_proj", f, d, false);
    b.linear(p + "mlp.down_proj", d, f, false);
    b.add(p + "input_layernorm.weight", {d}, Kind::NormWeight);
    b.add(p + "post_attention_layernorm.weight", {d}, Kind::NormWeight);
  }
  b.add("model.norm.weight", {d}, Kind::NormWeight);
  if (!s.tie_word_embeddings) b.add("lm_head.weight", {s.vocab_size, d}, Kind::Linear);
  return b.take();
}

// LlavaForConditionalGeneration / LlavaNextForConditionalGeneration in the hub's layout. The state dict
// lists a module's own parameters before its submodules: NeXT's image_newline first, then the vision
// tower (CLIPVisionEmbeddings: class_embedding, patch_embedding, position_embedding; CLIPAttention: k,
// v, q, out_proj), the projector and the language model.
std::vector<TensorPlan> llava_plan(const SynthSpec& s) {
  PlanBuilder b(s);
  const VisionSpec& v = s.llava->vision;
  const std::int64_t d = s.hidden_size, dv = v.hidden_size, p = v.patch_size;
  const std::int64_t positions = (v.image_size / p) * (v.image_size / p) + 1;  // P
  if (s.llava->image_newline) b.add("image_newline", {d}, Kind::Embedding);
  const std::string e = "vision_tower.vision_model.";
  b.add(e + "embeddings.class_embedding", {dv}, Kind::Embedding);
  b.add(e + "embeddings.patch_embedding.weight", {dv, v.num_channels, p, p}, Kind::Linear);  // no bias
  b.add(e + "embeddings.position_embedding.weight", {positions, dv}, Kind::Embedding);
  b.layer_norm(e + "pre_layrnorm", dv);
  for (std::int64_t i = 0; i < v.num_hidden_layers; ++i) {
    const std::string l = fmt::format("{}encoder.layers.{}.", e, i);
    for (const char* m : {"k_proj", "v_proj", "q_proj", "out_proj"}) b.linear(l + "self_attn." + m, dv, dv, true);
    b.layer_norm(l + "layer_norm1", dv);
    b.linear(l + "mlp.fc1", v.intermediate_size, dv, true);
    b.linear(l + "mlp.fc2", dv, v.intermediate_size, true);
    b.layer_norm(l + "layer_norm2", dv);
  }
  b.layer_norm(e + "post_layernorm", dv);
  b.linear("multi_modal_projector.linear_1", d, dv, true);
  b.linear("multi_modal_projector.linear_2", d, d, true);
  std::vector<TensorPlan> plan = b.take();
  for (TensorPlan& t : llama_plan(s)) {
    t.name = "language_model." + t.name;
    plan.push_back(std::move(t));
  }
  return plan;
}

// Sets `key` when the config has it (or `add`): the layout of the real file is kept.
template <typename T>
void set_key(nlohmann::ordered_json& c, const char* key, const T& value, bool add = false) {
  if (add || c.contains(key)) c[key] = value;
}

// Sets `key` of a nested config when the file has it or `value` differs from what the file implies
// (its own value, else the config class's default `fallback`).
void set_nested(nlohmann::ordered_json& c, const char* key, std::int64_t value, std::int64_t fallback) {
  set_key(c, key, value, value != c.value(key, fallback));
}

// LlavaConfig: the language model's sizes in text_config (LlamaConfig's defaults implied), the vision
// tower's in vision_config (CLIPVisionConfig's), the deprecated top-level vocab_size kept in step.
nlohmann::ordered_json llava_config_json(const SynthSpec& s) {
  nlohmann::ordered_json c = s.config;
  nlohmann::ordered_json& t = c["text_config"];
  set_nested(t, "vocab_size", s.vocab_size, 32000);
  set_key(c, "vocab_size", s.vocab_size);
  set_nested(t, "hidden_size", s.hidden_size, 4096);
  set_nested(t, "intermediate_size", s.ffn_width, 11008);
  set_nested(t, "num_hidden_layers", s.num_hidden_layers, 32);
  set_nested(t, "num_attention_heads", s.num_attention_heads, 32);
  set_nested(t, "num_key_value_heads", s.num_key_value_heads, t.value("num_attention_heads", std::int64_t{32}));
  set_nested(t, "head_dim", s.head_dim, s.hidden_size / s.num_attention_heads);
  set_nested(t, "max_position_embeddings", s.max_position_embeddings, 2048);
  set_key(t, "torch_dtype", std::string(torch_dtype_name(s.dtype)));
  set_key(c, "tie_word_embeddings", s.tie_word_embeddings, true);
  set_key(c, "torch_dtype", std::string(torch_dtype_name(s.dtype)), true);
  const VisionSpec& v = s.llava->vision;
  nlohmann::ordered_json& vc = c["vision_config"];
  set_nested(vc, "hidden_size", v.hidden_size, 768);
  set_nested(vc, "intermediate_size", v.intermediate_size, 3072);
  set_nested(vc, "num_hidden_layers", v.num_hidden_layers, 12);
  set_nested(vc, "num_attention_heads", v.num_attention_heads, 12);
  set_nested(vc, "image_size", v.image_size, 224);
  set_nested(vc, "patch_size", v.patch_size, 32);
  set_nested(vc, "num_channels", v.num_channels, 3);
  const std::int64_t side = v.image_size / v.patch_size;
  set_key(c, "image_seq_length", side * side);  // LLaVA-1.5's count: the patches, CLS dropped
  return c;
}

}  // namespace

// ---- RNG ------------------------------------------------------------------------------------------

std::uint64_t mix64(std::uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return z;
}

std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::uint64_t tensor_key(std::uint64_t seed, std::string_view name) { return mix64(seed ^ fnv1a64(name)); }

float synth_value(std::uint64_t key, std::uint64_t i, float center, float scale) {
  const std::uint64_t z = mix64(key + (i + 1) * kGolden);
  const float u = static_cast<float>(static_cast<std::int32_t>(z >> 40)) * 0x1p-24f;  // exact
  const float t = 2.0f * u - 1.0f;                                                    // exact
  return center + scale * t;  // two roundings (no FMA: -ffp-contract=off)
}

// One thread: the loop vectorizes (AVX-512: ~0.4 ns a value), far beyond any disk's rate.
void fill_values(std::uint64_t key, std::uint64_t first, float center, float scale, std::span<float> out) {
  const std::size_t n = out.size();
  float* o = out.data();
  for (std::size_t j = 0; j < n; ++j) o[j] = synth_value(key, first + j, center, scale);
}

// ---- spec -> plan, config, shards ----------------------------------------------------------------

void validate(const SynthSpec& s) {
  auto fail = [&](const char* field, std::string expected, std::int64_t got) {
    throw ConfigError(fmt::format("synth {}: {} (expected {}, got {})", s.name, field, expected, got));
  };
  const std::pair<const char*, std::int64_t> sizes[] = {
      {"vocab_size", s.vocab_size},         {"hidden_size", s.hidden_size},
      {"num_hidden_layers", s.num_hidden_layers}, {"num_attention_heads", s.num_attention_heads},
      {"num_key_value_heads", s.num_key_value_heads}, {"head_dim", s.head_dim},
      {"ffn_width", s.ffn_width},           {"max_position_embeddings", s.max_position_embeddings}};
  for (const auto& [field, v] : sizes)
    if (v <= 0) fail(field, "a positive integer", v);
  if (s.num_attention_heads % s.num_key_value_heads != 0) {
    fail("num_attention_heads", fmt::format("a multiple of num_key_value_heads {}", s.num_key_value_heads),
         s.num_attention_heads);
  }
  if (s.family == Family::Opt) {
    if (s.num_key_value_heads != s.num_attention_heads) {
      fail("num_key_value_heads", fmt::format("num_attention_heads {} (OPT)", s.num_attention_heads),
           s.num_key_value_heads);
    }
    if (s.head_dim * s.num_attention_heads != s.hidden_size) {
      fail("head_dim", fmt::format("hidden_size / num_attention_heads = {} (OPT)",
                                   s.hidden_size / s.num_attention_heads), s.head_dim);
    }
    if (s.qkv_bias || s.qk_norm) fail("qkv_bias/qk_norm", "false (OPT)", 1);
  }
  if (s.llava) {
    const VisionSpec& v = s.llava->vision;
    if (s.family != Family::Llama) fail("family", "Llama (the LLaVA language model)", 0);
    const std::pair<const char*, std::int64_t> vision[] = {
        {"vision hidden_size", v.hidden_size},       {"vision num_hidden_layers", v.num_hidden_layers},
        {"vision num_attention_heads", v.num_attention_heads}, {"vision intermediate_size", v.intermediate_size},
        {"vision image_size", v.image_size},         {"vision patch_size", v.patch_size},
        {"vision num_channels", v.num_channels}};
    for (const auto& [field, n] : vision)
      if (n <= 0) fail(field, "a positive integer", n);
    if (v.hidden_size % v.num_attention_heads != 0) {
      fail("vision hidden_size", fmt::format("a multiple of num_attention_heads {}", v.num_attention_heads),
           v.hidden_size);
    }
    if (v.image_size % v.patch_size != 0) {
      fail("vision image_size", fmt::format("a multiple of patch_size {}", v.patch_size), v.image_size);
    }
  }
}

std::uint64_t TensorPlan::numel() const {
  std::uint64_t n = 1;
  for (const auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::vector<TensorPlan> tensor_plan(const SynthSpec& spec) {
  validate(spec);
  if (spec.llava) return llava_plan(spec);
  return spec.family == Family::Opt ? opt_plan(spec) : llama_plan(spec);
}

std::int64_t num_params(const SynthSpec& spec) {
  std::int64_t n = 0;
  for (const auto& t : tensor_plan(spec)) n += static_cast<std::int64_t>(t.numel());
  return n;
}

std::string_view torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::U8: return "uint8";
  }
  return "?";
}

nlohmann::ordered_json config_json(const SynthSpec& s) {
  validate(s);
  if (s.llava) return llava_config_json(s);
  nlohmann::ordered_json c = s.config.is_object() ? s.config : nlohmann::ordered_json::object();
  const bool opt = s.family == Family::Opt;
  set_key(c, "vocab_size", s.vocab_size, true);
  set_key(c, "hidden_size", s.hidden_size, true);
  set_key(c, "num_hidden_layers", s.num_hidden_layers, true);
  set_key(c, "num_attention_heads", s.num_attention_heads, true);
  set_key(c, opt ? "ffn_dim" : "intermediate_size", s.ffn_width, true);
  set_key(c, "max_position_embeddings", s.max_position_embeddings, true);
  if (opt) {
    set_key(c, "word_embed_proj_dim", s.hidden_size);  // = d: no project_in/out
  } else {
    set_key(c, "num_key_value_heads", s.num_key_value_heads, s.num_key_value_heads != s.num_attention_heads);
    set_key(c, "head_dim", s.head_dim, s.head_dim * s.num_attention_heads != s.hidden_size);
  }
  // transformers' default: tied for OPTConfig, untied for LlamaConfig, Qwen2Config and Qwen3Config.
  set_key(c, "tie_word_embeddings", s.tie_word_embeddings, s.tie_word_embeddings != opt);
  set_key(c, "torch_dtype", std::string(torch_dtype_name(s.dtype)), true);
  return c;
}

std::vector<Shard> plan_shards(const std::vector<TensorPlan>& plan, DType dtype, std::uint64_t max_shard_bytes) {
  std::vector<Shard> shards;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const std::uint64_t bytes = plan[i].numel() * dtype_size(dtype);
    if (shards.empty() || (!shards.back().tensors.empty() && shards.back().data_bytes + bytes > max_shard_bytes)) {
      shards.emplace_back();
    }
    shards.back().tensors.push_back(i);
    shards.back().data_bytes += bytes;
  }
  if (shards.empty()) shards.emplace_back();
  const std::size_t n = shards.size();
  for (std::size_t k = 0; k < n; ++k) {
    shards[k].file = n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n);
  }
  return shards;
}

}  // namespace latentllm::synth
