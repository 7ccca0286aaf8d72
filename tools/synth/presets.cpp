// The presets: the real config.json of each model (keys, values and order as published on the Hugging
// Face hub), and the fields SynthSpec reads from it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "latentllm/error.hpp"
#include "synth.hpp"

namespace latentllm::synth {
namespace {

struct Preset {
  const char* name;
  Family family;
  InitScheme init;
  const char* tokenizer;
  const char* config;  // config.json text
};

// facebook/opt-125m, opt-1.3b, opt-6.7b (tied head, no tie_word_embeddings key: OPTConfig's default).
constexpr const char* kOpt125m = R"({
  "_name_or_path": "facebook/opt-125m",
  "activation_dropout": 0.0,
  "activation_function": "relu",
  "architectures": ["OPTForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 2,
  "do_layer_norm_before": true,
  "dropout": 0.1,
  "eos_token_id": 2,
  "ffn_dim": 3072,
  "hidden_size": 768,
  "init_std": 0.02,
  "layerdrop": 0.0,
  "max_position_embeddings": 2048,
  "model_type": "opt",
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "pad_token_id": 1,
  "prefix": "</s>",
  "torch_dtype": "float16",
  "transformers_version": "4.21.0.dev0",
  "use_cache": true,
  "vocab_size": 50272,
  "word_embed_proj_dim": 768
})";

constexpr const char* kOpt1_3b = R"({
  "_name_or_path": "facebook/opt-1.3b",
  "activation_dropout": 0.0,
  "activation_function": "relu",
  "architectures": ["OPTForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 2,
  "do_layer_norm_before": true,
  "dropout": 0.1,
  "eos_token_id": 2,
  "ffn_dim": 8192,
  "hidden_size": 2048,
  "init_std": 0.02,
  "layerdrop": 0.0,
  "max_position_embeddings": 2048,
  "model_type": "opt",
  "num_attention_heads": 32,
  "num_hidden_layers": 24,
  "pad_token_id": 1,
  "prefix": "</s>",
  "torch_dtype": "float16",
  "transformers_version": "4.21.0.dev0",
  "use_cache": true,
  "vocab_size": 50272,
  "word_embed_proj_dim": 2048
})";

constexpr const char* kOpt6_7b = R"({
  "_name_or_path": "facebook/opt-6.7b",
  "_remove_final_layer_norm": false,
  "activation_dropout": 0.0,
  "activation_function": "relu",
  "architectures": ["OPTForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 2,
  "do_layer_norm_before": true,
  "dropout": 0.1,
  "eos_token_id": 2,
  "ffn_dim": 16384,
  "hidden_size": 4096,
  "init_std": 0.02,
  "layerdrop": 0.0,
  "max_position_embeddings": 2048,
  "model_type": "opt",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "pad_token_id": 1,
  "prefix": "</s>",
  "torch_dtype": "float16",
  "transformers_version": "4.21.0.dev0",
  "use_cache": true,
  "vocab_size": 50272,
  "word_embed_proj_dim": 4096
})";

// meta-llama/Llama-2-7b-hf.
constexpr const char* kLlama2_7b = R"({
  "_name_or_path": "meta-llama/Llama-2-7b-hf",
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 11008,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.31.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// meta-llama/Meta-Llama-3-8B. The published file has "rope_scaling": null (no scaling, as absent);
// the key is left out here, as requested for this preset.
constexpr const char* kLlama3_8b = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// Qwen/Qwen2.5-7B (the base model).
constexpr const char* kQwen2_5_7b = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "initializer_range": 0.02,
  "intermediate_size": 18944,
  "max_position_embeddings": 131072,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 131072,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_mrope": false,
  "use_sliding_window": false,
  "vocab_size": 152064
})";

// Golden-test presets: the layout of Llama-3.2-1B's config.json (head_dim, mlp_bias, llama3
// rope_scaling; tied head) at tiny sizes. original_max_position_embeddings = 32 so that the scaling
// changes 7 of the 8 RoPE frequencies (wavelengths above 32/4 = 8 positions) within 64 positions.
constexpr const char* kLlama3Tiny = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 64,
  "initializer_range": 0.02,
  "intermediate_size": 128,
  "max_position_embeddings": 128,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32
  },
  "rope_theta": 10000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// The layout of Qwen3-0.6B's config.json at tiny sizes; head_dim 32 ≠ d / n_h = 16 on purpose.
constexpr const char* kQwen3Tiny = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 32,
  "hidden_act": "silu",
  "hidden_size": 64,
  "initializer_range": 0.02,
  "intermediate_size": 128,
  "max_position_embeddings": 128,
  "max_window_layers": 2,
  "model_type": "qwen3",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// Qwen2.5 uses the same Qwen2 byte-level BPE (vocabulary, merges, pre-tokenizer) as Qwen3; Qwen3's
// tokenizer.json adds a few special tokens after Qwen2.5's (<think>, </think>, ...), ids < 151936,
// inside both embedding tables.
constexpr Preset kPresets[] = {
    {"opt-125m", Family::Opt, InitScheme::Hf, "opt", kOpt125m},
    {"opt-1.3b", Family::Opt, InitScheme::Hf, "opt", kOpt1_3b},
    {"opt-6.7b", Family::Opt, InitScheme::Hf, "opt", kOpt6_7b},
    {"llama-2-7b", Family::Llama, InitScheme::Hf, "llama2", kLlama2_7b},
    {"llama-3-8b", Family::Llama, InitScheme::Hf, "llama3", kLlama3_8b},
    {"qwen2.5-7b", Family::Llama, InitScheme::Hf, "qwen3", kQwen2_5_7b},
    {"llama3-tiny", Family::Llama, InitScheme::Tiny, "llama3", kLlama3Tiny},
    {"qwen3-tiny", Family::Llama, InitScheme::Tiny, "qwen3", kQwen3Tiny},
};

DType parse_torch_dtype(const std::string& s) {
  if (s == "float32") return DType::F32;
  if (s == "float16") return DType::F16;
  return DType::BF16;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

SynthSpec preset(std::string_view name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    SynthSpec s;
    s.name = p.name;
    s.family = p.family;
    s.init = p.init;
    s.tokenizer = p.tokenizer;
    s.config = nlohmann::ordered_json::parse(p.config);
    const auto& c = s.config;
    s.vocab_size = c.at("vocab_size").get<std::int64_t>();
    s.hidden_size = c.at("hidden_size").get<std::int64_t>();
    s.num_hidden_layers = c.at("num_hidden_layers").get<std::int64_t>();
    s.num_attention_heads = c.at("num_attention_heads").get<std::int64_t>();
    s.num_key_value_heads = c.value("num_key_value_heads", s.num_attention_heads);
    s.head_dim = c.value("head_dim", s.hidden_size / s.num_attention_heads);
    s.ffn_width = c.at(p.family == Family::Opt ? "ffn_dim" : "intermediate_size").get<std::int64_t>();
    s.max_position_embeddings = c.at("max_position_embeddings").get<std::int64_t>();
    const std::string model_type = c.at("model_type").get<std::string>();
    s.qkv_bias = model_type == "qwen2";
    s.qk_norm = model_type == "qwen3";
    s.tie_word_embeddings = c.value("tie_word_embeddings", p.family == Family::Opt);
    s.dtype = parse_torch_dtype(c.at("torch_dtype").get<std::string>());
    return s;
  }
  throw ConfigError(fmt::format("preset (expected one of {}, got {})", fmt::join(preset_names(), ", "), name));
}

}  // namespace latentllm::synth
