// config.json -> ModelConfig for the supported architectures, with the Hugging Face defaults of each
// (transformers OPTConfig, LlamaConfig, Qwen2Config, MistralConfig) for the keys a file may omit.
#include <array>
#include <cmath>
#include <limits>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.hpp"
#include "io/json_depth.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"

namespace latentllm::io {
namespace {

using json = nlohmann::json;

enum class Family { Opt, Llama };

struct Architecture {
  std::string_view architecture;  // architectures[0]
  std::string_view model_type;
  Family family;
  bool tie_word_embeddings;  // the transformers default
};

constexpr std::array<Architecture, 4> kArchitectures = {{
    {"OPTForCausalLM", "opt", Family::Opt, true},
    {"LlamaForCausalLM", "llama", Family::Llama, false},
    {"Qwen2ForCausalLM", "qwen2", Family::Llama, false},
    {"MistralForCausalLM", "mistral", Family::Llama, false},
}};

std::string supported_list(std::string_view Architecture::*field) {
  std::string out;
  for (const auto& a : kArchitectures) out += fmt::format("{}{}", out.empty() ? "" : ", ", a.*field);
  return out;
}

// A JSON value for an error message, cut to a readable length.
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Typed access to the keys of one config object; every failure is a ConfigError
// "<origin>: <key> (expected X, got Y)" or "<origin>: missing key <key> (expected X)".
class Keys {
 public:
  Keys(const json& doc, const std::string& origin) : doc_(doc), origin_(origin) {}

  const std::string& origin() const { return origin_; }

  // nullptr when absent or null (transformers treats null as "use the default").
  const json* find(std::string_view key) const {
    const auto it = doc_.find(key);
    return it == doc_.end() || it->is_null() ? nullptr : &*it;
  }

  [[noreturn]] void fail(std::string_view key, std::string_view expected, const json* got) const {
    if (got == nullptr) throw ConfigError(fmt::format("{}: missing key {} (expected {})", origin_, key, expected));
    throw ConfigError(fmt::format("{}: {} (expected {}, got {})", origin_, key, expected, brief(*got)));
  }

  std::int64_t positive(std::string_view key) const {
    const json* v = find(key);
    if (!is_positive_int(v)) fail(key, "a positive integer", v);
    return v->get<std::int64_t>();
  }
  std::int64_t positive_or(std::string_view key, std::int64_t fallback) const {
    return find(key) == nullptr ? fallback : positive(key);
  }
  double positive_number_or(std::string_view key, double fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>())) {
      fail(key, "a positive number", v);
    }
    return v->get<double>();
  }
  // True when the key is present with the value null (for the few keys where null differs from absent).
  bool is_null(std::string_view key) const {
    const auto it = doc_.find(key);
    return it != doc_.end() && it->is_null();
  }
  bool boolean_or(std::string_view key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(key, "true or false", v);
    return v->get<bool>();
  }
  std::string string_or(std::string_view key, std::string fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) fail(key, "a string", v);
    return v->get<std::string>();
  }
  // bos/eos/pad ids: an integer, or a list of integers (newer configs list several eos ids; the first
  // is kept here, `raw` has them all).
  std::optional<std::int64_t> token_id(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    const json* id = v->is_array() && !v->empty() ? &v->front() : v;
    if (!is_int64(id)) fail(key, "an integer or a list of integers", v);
    return id->get<std::int64_t>();
  }

 private:
  static bool is_int64(const json* v) {
    return v != nullptr && v->is_number_integer() &&
           (!v->is_number_unsigned() ||
            v->get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
  }
  static bool is_positive_int(const json* v) { return is_int64(v) && v->get<std::int64_t>() > 0; }

  const json& doc_;
  std::string origin_;
};

// architectures[0] (or model_type when architectures is absent) -> the supported architecture.
const Architecture& find_architecture(const Keys& k, ModelConfig& c) {
  if (const json* archs = k.find("architectures")) {
    if (!archs->is_array() || archs->empty() || !archs->front().is_string()) {
      k.fail("architectures", "a non-empty list of strings", archs);
    }
    c.architecture = archs->front().get<std::string>();
  }
  c.model_type = k.string_or("model_type", "");
  if (c.architecture.empty() && c.model_type.empty()) {
    k.fail("architectures", fmt::format("one of {}", supported_list(&Architecture::architecture)), nullptr);
  }
  for (const auto& a : kArchitectures) {
    if (c.architecture.empty() ? c.model_type != a.model_type : c.architecture != a.architecture) continue;
    if (c.model_type.empty()) c.model_type = a.model_type;
    if (c.architecture.empty()) c.architecture = a.architecture;
    if (c.model_type != a.model_type) {
      throw ConfigError(fmt::format("{}: model_type (expected {} for {}, got {})", k.origin(), a.model_type,
                                    a.architecture, c.model_type));
    }
    return a;
  }
  if (c.architecture.empty()) {
    throw ConfigError(fmt::format("{}: model_type {} is not supported (supported: {})", k.origin(), c.model_type,
                                  supported_list(&Architecture::model_type)));
  }
  throw ConfigError(fmt::format("{}: architecture {} is not supported (supported: {})", k.origin(), c.architecture,
                                supported_list(&Architecture::architecture)));
}

void check_multiple(const Keys& k, std::string_view key, std::int64_t value, std::string_view of_key,
                    std::int64_t of) {
  if (value % of != 0) {
    throw ConfigError(fmt::format("{}: {} {} (expected a multiple of {} {})", k.origin(), key, value, of_key, of));
  }
}

// transformers OPTConfig: every linear has a bias when enable_bias; one FFN width ffn_dim; ReLU by default.
void parse_opt(const Keys& k, ModelConfig& c) {
  c.vocab_size = k.positive("vocab_size");
  c.hidden_size = k.positive("hidden_size");
  c.num_hidden_layers = k.positive("num_hidden_layers");
  c.ffn_dim = k.positive("ffn_dim");
  c.num_attention_heads = k.positive("num_attention_heads");
  c.max_position_embeddings = k.positive("max_position_embeddings");
  check_multiple(k, "hidden_size", c.hidden_size, "num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = c.num_attention_heads;
  c.head_dim = c.hidden_size / c.num_attention_heads;
  c.word_embed_proj_dim = k.positive_or("word_embed_proj_dim", c.hidden_size);
  c.do_layer_norm_before = k.boolean_or("do_layer_norm_before", true);
  c.enable_bias = k.boolean_or("enable_bias", true);
  c.layer_norm_elementwise_affine = k.boolean_or("layer_norm_elementwise_affine", true);
  c.hidden_act = k.string_or("activation_function", "relu");
  c.qkv_bias = c.o_bias = c.mlp_bias = c.enable_bias;
}

// transformers LlamaConfig / Qwen2Config / MistralConfig. Biases differ by family: Llama follows
// attention_bias (q, k, v, o) and mlp_bias; Qwen2 always has q/k/v biases and nothing else; Mistral none.
void parse_llama(const Keys& k, const Architecture& a, ModelConfig& c) {
  c.vocab_size = k.positive("vocab_size");
  c.hidden_size = k.positive("hidden_size");
  c.intermediate_size = k.positive("intermediate_size");
  c.num_hidden_layers = k.positive("num_hidden_layers");
  c.num_attention_heads = k.positive("num_attention_heads");
  c.max_position_embeddings = k.positive("max_position_embeddings");
  c.num_key_value_heads = k.positive_or("num_key_value_heads", c.num_attention_heads);
  if (k.find("head_dim") != nullptr) {
    c.head_dim = k.positive("head_dim");
  } else {
    check_multiple(k, "hidden_size", c.hidden_size, "num_attention_heads", c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  check_multiple(k, "num_attention_heads", c.num_attention_heads, "num_key_value_heads", c.num_key_value_heads);
  c.word_embed_proj_dim = c.hidden_size;
  c.rms_norm_eps = k.positive_number_or("rms_norm_eps", 1e-6);
  c.rope_theta = k.positive_number_or("rope_theta", 10000.0);
  c.hidden_act = k.string_or("hidden_act", "silu");
  if (const json* rs = k.find("rope_scaling")) {
    throw ConfigError(fmt::format("{}: rope_scaling is unsupported (expected null, got {})", k.origin(), brief(*rs)));
  }
  if (a.model_type == "llama") {
    c.attention_bias = k.boolean_or("attention_bias", false);
    c.mlp_bias = k.boolean_or("mlp_bias", false);
    c.qkv_bias = c.o_bias = c.attention_bias;
  } else if (a.model_type == "qwen2") {
    c.qkv_bias = true;
    // Qwen2 slides the window only on layers >= max_window_layers; not implemented, so refuse it.
    if (k.boolean_or("use_sliding_window", false)) {
      throw ConfigError(fmt::format("{}: use_sliding_window is unsupported (expected false, got true)", k.origin()));
    }
  } else {  // mistral: MistralConfig(sliding_window=4096) when absent; an explicit null means no window
    c.sliding_window = k.is_null("sliding_window") ? 0 : k.positive_or("sliding_window", 4096);
  }
}

}  // namespace

ModelConfig parse_config(const json& doc, const std::string& origin) {
  if (!doc.is_object()) {
    throw ConfigError(fmt::format("{}: config (expected a JSON object, got {})", origin, doc.type_name()));
  }
  const Keys k(doc, origin);
  ModelConfig c;
  const Architecture& a = find_architecture(k, c);
  if (a.family == Family::Opt) {
    parse_opt(k, c);
  } else {
    parse_llama(k, a, c);
  }
  c.tie_word_embeddings = k.boolean_or("tie_word_embeddings", a.tie_word_embeddings);
  c.bos_token_id = k.token_id("bos_token_id");
  c.eos_token_id = k.token_id("eos_token_id");
  c.pad_token_id = k.token_id("pad_token_id");
  c.torch_dtype = k.string_or("torch_dtype", k.string_or("dtype", ""));
  c.raw = doc;
  return c;
}

ModelConfig load_config(const std::filesystem::path& config_json) {
  const std::string text = core::read_file(config_json);
  check_json_depth(text, config_json.string());
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw FormatError(fmt::format("{}: not valid JSON ({})", config_json.string(), e.what()));
  }
  return parse_config(doc, config_json.string());
}

}  // namespace latentllm::io
