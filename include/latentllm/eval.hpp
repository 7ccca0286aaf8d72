// Evaluation: perplexity by the GPTQ / SparseGPT protocol, and the accounting of parameters, MACs and
// KV-cache sizes.
//
// Perplexity: tokenize the whole evaluation string once (BOS once at the start, as the model's
// tokenizer adds it), cut it into nsamples = numel // seqlen non-overlapping windows (tail dropped; C4
// first truncated to 256·seqlen tokens), and report ppl = exp(mean NLL of the seqlen − 1 predicted
// tokens of every window).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <span>
#include <vector>

#include "latentllm/dataset.hpp"
#include "latentllm/model.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::eval {

struct PplOptions {
  io::Dataset dataset = io::Dataset::WikiText2;
  std::filesystem::path data;  // wiki.test.raw, ptb.valid.txt, a C4 JSON-lines file, or any text
  int seqlen = 0;              // T; 0 = min(2048, max_position_embeddings)
  int max_windows = 0;         // evaluate only the first K windows; 0 = all
  int batch = 0;               // windows per forward pass; 0 = about 4096 tokens' worth
};

struct PplProgress {
  // Under K ranks (dist) windows_done is the whole run's estimate from this rank's share (its fraction
  // done, times windows_total), windows_total when the share is done; with one rank it is exact.
  std::int64_t windows_done = 0, windows_total = 0;
  int layers_done = 0, layers_total = 0;  // layer-major evaluation (lazy model); 0 otherwise
  double seconds = 0;       // since the first window started
  double tokens_per_s = 0;  // window tokens (T per window) per second
  double eta_s = 0;
};
using PplProgressFn = std::function<void(const PplProgress&)>;

struct PplResult {
  double ppl = 0;
  double mean_nll = 0;            // nats per predicted token
  std::int64_t tokens = 0;        // tokens of the (truncated) evaluation sequence
  std::int64_t windows = 0;       // windows evaluated
  std::int64_t predicted = 0;     // windows · (T − 1)
  int seqlen = 0;
  double seconds = 0;             // forward passes only (tokenization excluded)
  double tokens_per_s = 0;        // windows · T / seconds
  double tokenize_seconds = 0;
};

// min(2048, max_position_embeddings).
int default_seqlen(const model::ModelConfig& config);

// The protocol's token sequence of a dataset file: its evaluation string (io::build_eval_text)
// encoded once with special tokens, C4 truncated to 256·seqlen tokens.
std::vector<std::int32_t> eval_ids(const io::Tokenizer& tok, io::Dataset dataset, const std::filesystem::path& file,
                                   int seqlen);

// Perplexity of `ids` cut into windows of `seqlen`, `batch` windows per forward pass. `origin` names
// the data in errors: FormatError "<origin>: dataset too short for one window (expected >= T tokens,
// got N)".
//
// An eager model is evaluated window-major: each batch runs through embed, every layer and the head
// (Model::windows_nll). A lazy model (model::LoadOptions) is evaluated layer-major: every batch is
// embedded, then for each layer i: load_layer(i), every batch through it, release_layer(i) (unless the
// caller had loaded it); then the head per batch. It holds the hidden states of all windows
// ([windows·T, d] float32) and one layer's weights instead of the whole model. The batches and their
// arithmetic are the same in both orders, so the perplexity is the same to the last bit.
PplResult perplexity_ids(model::Model& m, std::span<const std::int32_t> ids, int seqlen, int max_windows, int batch,
                         const std::string& origin, const PplProgressFn& progress = {});

// eval_ids + perplexity_ids with the options' defaults resolved.
PplResult perplexity(model::Model& m, const io::Tokenizer& tok, const PplOptions& opt,
                     const PplProgressFn& progress = {});

// Windows perplexity_ids evaluates: ids / seqlen, at most max_windows (> 0).
std::int64_t eval_windows(std::int64_t n_ids, int seqlen, int max_windows);
// Windows per forward pass: batch, or about 4096 tokens' worth when batch is 0.
int eval_batch(int batch, int seqlen);

// ---- Memory of an evaluation (latentllm ppl --max-memory) ------------------------------------------
// Estimated peak bytes of perplexity_ids in each order, item by item (core::MemoryPlan), from the
// model's WeightFootprint (known without loading its layers) and the evaluation's shape:
//   eager:       every weight in float32; one batch's activations; the head's per-thread blocks; the
//                mapped pages of the largest tensor while it is widened at load; the runtime.
//   layer-major: the largest layer in float32; the weights outside the layers that a lazy model
//                widens (norms, positions); the hidden states of all windows; one batch's
//                activations; the head's per-thread blocks, widened blocks included; the mapped
//                pages of the embedding or the head (read per batch) and of one layer tensor; the
//                runtime.
// With stored weights (model::LoadOptions::Weights::Stored, the footprint's `weights`) the weights
// count at their stored bytes (F16/BF16: 2 per value; embedding and head mapped), plus the largest
// module widened to float32 for the duration of a product, and no separate mapped pages at load.
// Activations of a batch of n tokens: n·(2d + max(2·H·d_h + 2·H_kv·d_h, 2·ffn, d + p)) floats (the
// residual stream, a block's input and the largest pair of intermediates). The runtime is a fixed
// 256 MiB (program, BLAS buffers, tokenizer) plus the token ids.
struct PplMemory {
  core::MemoryPlan eager, layer_major;
};
// Floats per token of a batch's activations at a layer's peak (the formula above).
std::int64_t activation_floats_per_token(const model::ModelConfig& c);
PplMemory plan_perplexity_memory(const model::Model& m, std::int64_t n_ids, std::int64_t windows, int seqlen,
                                 int batch, int threads, std::int64_t budget);
// Running a model in memory for generation or a benchmark (generate, eval --task scienceqa): its weights
// widened to float32 (every layer, the embedding and the head), a dense KV cache of `positions` positions
// in every layer (an upper bound: latent caches are smaller), one prompt of `positions` tokens'
// activations, and the runtime. Callers add their own items (a LLaVA's vision tower and projector).
// m: the model loaded lazily (its footprint; nothing is widened).
core::MemoryPlan plan_inference_memory(const model::Model& m, std::int64_t positions, std::int64_t budget);
// The most windows (<= windows) whose layer-major plan fits the budget; 0 when not even one does.
std::int64_t max_layer_major_windows(const model::Model& m, std::int64_t n_ids, std::int64_t windows, int seqlen,
                                     int batch, int threads, std::int64_t budget);

// ---- Accounting --------------------------------------------------------------------------------
// A linear module y = W·x + b with W: [d', d] stores d'·d weights dense, and r·(d' + d) factored as
// B·A, minus r² with the block-identity junction (A holds I_r on r pivoted columns). Biases are d'
// either way and counted separately. MACs follow calflops (the Linear's weights per token, bias
// ignored); FLOPs = 2·MACs.
std::int64_t dense_params(std::int64_t out, std::int64_t in);
std::int64_t factored_params(std::int64_t out, std::int64_t in, std::int64_t rank, bool block_identity);
std::int64_t dense_macs(std::int64_t out, std::int64_t in, std::int64_t n_tok);
std::int64_t factored_macs(std::int64_t out, std::int64_t in, std::int64_t rank, bool block_identity,
                           std::int64_t n_tok);
inline std::int64_t flops_of_macs(std::int64_t macs) { return 2 * macs; }
// A sparse module (compress --method sparse, wanda, sparsegpt: W with d'·d − nnz zeros) stored as its nnz
// values of value_bytes each plus their positions, the cheaper of a d'·d-bit mask and ⌈log₂(d'·d)⌉ bits per
// value (the paper's appendix "Sparse Matrix"), in whole bytes. The checkpoint keeps such modules dense:
// this is the size a values + positions format would have.
std::int64_t sparse_storage_bytes(std::int64_t nnz, std::int64_t out, std::int64_t in, int value_bytes);
// A low rank + sparse module (compress --method lowrank-sparse: B·A + D, rank r, D with nnz non-zeros): D as
// sparse_storage_bytes counts it plus the r·(d' + d) factor values of value_bytes each. At r = 0 it is
// sparse_storage_bytes. The checkpoint keeps B·A + D summed dense: this is the size of the packed form.
std::int64_t lowrank_sparse_storage_bytes(std::int64_t nnz, std::int64_t rank, std::int64_t out, std::int64_t in,
                                          int value_bytes);
// A lowrank-sparse module's record in a checkpoint's latent.sparse_parts, {"rank": r, "nonzeros": k}, read
// and checked against its shape [out, in]: FormatError "<context>: <key> (expected an integer in [0, <max>],
// got <value>)" (a missing key reads as 0).
struct SparsePart {
  std::int64_t rank = 0, nonzeros = 0;
};
SparsePart read_sparse_part(const nlohmann::json& entry, std::int64_t out, std::int64_t in, const std::string& context);
// The MACs of a module as stored (dense or factored) for n_tok tokens.
std::int64_t linear_macs(const model::Linear& l, std::int64_t n_tok);
// The compressed modules (factored or quantized) of a model as stored: their original weights d'·d, their
// stored bytes (factors or codes with scales and zero points, biases at value_bytes each; no permutation)
// and bits per original weight, 8·bytes / dense_params. compress --json and inspect --json report it.
struct CompressedModules {
  std::int64_t modules = 0, dense_params = 0, bytes = 0;
  bool quantized = false;  // any module holds packed codes
  double bits_per_weight() const { return dense_params > 0 ? 8.0 * static_cast<double>(bytes) / static_cast<double>(dense_params) : 0.0; }
};
// One module's stored bytes as CompressedModules counts them (value_bytes: a float matrix's stored type).
std::int64_t compressed_module_bytes(const model::Linear& l, std::int64_t value_bytes);
// A lazy model's layers are loaded one at a time and released again (those it had loaded stay).
CompressedModules compressed_modules(model::Model& m, std::int64_t value_bytes);
// The LM head when stored quantized (compress --head-bits): its bits, group, parameters [V·p] and stored
// bytes (codes, F16 scales and zero points: quant::packed_bytes); nullopt for a float head.
struct QuantizedHead {
  int bits = 0, group = 0;
  std::int64_t params = 0, bytes = 0;
  double bits_per_weight() const { return params > 0 ? 8.0 * static_cast<double>(bytes) / static_cast<double>(params) : 0.0; }
};
std::optional<QuantizedHead> quantized_head(const model::Model& m);

// Stored parameters (weights, biases, norms, embeddings) per module type: "embed", "attn", "mlp",
// "norm", then "lm_head" when untied.
std::vector<std::pair<std::string, std::int64_t>> param_breakdown(const model::Model& m);
std::int64_t num_params(const model::Model& m);
// MACs of one forward over n_tok tokens as calflops counts it: every linear as stored, the LM head,
// and attention's Q·Kᵀ and A·V over the full n_tok × n_tok square.
std::int64_t forward_macs(const model::Model& m, std::int64_t n_tok);
// Bytes per token of a KV cache that stores each layer's keys and values (2·H_kv·d_h values per layer)
// with bytes_per_value bytes each.
std::int64_t kv_cache_bytes_per_token(const model::Model& m, std::int64_t bytes_per_value);

}  // namespace latentllm::eval
