// Decoder-only transformer models on CPU: OPT and the Llama family (Llama, Qwen2, Qwen3, Mistral).
// Weights are float32 in memory (widened from F16/BF16 on load; a lazy model widens a decoder layer
// when asked), or kept as stored, F16/BF16 widened inside the kernels (see LoadOptions). Every linear module is a `Linear`, dense or low-rank factored, so
// compressed (latent) checkpoints run the same code.
//
// Glossary: T = tokens per window (seqlen), n_seq = windows in a batch, d = hidden_size,
// d_h = head_dim, H = attention heads, H_kv = key/value heads, V = vocab size, r = rank.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/io.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::quant {
struct PackedMatrix;  // src/quant/pack.hpp
}  // namespace latentllm::quant

namespace latentllm::model {

// The MLP activation σ. HF names: relu; gelu (exact, x·Φ(x)); gelu_new, gelu_pytorch_tanh, gelu_fast
// (the tanh approximation); silu, swish; quick_gelu (x·sigmoid(1.702·x), CLIP's vision MLP).
enum class Activation { Relu, Gelu, GeluTanh, Silu, QuickGelu };
// Parses an HF activation name; throws ConfigError "<origin>: activation (expected one of ..., got X)".
Activation parse_activation(const std::string& name, const std::string& origin);

// Rotary position embedding of the Llama family (HF rotate_half convention): the pair (j, j + d_h/2) of
// a head's q and k rotates by p·ω_j at position p, with ω_j = θ^(−2j/d_h) ("inv_freq") rescaled as
// rope_scaling says. config.json's rope_scaling.rope_type: absent or "default" (none), "linear",
// "llama3" (Llama-3.1 and later).
struct RopeSpec {
  enum class Scaling { None, Linear, Llama3 };
  double theta = 10000.0;                                // rope_theta
  Scaling scaling = Scaling::None;
  double factor = 1.0;                                   // linear and llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double original_max_position_embeddings = 8192;        // llama3
  // ω_j for pair j < d_h/2, in double (transformers' _compute_{default,linear,llama3}_rope_parameters).
  double inv_freq(int j, int head_dim) const;
};

// The attention geometry of a model's layers, as the compressor sees it (joint Q-K and V-O).
struct AttentionInfo {
  int hidden = 0;        // d
  int num_heads = 0;     // H
  int num_kv_heads = 0;  // H_kv (GQA: query head i reads kv head i / (H / H_kv))
  int head_dim = 0;      // d_h
  bool rope = false;     // q and k rotated after their projections (Llama family); OPT: learned positions
  RopeSpec rope_spec;    // when rope
  bool qk_norm = false;  // Qwen3: an RMSNorm over each head's d_h entries of q and k, before RoPE

  int kv_head(int i) const { return i / (num_heads / num_kv_heads); }
  // Throws ConfigError "<context>: invalid attention shape (...)" unless every size is positive, H is a
  // multiple of H_kv and d_h is even when rope.
  void validate(std::string_view context) const;
};

// config.json of a Hugging Face causal LM, as the architecture files parse it (src/model/opt.cpp,
// llama.cpp: each reads its keys with the transformers defaults of its config class). Field names copy
// the config.json keys verbatim; keys an architecture does not use keep their defaults. `raw` keeps
// the whole document (including our `latent` section in latent checkpoints).
struct ModelConfig {
  std::string model_type;       // "opt", "llama", "qwen2", "qwen3", "mistral"
  std::string architecture;     // architectures[0], e.g. "OPTForCausalLM"
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;             // d
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;     // = num_attention_heads when absent (MHA)
  std::int64_t head_dim = 0;                // = hidden_size / num_attention_heads when absent
  std::int64_t intermediate_size = 0;       // Llama family FFN width
  std::int64_t ffn_dim = 0;                 // OPT FFN width
  std::int64_t max_position_embeddings = 0;
  std::int64_t word_embed_proj_dim = 0;     // OPT; = hidden_size when absent
  double rms_norm_eps = 1e-6;               // Llama family
  RopeSpec rope;                            // Llama family: rope_theta and rope_scaling
  bool do_layer_norm_before = true;         // OPT
  bool enable_bias = true;                  // OPT
  bool layer_norm_elementwise_affine = true;  // OPT
  bool attention_bias = false;              // Llama, Qwen3: biases on q, k, v and o (config key, default false)
  // Which linears carry biases, resolved per architecture: OPT enable_bias (all of them); Llama
  // attention_bias (q, k, v, o) and mlp_bias; Qwen2 q, k, v always; Qwen3 attention_bias; Mistral none.
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;                    // also the config key (Llama)
  bool qk_norm = false;                     // Qwen3: per-head RMSNorm of q and k (q_norm, k_norm) before RoPE
  // Mistral: each query attends to the last sliding_window keys, itself included (HF's mask
  // kv > q − sliding_window); MistralConfig's 4096 when absent, 0 = no window (config null).
  std::int64_t sliding_window = 0;
  bool tie_word_embeddings = true;
  std::string hidden_act;                   // "relu" (OPT activation_function), "silu", ...
  std::optional<std::int64_t> bos_token_id, eos_token_id, pad_token_id;  // the first id of a list
  std::vector<std::int64_t> eos_token_ids;  // every eos_token_id of config.json (Llama-3.1: a list)
  std::string torch_dtype;                  // "torch_dtype" (or newer "dtype"); "" when absent
  // The language model of a multimodal checkpoint (its text_config, latentllm/multimodal.hpp): the
  // checkpoint's architectures[0], e.g. "LlavaForConditionalGeneration"; empty for a causal LM. Model::load
  // then maps the language model's HF tensor names onto the checkpoint's (docs/LMM.md).
  std::string multimodal_architecture;
  nlohmann::json raw;                       // the whole config.json (multimodal: with its other parts)

  // FFN width for either family.
  std::int64_t ffn_width() const { return ffn_dim > 0 ? ffn_dim : intermediate_size; }
};

// Parses and validates config.json (docs/ERRORS.md lists every message): architectures[0] (or
// model_type) selects the architecture, whose file parses the keys. Throws IoError if the file cannot
// be read, FormatError "<path>: not valid JSON (...)", and ConfigError "<path>: <key> (expected X, got
// Y)" for missing or mistyped keys, non-positive sizes, sizes that do not divide, unsupported
// rope_scaling types and unsupported architectures (the message lists the supported ones).
ModelConfig load_config(const std::filesystem::path& config_json);
// The same from a parsed document; `origin` prefixes every message (usually the file path).
ModelConfig parse_config(const nlohmann::json& doc, const std::string& origin);
// The supported architectures[0] names, in the order the error messages list them.
std::vector<std::string> supported_architectures();

// The role of a linear module in its layer. The compressor addresses modules by role, never by name.
enum class Role {
  Q, K, V,  // q_proj, k_proj, v_proj
  O,        // o_proj (OPT: out_proj)
  Gate,     // gate_proj (gated MLPs)
  Up,       // up_proj (OPT: fc1)
  Down,     // down_proj (OPT: fc2)
};
std::string_view role_name(Role r);  // "q", "k", "v", "o", "gate", "up", "down"

// Where calibration taps the inputs of linear modules. Modules that share an input share a site.
enum class Site {
  AttnIn,   // input of q_proj, k_proj, v_proj  [T, d]
  AttnOut,  // input of o_proj / out_proj (concatenated head outputs)  [T, H·d_h]
  MlpIn,    // input of fc1 (OPT) or gate_proj and up_proj (Llama)  [T, d]
  MlpMid,   // input of fc2 (OPT) or down_proj (Llama)  [T, ffn]
};

// The MLP of a model's layers, as the compressor sees it (joint up-down).
struct MlpInfo {
  bool gated = false;                    // down(σ(gate·x) ⊙ up·x) (Llama family), else down(σ(up·x)) (OPT)
  Activation act = Activation::Relu;
};

// One weight matrix [rows, cols] in the form the model keeps it, exactly one of:
//   float32, computed or loaded as such (the compressor's working form);
//   16-bit as an F16/BF16 checkpoint stores it (LoadOptions::weights = Stored), often a view of the mapped
//     file; the forward widens it inside its kernels;
//   quantized (docs/FORMAT.md "Quantized tensors": q-bit codes, F16 scales and zero points per group of
//     input columns), shared and immutable so that copies of a layer share it; the forward multiplies by it
//     without forming it (quant::gemv for few rows, quant::xwtq otherwise).
// Default: no matrix (float32, 0 × 0). Readers that need float32 ask for f32(), which names the form it
// found instead of handing an empty matrix on.
class Weight {
 public:
  using Packed = std::shared_ptr<const quant::PackedMatrix>;
  Weight() = default;
  Weight(MatrixF m) : v_(std::move(m)) {}   // NOLINT(google-explicit-constructor): a computed matrix
  template <class Derived>                  // an Eigen expression, evaluated
  Weight(const Eigen::MatrixBase<Derived>& e) : v_(MatrixF(e)) {}  // NOLINT(google-explicit-constructor)
  Weight(Matrix16 m) : v_(std::move(m)) {}  // NOLINT(google-explicit-constructor)
  Weight(Packed q);                         // NOLINT(google-explicit-constructor)

  std::int64_t rows() const;
  std::int64_t cols() const;
  std::int64_t size() const { return rows() * cols(); }  // values; 0 when empty
  bool empty() const { return size() == 0; }
  // Bytes in memory: 4 per float32 value, 2 per 16-bit value, quant::packed_bytes when quantized.
  std::int64_t bytes() const;
  // Bits per stored value and the quantization group (16 or 32 and 0 when not quantized).
  int bits() const;
  int group() const;

  bool is_f32() const { return std::holds_alternative<MatrixF>(v_); }
  // The float32 matrix. Error "<form> matrix [r, c] where float32 is expected" when it is kept 16-bit or
  // quantized (a solver given a model loaded with --weights stored).
  const MatrixF& f32() const;
  MatrixF& f32();
  const Matrix16* half() const { return std::get_if<Matrix16>(&v_); }  // null unless 16-bit
  const Packed& packed() const;                                       // null unless quantized
  // A float32 copy: the matrix itself, a 16-bit one widened (exact), a quantized one dequantized.
  MatrixF to_f32() const;

  // The same form (float32, the same 16-bit dtype, or quantized with the same bits and group), shape and
  // stored bits.
  friend bool operator==(const Weight& a, const Weight& b);

 private:
  std::variant<MatrixF, Matrix16, Packed> v_;
};

// y = x·Wᵀ + b, with W dense or factored as W ≈ B·A (paper eq. for the latent form); each matrix is a
// Weight in its own form (float32, 16-bit or quantized).
struct Linear {
  std::string name;             // HF module name, e.g. "model.decoder.layers.0.self_attn.q_proj"
  Role role = Role::Q;
  Site site = Site::AttnIn;     // the input it reads
  std::int64_t in = 0, out = 0;  // d, d'
  Weight weight;                // [out, in] when dense; empty when factored
  VectorF bias;                 // [out] or empty
  // Factored form: W ≈ B·A.
  Weight B;                     // [out, r]
  Weight A;                     // [r, in], or [r, in − r] when block_identity
  // Block identity (paper "junction matrix"): the dense A is [I_r | A] on the input columns taken in
  // the order perm (perm[0..r) form the identity block). The forward never multiplies by I.
  std::vector<std::int32_t> perm;  // [in] when block_identity, else empty
  bool block_identity = false;

  bool factored() const { return !B.empty(); }
  std::int64_t rank() const;
  // True when a matrix is kept in its 16-bit stored dtype.
  bool stored16() const { return weight.half() != nullptr || B.half() != nullptr; }
  // True when its weight or factors are stored quantized.
  bool quantized() const { return weight.packed() != nullptr || B.packed() != nullptr; }
  // Bits and group size of its quantized matrices (16 and 0 when not quantized).
  int bits() const;
  int group() const;
  // Stored weight + bias parameters.
  std::int64_t num_params() const;
  // Bytes the module's matrices, bias and permutation take in memory (16-bit ones at 2 per value,
  // quantized ones as quant::packed_bytes).
  std::int64_t bytes() const;
  // y: [n, out] = x: [n, in] · Wᵀ + b, through BLAS GEMMs.
  void forward(const MatrixF& x, MatrixF& y) const;
  // The dense [out, in] weight this module represents (B·A when factored). For tests and analysis.
  MatrixF dense_weight() const;
  // This module with its quantized matrices dequantized to float32 (the values prefill multiplies by),
  // in the same form otherwise (factored stays factored); a copy of it when it is not quantized.
  Linear dequantized() const;
};


// Receives the inputs of linear modules during layer_forward (calibration statistics).
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // x: [n_seq·T, width of the site]; called once per site per layer_forward call.
  virtual void on_input(int layer, Site site, const MatrixF& x) = 0;
  // True if nothing after `site` (in forward order) is needed from this layer: layer_forward then
  // returns right after reporting it and leaves h unspecified. For observers that only collect
  // inputs on a scratch copy of the hidden states (calibration taps).
  virtual bool done_after(Site /*site*/) const { return false; }
};

// Reports x to obs (if any); true if the layer forward should stop here (ForwardObserver::done_after).
inline bool report_input(ForwardObserver* obs, int layer, Site site, const MatrixF& x) {
  if (obs == nullptr) return false;
  obs->on_input(layer, site, x);
  return obs->done_after(site);
}

// What a KV cache keeps of one module's output (k_proj or v_proj) per position.
//   Dense: the keys after RoPE (and Qwen3's k_norm), or the values: H_kv·d_h floats.
//   Latent: the latent c = A·x of a factored module k = B·(A·x) + b (multi-head latent
//   attention as in DeepSeek-V2): r floats. Without RoPE the attention of a decoding step absorbs B
//   into the queries, score = (B_kᵀ·q_h)·c_k per head (the k bias adds q_h·b_k to every score of a
//   query, the same for every key, so the softmax drops it exactly), and into the output, B_v·(P·c_v)
//   + b_v per head (softmax weights sum to 1). With RoPE the rotation sits between B and the position,
//   so each step decompresses the cached latents, k = B_k·c_k + b_k, and rotates them at their
//   positions (exact, and slower than the dense cache; see docs/KV_CACHE.md).
enum class KvForm { Dense, Latent };
std::string_view kv_form_name(KvForm f);  // "dense", "latent"

// The choice of a KvCache per factored module (generate --kv-cache):
//   Dense: every module dense.
//   Latent: every factored k_proj / v_proj latent (whatever its rank and the RoPE cost).
//   Auto: latent where it is smaller (r < H_kv·d_h), not slower and exact without decompressing every
//   cached position per step (v_proj always, k_proj only without RoPE and per-head q/k norms: OPT).
//   "Not slower": per cached position the absorbed form does H·r multiply-adds on r·4 bytes, the dense
//   one H·d_h on H_kv·d_h·4; each costs max(bytes, 2·MACs / 4) (a CPU does ~4 FLOPs per byte it
//   reads from memory), so with many heads and large ranks (OPT-1.3B at 20 or 40 %: H = 32, r > 700)
//   the dense cache is chosen; --kv-cache latent forces the smaller one.
enum class KvCacheMode { Dense, Latent, Auto };
std::string_view kv_cache_mode_name(KvCacheMode m);  // "dense", "latent", "auto"
// Parses "dense", "latent", "auto"; ConfigError "--kv-cache (expected dense, latent or auto, got X)".
KvCacheMode parse_kv_cache_mode(std::string_view s);
// The form `mode` gives module l (k_proj when is_key, else v_proj; null: the layer has none, dense) of a
// model with attention a: the one rule of KvCache and of the ONNX export's past inputs.
KvForm kv_cache_form(const Linear* l, bool is_key, const AttentionInfo& a, KvCacheMode mode);

// What one decoder layer keeps of the positions it has seen, for incremental decoding: per position
// the keys and values (KvForm::Dense) or the latents of factored k_proj / v_proj (KvForm::Latent).
struct LayerKvCache {
  KvForm k_form = KvForm::Dense, v_form = KvForm::Dense;
  MatrixF k;  // [capacity, H_kv·d_h] keys after RoPE, or [capacity, r_k] c_k = A_k·x; rows [0, length) hold positions 0..length−1
  MatrixF v;  // [capacity, H_kv·d_h] values, or [capacity, r_v] c_v = A_v·x
  // Writes new_k: [n, k.cols()], new_v: [n, v.cols()] into rows [first, first + n); Error when they
  // leave the capacity or the widths differ.
  void store(int first, const MatrixF& new_k, const MatrixF& new_v);
  // Bytes per cached position.
  std::int64_t bytes_per_token() const { return static_cast<std::int64_t>(k.cols() + v.cols()) * 4; }
  // "k latent r=96, v dense 256" (per position: the form and floats of each).
  std::string describe() const;
};

// A decoder layer's forward stopped at a site, so that it can resume there: calibration runs each
// module of a layer once across its stages instead of re-running the layer from its input.
struct LayerState {
  // Where the forward stands: at `at`, whose input is x; or, when empty, at the layer's input
  // (resid = the layer's input hidden states). A layer run to its end leaves `at` empty and resid =
  // its output: the next layer's input state.
  std::optional<Site> at;
  // [n_seq·T, d] the residual stream: the layer's input until the attention block's residual add,
  // then the sum (OPT post-LN: normalized).
  MatrixF resid;
  MatrixF x;      // [n_seq·T, width of `at`] the input of site `at`; empty when `at` is
  // Incremental decoding (Model::forward_cached): when set, resid holds T new positions of one sequence
  // (n_seq = 1) that follow the `past` positions whose keys and values kv holds; the layer stores the
  // new ones in kv and attends to all past + T. Null: whole windows, positions from 0 in each.
  LayerKvCache* kv = nullptr;
  int past = 0;
  // Batched decoding (Model::forward_batch): when not empty, resid holds one new position of each of
  // kvs.size() sequences, row b the position pasts[b] of the sequence whose keys and values kvs[b]
  // holds (T = 1, kv unused). Every linear module runs once on the [B, d] rows; attention runs per
  // sequence against its own cache.
  std::vector<LayerKvCache*> kvs;
  std::vector<int> pasts;
};

// One decoder layer's modules, in the order of the architecture's module table (forward order).
struct DecoderLayer {
  std::vector<Linear> linears;
  // Norm parameters by HF tensor name relative to the layer: "self_attn_layer_norm.weight",
  // "self_attn_layer_norm.bias" (OPT), "input_layernorm.weight", "self_attn.q_norm.weight" (Qwen3), ...
  std::vector<std::pair<std::string, VectorF>> norms;

  // The module of a role (Error when the architecture has none; find: nullptr).
  Linear& linear(Role role);
  const Linear& linear(Role role) const;
  Linear* find(Role role);
  const Linear* find(Role role) const;
  // By the HF name relative to the layer, exactly as in the checkpoint: "self_attn.q_proj", "fc1", ...
  Linear& linear(std::string_view rel_name);
  const Linear& linear(std::string_view rel_name) const;
  // The norm parameter named rel_name ("input_layernorm.weight"); empty vector when absent.
  const VectorF& norm(std::string_view rel_name) const;
};

// How Model::load holds the weights.
struct LoadOptions {
  // false (eager): every weight is widened to float32 at load and the checkpoint is closed.
  // true (lazy): the checkpoint stays memory-mapped. Decoder layers are not widened: load_layer(i)
  // widens layer i (dense or factored modules), release_layer(i) frees it. The token embedding and
  // the LM head are never copied: embed() widens the rows it gathers, the head one vocabulary block
  // at a time. Norms, OPT's learned positions and project_in/out are widened at load (small). The
  // numbers are those of an eager model to the last bit (the widening is exact). Load checks every
  // tensor's name and shape as eager load does; finiteness is checked when values are widened.
  bool lazy = false;
  // Lazy: also read every decoder-layer weight once at load (widened one tensor at a time, then
  // dropped) so that a non-finite value fails at load, as an eager load does, not after hours of work
  // on the layers before it (compress sets it; about a second per GB stored).
  bool scan_finite = false;
  // Stored tensors that config.json's architecture does not use (more layers than num_hidden_layers, an
  // unknown name) are an error naming the first few: the config and the weights disagree, and running
  // the model would silently ignore them. Known-ignorable buffers some exporters save (rotary
  // `inv_freq`, GPT-style `attn.bias` / `attn.masked_bias` masks) are accepted always. true: accept any.
  bool allow_unused_tensors = false;
  // How the decoder layers' linear weights are held. F32: widened to float32. Stored: F16 and BF16
  // matrices stay as stored (16-bit Linear weights, Weight::half(): views of the mapped checkpoint, which the
  // model keeps open), the forward widens them inside its kernels; the embedding and the LM head are
  // then read mapped as a lazy model reads them. F32 tensors are widened either way. Same numbers as
  // F32 except decoding's GEMV (core/gemm16.hpp states the bound).
  enum class Weights { F32, Stored };
  Weights weights = Weights::F32;
  // Stored weights of an eager model: copy each 16-bit matrix, the embedding and the LM head into
  // anonymous memory advised for transparent huge pages (core::copy_to_huge_pages) instead of
  // viewing the mapped checkpoint, and drop the mapped pages. The same bytes and the same resident
  // size; decoding, which streams every weight per token, reads them faster (`generate` sets it).
  // Costs a copy at load. Ignored for lazy models and float32 weights.
  bool huge_pages = false;
  // Only tensors of at least this many bytes are copied; smaller ones stay views of the mapping (a
  // copy would hold a whole 2 MiB page each).
  std::int64_t huge_pages_min_bytes = std::int64_t{2} << 20;
};
// "f32", "stored"; parse: ConfigError "--weights (expected f32 or stored, got X)".
std::string_view weights_name(LoadOptions::Weights w);
LoadOptions::Weights parse_weights(std::string_view s);

// The bytes of a model's weights in memory (float32 once widened, or stored 16-bit with
// LoadOptions::Weights::Stored), known without loading them.
struct WeightFootprint {
  std::vector<std::int64_t> layers;  // [num_layers] each decoder layer's weights (perm indices included)
  std::int64_t tables = 0;  // token embedding + untied LM head: held by eager models only
  std::int64_t other = 0;   // the rest outside the layers (norms, positions, projections): held always
  // Checkpoint (stored) bytes of the largest decoder-layer tensor: its mapped pages are resident
  // while it is widened. And of the larger of the embedding and the head: a lazy model reads it
  // (mapped) in every embed() or head pass, and drops its pages after.
  std::int64_t largest_layer_tensor_stored = 0;
  std::int64_t largest_table_stored = 0;
  // Stored weights: float32 bytes of the largest 16-bit matrices of one module, which a product over
  // many rows (a prompt, a batch of windows) widens whole for its duration; 0 for float32 weights.
  std::int64_t largest_widened = 0;
  // The weights' form (LoadOptions::weights).
  LoadOptions::Weights weights = LoadOptions::Weights::F32;
  std::int64_t largest_layer() const;
  std::int64_t all_layers() const;
};

class KvCache;
class WeightLoader;  // src/model/weights.hpp
class WeightTable;  // the token embedding / LM head (src/model/weight_table.hpp)
struct WeightSource;  // the open checkpoint of a lazy model (src/model/weights.hpp)

class Model {
 public:
  virtual ~Model();

  // Loads config.json + safetensors (+ the `latent` section of a latent checkpoint, see docs/FORMAT.md),
  // eagerly unless opt.lazy. Throws ConfigError / FormatError naming the file or tensor on bad input,
  // NumericError for a non-finite weight (lazy: when it is widened).
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, const LoadOptions& opt = {});

  // ---- lazy layers (LoadOptions::lazy) ----
  bool lazy() const { return source_ != nullptr; }
  // True when layer i's weights are in memory (always for an eager model).
  bool layer_loaded(int i) const { return loaded_.at(static_cast<std::size_t>(i)) != 0; }
  // Widens layer i from the mapped checkpoint (its pages are dropped afterwards); nothing when it is
  // loaded. Throws as Model::load would for that layer's tensors (NumericError for a non-finite value).
  void load_layer(int i);
  // Frees layer i's weights; changes made to them (a compressed module) are lost, and a later
  // load_layer(i) reads the checkpoint's weights again. Lazy models only: Error "<dir>:
  // release_layer(i) on an eager model (expected a model loaded with LoadOptions::lazy, ...)".
  void release_layer(int i);
  // Bytes of the weights (float32, or as stored with LoadOptions::Weights::Stored), per layer and
  // outside the layers.
  const WeightFootprint& footprint() const { return footprint_; }

  const ModelConfig& config() const { return config_; }
  // The attention geometry and the MLP of the layers, for the compressor.
  const AttentionInfo& attention() const { return attention_; }
  const MlpInfo& mlp() const { return mlp_; }
  const std::filesystem::path& dir() const { return dir_; }
  // Where the checkpoint stores the HF names this model asks for: a multimodal checkpoint keeps its
  // language model under a prefix ("model.layers.0..." is "language_model.model.layers.0..."); a plain
  // causal LM stores them as they are. stored_name / module_name map one way and back.
  std::string stored_name(const std::string& name) const;
  std::string module_name(const std::string& stored) const;
  int num_layers() const { return static_cast<int>(layers_.size()); }
  // Decoder layer i. Throws Error "<dir>: layer i is not loaded (...)" when a lazy model has not
  // loaded it (the forward asks for it the same way, so running an unloaded layer throws this too).
  DecoderLayer& layer(int i);
  const DecoderLayer& layer(int i) const;
  // Layer i's modules and norms as the architecture declares them (HF names, roles, sites, in/out),
  // loaded or not: layer(i) when loaded, otherwise a skeleton whose weights are empty.
  const DecoderLayer& layer_spec(int i) const;
  // Architecture family name for inspect: "opt" or "llama" (the compressor never branches on it).
  virtual std::string_view family() const = 0;

  // ids: [n_seq·T] (n_seq windows of T tokens, positions restart at 0 in each) -> h: [n_seq·T, d].
  virtual void embed(std::span<const std::int32_t> ids, int T, MatrixF& h) const = 0;
  // Applies decoder layer i in place to h: [n_seq·T, d]; causal attention within each window.
  void layer_forward(int i, MatrixF& h, int T, ForwardObserver* obs = nullptr) const;
  // Runs decoder layer i from where s stands to the layer's end, or until obs is done_after a site
  // (then s.at = that site, s.x = its input). Sites at or before the starting s.at are not reported
  // again; the sites' inputs are bit-identical to those of an uninterrupted layer_forward.
  virtual void layer_resume(int i, LayerState& s, int T, ForwardObserver* obs = nullptr) const = 0;
  // FLOPs of the attention GEMMs (Q·Kᵀ and ·V over the block-causal region the forward computes, 2
  // per multiply-add) of one layer over n_tok tokens in windows of T.
  virtual double attention_flops(int T, std::int64_t n_tok) const = 0;
  // Final norm (+ OPT project_out) and LM head: h: [n, d] -> logits: [n, V].
  virtual void head(const MatrixF& h, MatrixF& logits) const;

  // ---- incremental decoding (KV cache) ----
  // ids: [n] tokens at the consecutive positions first..first+n−1 of one sequence -> h: [n, d] (OPT
  // adds the learned positions of those positions). ConfigError when they pass max_position_embeddings
  // (OPT's position table).
  virtual void embed_from(std::span<const std::int32_t> ids, int first, MatrixF& h) const = 0;
  // Runs ids: [n], the next n positions of the sequence whose first cache.length() positions `cache`
  // holds, through embed, every layer (the same layer code as a full forward, attending to the cached
  // keys and values) and the head; appends their keys and values to the cache. logits: [n, V] of
  // every new position, or [1, V] of the last when last_only. Prefill is one call with the prompt,
  // decoding one call per token. ConfigError "<dir>: positions <a>..<b> (expected at most the
  // cache's capacity <c> <= max_position_embeddings <m>)" when they do not fit.
  void forward_cached(std::span<const std::int32_t> ids, KvCache& cache, MatrixF& logits, bool last_only = false) const;
  // One decoding step of B sequences at once (continuous batching): ids[b] is the next token of the
  // sequence whose first caches[b]->length() positions caches[b] holds -> logits: [B, V], row b that
  // token's; appends each token's keys and values to its cache. Each linear module runs once on the
  // [B, d] rows (its weights read once from memory for the batch), attention per sequence. Under
  // core::RowwiseProducts, so row b is bit-identical to forward_cached({ids[b]}, *caches[b], ...)
  // alone, whatever else is in the batch. ConfigError as forward_cached for a full cache, and
  // "<dir>: batch of <B> ids for <C> caches (expected one id per cache, at least one)".
  void forward_batch(std::span<const std::int32_t> ids, std::span<KvCache* const> caches, MatrixF& logits) const;

  // Sum of next-token NLL (natural log) over the T−1 predicted tokens of each window, in double.
  // ids: [n_seq·T]. Runs embed, all layers and the head; the head is fused with the log-softmax
  // (row blocks × vocabulary blocks, an online log-sum-exp in double), so the [n, V] logits are
  // never materialized.
  double windows_nll(std::span<const std::int32_t> ids, int T) const;
  // The head part of windows_nll: h: [n_seq·T, d], the hidden states after the last layer, of the
  // windows ids: [n_seq·T] -> their summed NLL. windows_nll(ids, T) = embed, every layer_forward, and
  // head_nll, so running the layers in another order over the windows (layer by layer, eval) and
  // finishing with head_nll gives the same bits. Throws NumericError "<dir>: non-finite NLL".
  double head_nll(const MatrixF& h, std::span<const std::int32_t> ids, int T) const;

  // Parameters outside the decoder layers per module type ("embed", "norm", "lm_head"; eval::param_breakdown
  // counts the whole model).
  virtual std::vector<std::pair<std::string, std::int64_t>> non_layer_params() const = 0;
  // The LM head as the forward reads it, [V, p]: the token embedding's table when tied, packed codes when
  // quantized (compress --head-bits; src/model/weight_table.hpp).
  const WeightTable& head_weight() const { return lm_head(); }

 protected:
  ModelConfig config_;
  AttentionInfo attention_;
  MlpInfo mlp_;
  std::filesystem::path dir_;
  std::vector<std::pair<std::string, std::string>> stored_prefixes_;  // (asked, stored) prefix pairs
  // The LM head's input: final norm (+ OPT project_out).  h: [n, d] -> x: [n, p].
  virtual void final_hidden(const MatrixF& h, MatrixF& x) const = 0;
  // The LM head weight [V, p]: lm_head.weight, or the token embedding when tied.
  virtual const WeightTable& lm_head() const = 0;
  // Builds decoder layer i from w (the architecture's tensor names and module table).
  virtual DecoderLayer build_layer(WeightLoader& w, int i) const = 0;
  // For a model whose layers are built elsewhere (a vision tower's encoder layers seen as a layer stack
  // by the compressor, model::VisionLayers): takes them as an eager model's loaded layers, and gives
  // them back.
  void adopt_layers(std::vector<DecoderLayer> layers);
  std::vector<DecoderLayer> take_layers();

 private:
  // After the architecture's constructor: loads every layer (eager) or checks them and keeps the
  // source (lazy); fills footprint_.
  void init_layers(std::shared_ptr<WeightSource> source, const LoadOptions& opt);

  std::vector<DecoderLayer> layers_;
  std::vector<DecoderLayer> specs_;        // lazy models: the layers' skeletons (layer_spec)
  std::vector<char> loaded_;               // [num_layers] layer_loaded
  std::shared_ptr<WeightSource> source_;   // lazy models only
  std::shared_ptr<WeightSource> mapped_;   // eager models with stored weights: the mapping their views read
  WeightFootprint footprint_;
};

// The KV cache of one sequence: one LayerKvCache per decoder layer, room for `capacity` positions.
class KvCache {
 public:
  // Allocates capacity positions for every layer of m (its attention geometry), each k_proj / v_proj
  // in the form `mode` chooses for it (KvCacheMode; m's layers must be loaded to see their ranks: an
  // unloaded layer of a lazy model gets a dense cache). ConfigError "<dir>: KV cache of <c> positions
  // (expected 1..max_position_embeddings = <m>)" otherwise, and ConfigError "<dir>: --kv-cache latent
  // (expected a latent checkpoint with factored k_proj or v_proj, ...)" when `mode` is Latent and no
  // loaded layer has a factored k_proj or v_proj.
  KvCache(const Model& m, int capacity, KvCacheMode mode = KvCacheMode::Dense);
  int length() const { return length_; }      // positions cached
  int capacity() const { return capacity_; }
  LayerKvCache& layer(int i) { return layers_.at(static_cast<std::size_t>(i)); }
  const LayerKvCache& layer(int i) const { return layers_.at(static_cast<std::size_t>(i)); }
  // Bytes one position takes over all layers: 4 per float, H_kv·d_h floats for a dense module and r
  // for a latent one (a dense cache: 2·L·H_kv·d_h·4).
  std::int64_t bytes_per_token() const;
  // One line per layer: "layer <i>: " + LayerKvCache::describe().
  std::vector<std::string> describe() const;
  // Bytes of the cached positions (length() · bytes_per_token()), and of the whole allocation.
  std::int64_t bytes() const { return length_ * bytes_per_token(); }
  std::int64_t allocated_bytes() const { return capacity_ * bytes_per_token(); }
  // Marks n more positions as cached (Model::forward_cached, after every layer stored them).
  void advance(int n) { length_ += n; }
  // Forgets every position (the allocation stays).
  void clear() { length_ = 0; }

 private:
  void check_latent_requested(const Model& m, KvCacheMode mode) const;
  std::vector<LayerKvCache> layers_;
  int capacity_ = 0;
  int length_ = 0;
};

// Wall-clock breakdown of forward passes, for the throughput benchmark (bench/). Off by default;
// when on, each timed part adds its wall-clock seconds, and the GEMM parts their FLOPs (2 per
// multiply-add). Only calls from outside the forward's parallel regions are timed.
struct ForwardProfile {
  double linear_s = 0, linear_flops = 0;        // Linear::forward (decoder layers, OPT project_in/out)
  double head_s = 0, head_flops = 0;            // LM head GEMM (in windows_nll: its share of the fused head)
  double attention_s = 0, attention_flops = 0;  // Q·Kᵀ, causal softmax, ·V (flops: the GEMMs)
  double nll_s = 0;                             // log-sum-exp and NLL of the head's logits (fused head's share)
  double other_s = 0;                           // norms, RoPE, activations, embeddings, residual adds
};
void set_profiling(bool enabled);
bool profiling_enabled();
ForwardProfile forward_profile();
void reset_forward_profile();

}  // namespace latentllm::model
