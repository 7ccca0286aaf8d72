// latentllm-synth: random-weight checkpoints with the exact tensor names, shapes, config.json,
// tokenizer files and sharding of real Hugging Face models (OPT-125m/1.3b/6.7b, Llama-2-7b,
// Llama-3-8b, Qwen2.5-7b, LLaVA-1.5-7b and LLaVA-NeXT vicuna-7b) and of two tiny presets for golden
// tests (llama3-tiny, qwen3-tiny), for
// measuring the TIME AND MEMORY of latentllm at scale. The weights are random: a generated model says
// nothing about quality (perplexity, accuracy, compression loss) and must never be used for it.
//
// Deterministic from a seed on any platform: every value comes from this counter-based RNG, which
// scripts/gen_arch_golden.py replicates bit for bit (all integer arithmetic mod 2^64):
//
//   mix64(z)     = the splitmix64 finalizer: z ^= z >> 30; z *= 0xbf58476d1ce4e5b9;
//                  z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31
//   fnv1a64(s)   = h = 0xcbf29ce484222325; for each byte b of s (UTF-8): h ^= b; h *= 0x100000001b3
//   key          = mix64(seed XOR fnv1a64(tensor name))
//   element i    (0-based, row-major in the tensor's shape):
//                  z = mix64(key + (i + 1) * 0x9e3779b97f4a7c15)
//                  u = float32(z >> 40) * 2^-24          (exact: 24 bits, u in [0, 1))
//                  t = 2u - 1                              (exact in float32, t in [-1, 1))
//                  value = center + scale * t              (float32: the product rounded, then the sum;
//                                                           never fused into an FMA)
//   stored as the checkpoint dtype: F32 as is, F16/BF16 rounded to nearest even.
//
// center and scale are float32 values (the double formulas below rounded once), chosen per tensor
// kind and init scheme:
//
//   kind (HF name)                               | Hf scheme (real presets)  | Tiny scheme (golden presets)
//   embedding (embed_tokens, embed_positions)    | 0 ± 0.02·√3               | 0 ± √3
//   linear weight [out, in] (*_proj, fc1/2, lm_head)| 0 ± 0.02·√3            | 0 ± √(3 / in)
//   (patch_embedding [d_v, C, p, p]: in = C·p·p)   |                           |
//   linear bias                                  | 0 ± 0.02·√3               | 0 ± 0.1·√3
//   norm weight (layer norms, RMSNorms, q/k_norm)| 1 ± 0.1                   | 1 ± 0.2
//   norm bias (OPT LayerNorm)                    | 0 ± 0.02·√3               | 0 ± 0.1·√3
//
// ("c ± s": center c, scale s: uniform on [c − s, c + s).) The Hf scheme has HF's initializer_range
// σ = 0.02 (a uniform of half-width 0.02·√3), so activations stay finite through 32 layers; the Tiny
// scheme gives O(1) activations (σ = 1/√in per weight) and non-trivial logits for golden tests.
//
// (class_embedding, position_embedding and NeXT's image_newline are embeddings.)
//
// Glossary: V = vocab_size, d = hidden_size, d_h = head_dim, n_h / n_kv = attention / key-value heads,
// f = FFN width (OPT ffn_dim, Llama intermediate_size); vision tower: d_v, f_v, L_v, S = image_size,
// p = patch_size, C = num_channels, P = (S / p)² + 1 positions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/tensor.hpp"

namespace latentllm::synth {

// Tensor naming and layout: the OPT decoder, or the Llama layout (Llama, Qwen2, Qwen3).
enum class Family { Opt, Llama };
// Value ranges per tensor kind (header table).
enum class InitScheme { Hf, Tiny };

// The CLIP vision tower of a LLaVA preset (CLIPVisionConfig's names). The whole tower is written:
// num_hidden_layers of SynthSpec (--layers) counts the language model's layers only.
struct VisionSpec {
  std::int64_t hidden_size = 0;          // d_v
  std::int64_t num_hidden_layers = 0;    // L_v
  std::int64_t num_attention_heads = 0;
  std::int64_t intermediate_size = 0;    // f_v
  std::int64_t image_size = 0;           // S
  std::int64_t patch_size = 0;           // p
  std::int64_t num_channels = 3;         // C
};

// LLaVA presets (LlavaForConditionalGeneration, LlavaNextForConditionalGeneration) in the hub's key
// layout: vision_tower.vision_model.*, multi_modal_projector.linear_{1,2} (with biases, d_v -> d -> d),
// image_newline [d] (NeXT), and the Llama-layout language model under language_model.*. The size fields
// of SynthSpec are text_config's.
struct LlavaSpec {
  VisionSpec vision;
  bool image_newline = false;            // LLaVA-NeXT
  std::string preprocessor_config;       // preprocessor_config.json, written as is
};

// What to generate. A preset fills every field from the real model; tests may edit any of them (small
// dims, fewer layers): config_json() writes the fields back into `config`.
struct SynthSpec {
  std::string name;                        // preset name, e.g. "llama-3-8b"
  Family family = Family::Llama;
  std::int64_t vocab_size = 0;             // V
  std::int64_t hidden_size = 0;            // d
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;    // n_h
  std::int64_t num_key_value_heads = 0;    // n_kv (OPT: = n_h)
  std::int64_t head_dim = 0;               // d_h (OPT: d / n_h)
  std::int64_t ffn_width = 0;              // f
  std::int64_t max_position_embeddings = 0;
  bool qkv_bias = false;                   // q/k/v_proj.bias (Qwen2)
  bool qk_norm = false;                    // self_attn.q_norm / k_norm [d_h] (Qwen3)
  bool tie_word_embeddings = true;         // false: lm_head.weight [V, d] is stored
  DType dtype = DType::BF16;               // storage type of every tensor (config torch_dtype)
  InitScheme init = InitScheme::Hf;
  std::string tokenizer;                   // folder under the tokenizers dir: opt, llama2, llama3, qwen3
  nlohmann::ordered_json config;           // the preset's real config.json, key order kept
  std::optional<LlavaSpec> llava;          // set for the LLaVA presets
};

// Names of the presets, in display order.
std::vector<std::string> preset_names();
// The preset `name`; throws ConfigError "preset (expected one of <names>, got <name>)".
SynthSpec preset(std::string_view name);

// Checks the sizes (positive, n_h a multiple of n_kv, OPT: d = n_h·d_h and n_kv = n_h; LLaVA: the vision
// sizes positive, d_v a multiple of its heads, S a multiple of p); throws
// ConfigError "synth <name>: <field> (expected X, got Y)".
void validate(const SynthSpec& spec);

// One tensor of the checkpoint.
struct TensorPlan {
  std::string name;                 // HF name
  std::vector<std::int64_t> shape;  // PyTorch order
  float center = 0, scale = 0;      // value = center + scale·(2u − 1)
  std::uint64_t numel() const;
};

// Every tensor in state-dict order (the order HF's save_pretrained shards in): OPT: embed_tokens,
// embed_positions [max_pos + 2, d], final_layer_norm, then per layer k, v, q, out_proj, self_attn_layer_norm,
// fc1, fc2, final_layer_norm (weights before biases); Llama: embed_tokens, per layer q, k, v, o_proj
// (+ q/k/v biases, + q_norm, k_norm), gate, up, down_proj, input_layernorm, post_attention_layernorm;
// then model.norm and lm_head (untied only); LLaVA: image_newline (NeXT), the vision tower
// (embeddings.class_embedding, patch_embedding, position_embedding, pre_layrnorm, per layer k, v, q,
// out_proj, layer_norm1, fc1, fc2, layer_norm2, post_layernorm), the projector, then the language
// model's plan under "language_model.". Calls validate().
std::vector<TensorPlan> tensor_plan(const SynthSpec& spec);
// Σ numel over tensor_plan (a tied head counted once, as stored).
std::int64_t num_params(const SynthSpec& spec);
// config.json: spec.config with the size fields, architectures/model_type untouched, torch_dtype,
// tie_word_embeddings (when present or not the family default) and head_dim (when present or ≠ d / n_h)
// set from spec. LLaVA: the size fields go into text_config and vision_config, each written when the
// published file has it or when it differs from what the published file implies (transformers leaves a
// nested config's default values out), so an unedited preset gives the published file.
nlohmann::ordered_json config_json(const SynthSpec& spec);
// "float32", "float16", "bfloat16".
std::string_view torch_dtype_name(DType dtype);

// Files of a checkpoint: tensors (indexes into the plan) in plan order, filled in plan order; a new
// shard starts when the next tensor would take the current one beyond max_shard_bytes (a tensor
// larger than the limit gets a shard of its own). One shard is "model.safetensors", several are
// "model-0000k-of-0000n.safetensors" (with model.safetensors.index.json).
struct Shard {
  std::string file;
  std::vector<std::size_t> tensors;
  std::uint64_t data_bytes = 0;  // Σ tensor bytes (no header)
};
std::vector<Shard> plan_shards(const std::vector<TensorPlan>& plan, DType dtype, std::uint64_t max_shard_bytes);

// ---- the RNG (header comment) ----
std::uint64_t mix64(std::uint64_t z);
std::uint64_t fnv1a64(std::string_view bytes);
std::uint64_t tensor_key(std::uint64_t seed, std::string_view name);
// Element i of the tensor with this key.
float synth_value(std::uint64_t key, std::uint64_t i, float center, float scale);
// out[j] = synth_value(key, first + j, center, scale).
void fill_values(std::uint64_t key, std::uint64_t first, float center, float scale, std::span<float> out);

// ---- writing ----
struct Progress {
  std::size_t tensors_done = 0, num_tensors = 0;
  std::string tensor;                        // the tensor just completed
  std::uint64_t bytes_done = 0, bytes_total = 0;  // safetensors bytes (headers included)
  double seconds = 0;                        // since write_checkpoint started
};

struct WriteOptions {
  std::uint64_t seed = 0;
  std::uint64_t max_shard_bytes = 5'000'000'000;  // save_pretrained's default "5GB"
  std::filesystem::path tokenizers_dir;           // holds <spec.tokenizer>/...; empty: no tokenizer files
  bool overwrite = false;                         // replace an existing output directory
  std::size_t chunk_values = std::size_t{1} << 20;  // values generated per append (the memory held)
  std::function<void(const Progress&)> on_progress;  // after every tensor
};

struct WriteResult {
  std::int64_t num_params = 0;
  std::size_t num_tensors = 0, num_shards = 0;
  std::uint64_t total_size = 0;   // Σ tensor bytes (the index's metadata.total_size)
  std::uint64_t file_bytes = 0;   // Σ safetensors file sizes
  double seconds = 0;             // the whole write, fsyncs and renames included
};

// Writes the checkpoint directory `out`: config.json, the safetensors shard(s) (+ index), the preset's
// tokenizer files (copied from tokenizers_dir/<tokenizer>, plus tokenizer_config.json and
// special_tokens_map.json where the source folder has none; LLaVA: llava-hf's, with <image> and <pad>
// added after Llama-2's pieces), LLaVA's preprocessor_config.json and generation_config.json, and
// synth.json (what generated it). Atomic:
// everything goes into the sibling `<out>.partial-<pid>`, fsynced, then renamed to `out`. Memory: one
// chunk of chunk_values floats and the safetensors writer's buffer. Throws ConfigError for an invalid
// spec, IoError when `out` exists (without overwrite) or cannot be written, or a tokenizer file is missing.
WriteResult write_checkpoint(const SynthSpec& spec, const std::filesystem::path& out, const WriteOptions& opt);

}  // namespace latentllm::synth
