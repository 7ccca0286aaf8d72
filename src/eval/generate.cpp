// Text generation: sampling (eval::Sampler) and the prefill + decode loop over a KV cache.
#include "latentllm/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "io/json_keys.hpp"
#include "latentllm/error.hpp"

namespace latentllm::eval {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

void check_sampling_options(const SamplingOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0) {
    throw ConfigError(fmt::format("--temperature (expected a finite number >= 0, got {})", o.temperature));
  }
  if (o.top_k < 0) throw ConfigError(fmt::format("--top-k (expected >= 0, got {})", o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    throw ConfigError(fmt::format("--top-p (expected a number in (0, 1], got {})", o.top_p));
  }
}

Sampler::Sampler(const SamplingOptions& o) : o_(o), rng_(o.seed) { check_sampling_options(o); }

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

std::int32_t Sampler::sample(std::span<const float> logits) {
  const auto n = static_cast<std::int32_t>(logits.size());
  std::int32_t best = 0;  // argmax, lowest id on ties
  for (std::int32_t i = 0; i < n; ++i) {
    if (!std::isfinite(logits[static_cast<std::size_t>(i)])) {
      throw NumericError(fmt::format("logits: non-finite value at id {} (expected finite, got {})", i,
                                     logits[static_cast<std::size_t>(i)]));
    }
    if (logits[static_cast<std::size_t>(i)] > logits[static_cast<std::size_t>(best)]) best = i;
  }
  if (o_.temperature == 0 || n == 1) return best;
  const double mx = logits[static_cast<std::size_t>(best)];
  p_.resize(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) {
    p_[static_cast<std::size_t>(i)] = std::exp((logits[static_cast<std::size_t>(i)] - mx) / o_.temperature);
  }
  order_.resize(static_cast<std::size_t>(n));
  std::iota(order_.begin(), order_.end(), 0);
  std::size_t kept = order_.size();
  if (o_.top_k > 0 || o_.top_p < 1) {
    const auto by_rank = [this](std::int32_t a, std::int32_t b) {
      const double pa = p_[static_cast<std::size_t>(a)], pb = p_[static_cast<std::size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    };
    if (o_.top_k > 0 && static_cast<std::size_t>(o_.top_k) < kept) {
      kept = static_cast<std::size_t>(o_.top_k);
      std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(kept), order_.end(), by_rank);
    } else {
      std::sort(order_.begin(), order_.end(), by_rank);
    }
    if (o_.top_p < 1) {
      double total = 0;
      for (std::size_t r = 0; r < kept; ++r) total += p_[static_cast<std::size_t>(order_[r])];
      double cum = 0;
      for (std::size_t r = 0; r < kept; ++r) {
        cum += p_[static_cast<std::size_t>(order_[r])];
        if (cum >= o_.top_p * total) {
          kept = r + 1;
          break;
        }
      }
    }
  }
  double total = 0;
  for (std::size_t r = 0; r < kept; ++r) total += p_[static_cast<std::size_t>(order_[r])];
  double u = uniform() * total;
  for (std::size_t r = 0; r < kept; ++r) {
    u -= p_[static_cast<std::size_t>(order_[r])];
    if (u < 0) return order_[r];
  }
  return order_[kept - 1];  // round-off left u a hair above the total
}

std::vector<std::int32_t> prompt_ids(const model::Model& m, const io::Tokenizer& tok, std::string_view prompt) {
  std::vector<std::int32_t> ids = tok.encode(prompt, true);
  if (!ids.empty()) return ids;
  if (const auto bos = tok.bos_id()) return {*bos};
  if (const auto bos = m.config().bos_token_id) return {static_cast<std::int32_t>(*bos)};
  throw ConfigError(fmt::format("{}: empty prompt and no BOS token (expected a tokenizer or config.json bos_token_id "
                                "to start from)", m.dir().string()));
}

namespace {

// The checks of generate(), before any forward.
void check_generate(const model::Model& m, std::span<const std::int32_t> prompt, const GenerateOptions& opt) {
  check_sampling_options(opt.sampling);
  if (opt.max_new_tokens < 0) {
    throw ConfigError(fmt::format("--max-new-tokens (expected >= 0, got {})", opt.max_new_tokens));
  }
  const std::string dir = m.dir().string();
  if (prompt.empty()) throw ConfigError(fmt::format("{}: empty prompt (expected at least one token id)", dir));
  const std::int64_t V = m.config().vocab_size, max_pos = m.config().max_position_embeddings;
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= V) {
      throw ConfigError(fmt::format("{}: prompt token id {} at position {} (expected 0..{}, the model's vocabulary)",
                                    dir, prompt[i], i, V - 1));
    }
  }
  const auto n = static_cast<std::int64_t>(prompt.size());
  if (n > max_pos) {
    throw ConfigError(fmt::format("{}: prompt of {} tokens (expected at most max_position_embeddings = {})", dir, n,
                                  max_pos));
  }
  if (n + opt.max_new_tokens > max_pos) {
    throw ConfigError(fmt::format("{}: prompt of {} tokens + --max-new-tokens {} (expected at most "
                                  "max_position_embeddings = {} positions, got {})", dir, n, opt.max_new_tokens,
                                  max_pos, n + opt.max_new_tokens));
  }
}

}  // namespace

std::vector<std::int64_t> stop_token_ids(const model::Model& m) {
  const std::filesystem::path gen = m.dir() / "generation_config.json";
  if (std::filesystem::exists(gen)) {
    const nlohmann::json doc = io::load_json_file(gen);
    std::vector<std::int64_t> ids = io::JsonKeys(doc, gen.string()).token_ids("eos_token_id");
    if (!ids.empty()) return ids;
  }
  return m.config().eos_token_ids;
}

GenerateResult generate(const model::Model& m, const io::Tokenizer& tok, std::span<const std::int32_t> prompt,
                        const GenerateOptions& opt, const TextFn& on_text, const PrefillFn& prefill) {
  check_generate(m, prompt, opt);
  GenerateResult r;
  r.prompt_ids.assign(prompt.begin(), prompt.end());
  const auto n_prompt = static_cast<int>(prompt.size());
  model::KvCache cache(m, n_prompt + std::max(opt.max_new_tokens - 1, 0), opt.kv_cache);
  r.kv_cache_bytes_per_token = cache.bytes_per_token();
  r.kv_cache_layers = cache.describe();
  io::TextStream stream(tok, r.prompt_ids);
  const auto emit = [&](const std::string& piece) {
    if (!piece.empty() && on_text) on_text(piece);
  };
  if (opt.max_new_tokens > 0) {
    Sampler sampler(opt.sampling);
    // Candidates: ids the tokenizer can decode (OPT pads its embedding past the tokenizer's vocabulary).
    const std::int64_t n_cand = std::min<std::int64_t>(m.config().vocab_size, tok.vocab_size());
    const std::vector<std::int64_t> eos = stop_token_ids(m);
    MatrixF logits;  // [1, V]
    auto t0 = Clock::now();
    if (prefill) {
      prefill(cache, logits);
    } else {
      m.forward_cached(prompt, cache, logits, true);
    }
    r.prefill_seconds = seconds_since(t0);
    for (;;) {
      const std::int32_t id = sampler.sample(std::span<const float>(logits.data(), static_cast<std::size_t>(n_cand)));
      r.tokens.push_back(id);
      emit(stream.push(id));
      if (std::find(eos.begin(), eos.end(), id) != eos.end()) {
        r.stopped_at_eos = true;
        break;
      }
      if (static_cast<int>(r.tokens.size()) == opt.max_new_tokens) break;
      if (opt.stop_requested && opt.stop_requested()) {
        r.stopped_by_request = true;
        break;
      }
      t0 = Clock::now();
      m.forward_cached(std::span<const std::int32_t>(&r.tokens.back(), 1), cache, logits, true);
      r.decode_seconds += seconds_since(t0);
      ++r.decode_steps;
    }
  }
  emit(stream.finish());
  r.text = stream.text();
  r.prompt_tokens_per_s = r.prefill_seconds > 0 ? n_prompt / r.prefill_seconds : 0;
  r.decode_tokens_per_s = r.decode_seconds > 0 ? r.decode_steps / r.decode_seconds : 0;
  r.kv_cache_length = cache.length();
  r.kv_cache_bytes = cache.bytes();
  return r;
}

}  // namespace latentllm::eval
