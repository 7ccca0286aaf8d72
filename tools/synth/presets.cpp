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
  const char* config;                  // config.json text
  const char* preprocessor = nullptr;  // LLaVA: preprocessor_config.json text
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

// llava-hf/llava-1.5-7b-hf: the file as transformers 4.41 prints it from the hub (LlavaConfig, nested
// configs without their classes' defaults: text_config is Vicuna-7B-v1.5 = Llama-2-7B's sizes, vocabulary
// 32064; vision_config CLIP ViT-L/14-336), with the deprecated top-level vocab_size the hub file keeps
// and image_seq_length written out (LlavaConfig's default, 576 = (336 / 14)²).
constexpr const char* kLlava15_7b = R"({
  "architectures": ["LlavaForConditionalGeneration"],
  "ignore_index": -100,
  "image_seq_length": 576,
  "image_token_index": 32000,
  "model_type": "llava",
  "pad_token_id": 32001,
  "projector_hidden_act": "gelu",
  "text_config": {
    "_name_or_path": "lmsys/vicuna-7b-v1.5",
    "architectures": ["LlamaForCausalLM"],
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "rms_norm_eps": 1e-05,
    "torch_dtype": "float16",
    "vocab_size": 32064
  },
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.36.0.dev0",
  "vision_config": {
    "hidden_size": 1024,
    "image_size": 336,
    "intermediate_size": 4096,
    "model_type": "clip_vision_model",
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "patch_size": 14,
    "projection_dim": 768,
    "vocab_size": 32000
  },
  "vision_feature_layer": -2,
  "vision_feature_select_strategy": "default",
  "vocab_size": 32064
})";

// llava-hf/llava-v1.6-vicuna-7b-hf (LlavaNextConfig): the layout of the llava-hf NeXT configs (as
// llava-v1.6-mistral-7b-hf's), with the Vicuna text_config of llava-1.5-7b-hf plus pad_token_id 0.
constexpr const char* kLlavaNextVicuna7b = R"({
  "architectures": ["LlavaNextForConditionalGeneration"],
  "ignore_index": -100,
  "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
  "image_token_index": 32000,
  "model_type": "llava_next",
  "projector_hidden_act": "gelu",
  "text_config": {
    "_name_or_path": "lmsys/vicuna-7b-v1.5",
    "architectures": ["LlamaForCausalLM"],
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "pad_token_id": 0,
    "rms_norm_eps": 1e-05,
    "torch_dtype": "float16",
    "vocab_size": 32064
  },
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.39.0.dev0",
  "use_image_newline_parameter": true,
  "vision_config": {
    "hidden_size": 1024,
    "image_size": 336,
    "intermediate_size": 4096,
    "model_type": "clip_vision_model",
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "patch_size": 14,
    "projection_dim": 768,
    "vocab_size": 32000
  },
  "vision_feature_layer": -2,
  "vision_feature_select_strategy": "default",
  "vocab_size": 32064
})";

// Their preprocessor_config.json: CLIPImageProcessor (shortest edge 336, BICUBIC, center crop 336,
// OpenAI CLIP mean/std) and LlavaNextImageProcessor (the same plus anyres: pinpoints, do_pad).
constexpr const char* kClip336Processor = R"({
  "crop_size": {
    "height": 336,
    "width": 336
  },
  "do_center_crop": true,
  "do_convert_rgb": true,
  "do_normalize": true,
  "do_rescale": true,
  "do_resize": true,
  "image_mean": [
    0.48145466,
    0.4578275,
    0.40821073
  ],
  "image_processor_type": "CLIPImageProcessor",
  "image_std": [
    0.26862954,
    0.26130258,
    0.27577711
  ],
  "processor_class": "LlavaProcessor",
  "resample": 3,
  "rescale_factor": 0.00392156862745098,
  "size": {
    "shortest_edge": 336
  }
}
)";

constexpr const char* kLlavaNextProcessor = R"({
  "aspect_ratio_setting": "anyres",
  "crop_size": {
    "height": 336,
    "width": 336
  },
  "do_center_crop": true,
  "do_convert_rgb": true,
  "do_normalize": true,
  "do_pad": true,
  "do_rescale": true,
  "do_resize": true,
  "image_grid_pinpoints": [
    [
      336,
      672
    ],
    [
      672,
      336
    ],
    [
      672,
      672
    ],
    [
      1008,
      336
    ],
    [
      336,
      1008
    ]
  ],
  "image_mean": [
    0.48145466,
    0.4578275,
    0.40821073
  ],
  "image_processor_type": "LlavaNextImageProcessor",
  "image_std": [
    0.26862954,
    0.26130258,
    0.27577711
  ],
  "processor_class": "LlavaNextProcessor",
  "resample": 3,
  "rescale_factor": 0.00392156862745098,
  "size": {
    "shortest_edge": 336
  }
}
)";

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
    {"llava-1.5-7b", Family::Llama, InitScheme::Hf, "llama2", kLlava15_7b, kClip336Processor},
    {"llava-v1.6-vicuna-7b", Family::Llama, InitScheme::Hf, "llama2", kLlavaNextVicuna7b, kLlavaNextProcessor},
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
    const auto& top = s.config;
    // LLaVA: the language model's sizes are text_config's, LlamaConfig's defaults where it has none.
    const bool llava = top.contains("text_config");
    const auto& c = llava ? top.at("text_config") : top;
    auto size = [&](const char* key, std::int64_t llama_default) {
      return llava ? c.value(key, llama_default) : c.at(key).get<std::int64_t>();
    };
    s.vocab_size = size("vocab_size", 32000);
    s.hidden_size = size("hidden_size", 4096);
    s.num_hidden_layers = size("num_hidden_layers", 32);
    s.num_attention_heads = size("num_attention_heads", 32);
    s.num_key_value_heads = c.value("num_key_value_heads", s.num_attention_heads);
    s.head_dim = c.value("head_dim", s.hidden_size / s.num_attention_heads);
    s.ffn_width = p.family == Family::Opt ? c.at("ffn_dim").get<std::int64_t>() : size("intermediate_size", 11008);
    s.max_position_embeddings = size("max_position_embeddings", 2048);
    const std::string model_type = c.at("model_type").get<std::string>();
    s.qkv_bias = model_type == "qwen2";
    s.qk_norm = model_type == "qwen3";
    s.tie_word_embeddings = top.value("tie_word_embeddings", p.family == Family::Opt);
    s.dtype = parse_torch_dtype(top.at("torch_dtype").get<std::string>());
    if (llava) {
      const auto& v = top.at("vision_config");  // CLIPVisionConfig's defaults where it has none
      LlavaSpec l;
      l.vision.hidden_size = v.value("hidden_size", std::int64_t{768});
      l.vision.num_hidden_layers = v.value("num_hidden_layers", std::int64_t{12});
      l.vision.num_attention_heads = v.value("num_attention_heads", std::int64_t{12});
      l.vision.intermediate_size = v.value("intermediate_size", std::int64_t{3072});
      l.vision.image_size = v.value("image_size", std::int64_t{224});
      l.vision.patch_size = v.value("patch_size", std::int64_t{32});
      l.vision.num_channels = v.value("num_channels", std::int64_t{3});
      l.image_newline = top.at("architectures").at(0) == "LlavaNextForConditionalGeneration";
      l.preprocessor_config = p.preprocessor;
      s.llava = std::move(l);
    }
    return s;
  }
  throw ConfigError(fmt::format("preset (expected one of {}, got {})", fmt::join(preset_names(), ", "), name));
}

}  // namespace latentllm::synth
