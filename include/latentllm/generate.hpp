// Text generation (latentllm generate): the prompt through the model in one forward (prefill), then
// one token per forward with a KV cache (model::KvCache, Model::forward_cached), each next token drawn
// from the last position's logits; the continuation detokenized incrementally (io::TextStream).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::eval {

// How the next token is drawn, in the order transformers applies them: temperature, top-k, top-p.
struct SamplingOptions {
  double temperature = 1.0;  // logits / temperature before the softmax; 0 = greedy (argmax, lowest id on ties)
  int top_k = 0;             // keep only the k most likely tokens; 0 = all
  double top_p = 1.0;        // keep the smallest set of most likely tokens whose probability reaches top_p, (0, 1]
  std::uint64_t seed = 0;    // seeds the generator (Sampler)
};

// Throws ConfigError for a bad option: "--temperature (expected a finite number >= 0, got X)",
// "--top-k (expected >= 0, got X)", "--top-p (expected a number in (0, 1], got X)".
void check_sampling_options(const SamplingOptions& o);

// Draws token ids from logits, deterministically for a seed on every platform: the generator is
// std::mt19937_64(seed) (fully specified by the C++ standard) and the uniform draw in [0, 1) is its
// next output's top 53 bits × 2^−53 (no standard-library distribution, whose algorithms differ
// between implementations). The probabilities are computed in double: p_i ∝ exp((l_i − max l)/T).
// Tokens are ranked by probability, lower id first on ties; top-k keeps the first k, top-p the
// shortest prefix whose probability reaches top_p (at least one token); the draw u·Σp walks the kept
// tokens in rank order (in id order when neither top-k nor top-p is set, which needs no sort).
// Greedy (temperature 0) draws nothing.
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& o);  // check_sampling_options
  // logits: [n], the candidates are ids 0..n−1. NumericError "logits: non-finite value at id <i>"
  // when one is NaN or infinite.
  std::int32_t sample(std::span<const float> logits);
  // The next uniform draw in [0, 1).
  double uniform();

 private:
  SamplingOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::int32_t> order_;  // [n] scratch: candidate ids by rank
  std::vector<double> p_;            // [n] scratch: unnormalized probabilities
};

struct GenerateOptions {
  int max_new_tokens = 128;  // stop after this many generated tokens (EOS stops earlier)
  SamplingOptions sampling;
  // The KV cache's form per factored k_proj / v_proj (model::KvCacheMode; --kv-cache).
  model::KvCacheMode kv_cache = model::KvCacheMode::Auto;
  // Asked after each generated token (its text pushed to on_text): true ends the generation there (a stop
  // string seen, a client gone). Unset: never.
  std::function<bool()> stop_requested;
};

struct GenerateResult {
  std::vector<std::int32_t> prompt_ids;  // the prompt's ids (BOS included)
  std::vector<std::int32_t> tokens;      // the generated ids, the EOS that stopped it included
  std::string text;                      // the continuation: decode(prompt + tokens) after decode(prompt)
  bool stopped_at_eos = false;
  bool stopped_by_request = false;  // GenerateOptions::stop_requested said so
  double prefill_seconds = 0;   // the prompt's forward (logits of its last position included)
  double decode_seconds = 0;    // the one-token forwards (sampling and detokenization excluded)
  int decode_steps = 0;         // one-token forwards: tokens.size() − 1 (the last token is not fed back)
  double prompt_tokens_per_s = 0;  // prompt_ids.size() / prefill_seconds
  double decode_tokens_per_s = 0;  // decode_steps / decode_seconds (0 without steps)
  std::int64_t kv_cache_bytes_per_token = 0;  // model::KvCache::bytes_per_token
  std::int64_t kv_cache_bytes = 0;            // at the final length: positions cached × bytes per token
  int kv_cache_length = 0;                    // positions cached at the end: prompt + decode_steps
  std::vector<std::string> kv_cache_layers;   // model::KvCache::describe: each layer's forms and widths
};

// Receives each piece of the continuation as soon as it is final (streaming).
using TextFn = std::function<void(std::string_view)>;

// The ids a prompt starts from: tok.encode(prompt) with special tokens (BOS where the tokenizer adds
// it). An empty prompt that encodes to nothing starts from BOS alone (the tokenizer's, else
// config.json bos_token_id); ConfigError "<dir>: empty prompt and no BOS token (expected a tokenizer
// or config.json bos_token_id to start from)" when there is none.
std::vector<std::int32_t> prompt_ids(const model::Model& m, const io::Tokenizer& tok, std::string_view prompt);

// The ids that end generation: eos_token_id (an id or a list) of generation_config.json beside
// config.json when that file sets it (transformers' GenerationConfig takes precedence), else every
// eos_token_id of config.json; empty when neither has one. A generation_config.json that is not JSON
// throws FormatError, a bad eos_token_id ConfigError "<file>: eos_token_id (expected an integer or a
// list of integers, got …)".
std::vector<std::int64_t> stop_token_ids(const model::Model& m);

// Generates up to opt.max_new_tokens tokens after `prompt` (ids), stopping at any of
// stop_token_ids(m); candidates are the ids both the model and the tokenizer have (min of their vocabulary
// sizes). on_text gets the continuation piece by piece. Bad input throws before any forward:
// ConfigError for the sampling options, "--max-new-tokens (expected >= 0, got N)", an empty prompt,
// "<dir>: prompt token id <id> at position <i> (expected 0..<V − 1>, the model's vocabulary)", "<dir>:
// prompt of <n> tokens (expected at most max_position_embeddings = <m>)" and "<dir>: prompt of <n>
// tokens + --max-new-tokens <k> (expected at most max_position_embeddings = <m> positions, got <n + k>)".
// The model must be loaded eagerly (or have every layer loaded).
//
// prefill, when set, replaces the prompt's forward: it fills the (empty) cache with the prompt's
// positions and sets the last position's logits [1, V] (a LLaVA model puts image features in place of
// the image tokens: LlavaModel::prefill); everything else is the same.
using PrefillFn = std::function<void(model::KvCache& cache, MatrixF& logits)>;
GenerateResult generate(const model::Model& m, const io::Tokenizer& tok, std::span<const std::int32_t> prompt,
                        const GenerateOptions& opt, const TextFn& on_text = {}, const PrefillFn& prefill = {});

// The log-probability of each token of ids given the tokens before it (OpenAI's echo + logprobs, lm-eval's
// loglikelihood over a completions API): entry i > 0 is log p(ids[i] | ids[0..i)) in double from the
// model's float logits (log-softmax over the model's vocabulary) with the `top` most likely ids at that
// position and their log-probabilities (most likely first, lower id on ties); entry 0 has no context
// (logprob NaN, no top). ConfigError as forward_cached beyond max_position_embeddings.
// prompt (0 < prompt < ids.size()): ids[0..prompt) is a prompt and the rest its continuation; the prompt's
// entries come from one forward of the prompt alone and the continuation's from the same KV cache after it,
// so the prompt's log-probabilities are the same bits whatever follows (lm-eval scores with max_tokens 0 or
// 1; a BLAS product's rounding may depend on the number of rows). Otherwise one forward over ids.
struct TokenLogprob {
  double logprob = 0;
  std::vector<std::pair<std::int32_t, double>> top;
};
std::vector<TokenLogprob> token_logprobs(const model::Model& m, std::span<const std::int32_t> ids, int top = 0,
                                         std::size_t prompt = 0);

}  // namespace latentllm::eval
