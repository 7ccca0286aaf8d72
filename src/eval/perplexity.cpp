// Perplexity by the GPTQ / SparseGPT protocol (latentllm/eval.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>

#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"

namespace latentllm::eval {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Windows per forward when the caller does not say: about 4096 tokens, enough rows for the linear
// GEMMs to run near peak while the activations stay within a few tens of MB.
constexpr int kAutoBatchTokens = 4096;

}  // namespace

int default_seqlen(const model::ModelConfig& config) {
  return static_cast<int>(std::min<std::int64_t>(2048, config.max_position_embeddings));
}

std::vector<std::int32_t> eval_ids(const io::Tokenizer& tok, io::Dataset dataset, const std::filesystem::path& file,
                                   int seqlen) {
  const std::string text = io::build_eval_text(dataset, file);
  auto ids = tok.encode(text, /*add_special_tokens=*/true);
  // GPTQ's C4 evaluation keeps valenc[:, :256·seqlen].
  const auto cap = static_cast<std::size_t>(256) * static_cast<std::size_t>(seqlen);
  if (dataset == io::Dataset::C4 && ids.size() > cap) ids.resize(cap);
  return ids;
}

PplResult perplexity_ids(const model::Model& m, std::span<const std::int32_t> ids, int seqlen, int max_windows,
                         int batch, const std::string& origin, const PplProgressFn& progress) {
  if (seqlen < 2) throw ConfigError(fmt::format("seqlen (expected >= 2, got {})", seqlen));
  if (max_windows < 0) throw ConfigError(fmt::format("max windows (expected >= 0, got {})", max_windows));
  if (batch < 0) throw ConfigError(fmt::format("batch (expected >= 0, got {})", batch));
  const auto n_tok = static_cast<std::int64_t>(ids.size());
  if (n_tok < seqlen) {
    throw FormatError(fmt::format("{}: dataset too short for one window (expected >= {} tokens, got {})", origin,
                                  seqlen, n_tok));
  }
  PplResult r;
  r.tokens = n_tok;
  r.seqlen = seqlen;
  r.windows = n_tok / seqlen;
  if (max_windows > 0) r.windows = std::min<std::int64_t>(r.windows, max_windows);
  r.predicted = r.windows * (seqlen - 1);
  const int per_batch = batch > 0 ? batch : std::max(1, kAutoBatchTokens / seqlen);

  const auto t0 = Clock::now();
  double nll = 0;
  for (std::int64_t w0 = 0; w0 < r.windows; w0 += per_batch) {
    const std::int64_t n = std::min<std::int64_t>(per_batch, r.windows - w0);
    nll += m.windows_nll(ids.subspan(static_cast<std::size_t>(w0 * seqlen), static_cast<std::size_t>(n * seqlen)),
                         seqlen);
    if (progress) {
      PplProgress p;
      p.windows_done = w0 + n;
      p.windows_total = r.windows;
      p.seconds = seconds_since(t0);
      p.tokens_per_s = static_cast<double>(p.windows_done * seqlen) / std::max(p.seconds, 1e-9);
      p.eta_s = p.seconds / static_cast<double>(p.windows_done) * static_cast<double>(r.windows - p.windows_done);
      progress(p);
    }
  }
  r.seconds = seconds_since(t0);
  r.tokens_per_s = static_cast<double>(r.windows * seqlen) / std::max(r.seconds, 1e-9);
  r.mean_nll = nll / static_cast<double>(r.predicted);
  r.ppl = std::exp(r.mean_nll);
  return r;
}

PplResult perplexity(const model::Model& m, const io::Tokenizer& tok, const PplOptions& opt,
                     const PplProgressFn& progress) {
  const int seqlen = opt.seqlen > 0 ? opt.seqlen : default_seqlen(m.config());
  const auto t0 = Clock::now();
  const auto ids = eval_ids(tok, opt.dataset, opt.data, seqlen);
  const double tokenize_s = seconds_since(t0);
  auto r = perplexity_ids(m, ids, seqlen, opt.max_windows, opt.batch, opt.data.string(), progress);
  r.tokenize_seconds = tokenize_s;
  return r;
}

}  // namespace latentllm::eval
