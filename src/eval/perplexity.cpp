// Perplexity by the GPTQ / SparseGPT protocol (latentllm/eval.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "dist/comm.hpp"
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
  if ((dataset == io::Dataset::C4 || dataset == io::Dataset::C4Heldout) && ids.size() > cap) ids.resize(cap);
  return ids;
}

std::int64_t eval_windows(std::int64_t n_ids, int seqlen, int max_windows) {
  const std::int64_t w = n_ids / seqlen;
  return max_windows > 0 ? std::min<std::int64_t>(w, max_windows) : w;
}

int eval_batch(int batch, int seqlen) { return batch > 0 ? batch : std::max(1, kAutoBatchTokens / seqlen); }

namespace {

// Progress after `windows_done` windows and `layers_done` layers (layer-major: windows are done at the head).
void report(const PplProgressFn& progress, Clock::time_point t0, std::int64_t windows_done, std::int64_t windows,
            int seqlen, int layers_done, int layers_total) {
  if (!progress) return;
  PplProgress p;
  p.windows_done = windows_done;
  p.windows_total = windows;
  p.layers_done = layers_done;
  p.layers_total = layers_total;
  p.seconds = seconds_since(t0);
  // Layer-major: the layers are the work (the head counts as one more step).
  const double done = layers_total > 0 ? (layers_done + static_cast<double>(windows_done) / windows) / (layers_total + 1)
                                       : static_cast<double>(windows_done) / windows;
  p.tokens_per_s = done * static_cast<double>(windows * seqlen) / std::max(p.seconds, 1e-9);
  p.eta_s = done > 0 ? p.seconds / done * (1.0 - done) : 0.0;
  progress(p);
}

// The batches of windows (per_batch windows each, the last one shorter) this rank evaluates: its share
// (dist::my_share) of all of them; every batch on one rank.
std::vector<std::span<const std::int32_t>> my_batches(std::span<const std::int32_t> ids, int seqlen,
                                                      std::int64_t windows, int per_batch) {
  std::vector<std::span<const std::int32_t>> batches;
  for (std::int64_t w0 = 0; w0 < windows; w0 += per_batch) {
    const std::int64_t n = std::min<std::int64_t>(per_batch, windows - w0);
    batches.push_back(ids.subspan(static_cast<std::size_t>(w0 * seqlen), static_cast<std::size_t>(n * seqlen)));
  }
  const dist::Share sh = dist::my_share(static_cast<std::int64_t>(batches.size()));
  return {batches.begin() + sh.begin, batches.begin() + sh.end};
}

// The sum of every rank's per-batch NLLs in batch order (rank order is batch order), the same additions
// as one process makes; on every rank.
double sum_in_order(const std::vector<double>& mine) {
  double nll = 0;
  for (const double x : dist::gather_doubles(mine)) nll += x;
  dist::broadcast_bytes(&nll, sizeof nll, 0);
  return nll;
}

// The whole run's windows done when this rank has done `done` of its batches' windows: its fraction of
// its share times all windows (the ranks go at about one pace); exact with one rank.
std::int64_t whole_done(std::int64_t done, const std::vector<std::span<const std::int32_t>>& mine, int seqlen,
                        std::int64_t windows) {
  std::int64_t share = 0;
  for (const auto& b : mine) share += static_cast<std::int64_t>(b.size()) / seqlen;
  return share > 0 ? done * windows / share : windows;
}

// Window-major: each batch through the whole model.
double window_major_nll(const model::Model& m, std::span<const std::int32_t> ids, int seqlen, std::int64_t windows,
                        int per_batch, const PplProgressFn& progress, Clock::time_point t0) {
  const auto batches = my_batches(ids, seqlen, windows, per_batch);
  std::vector<double> nll;  // per batch
  std::int64_t done = 0;
  for (const auto& b : batches) {
    nll.push_back(m.windows_nll(b, seqlen));
    done += static_cast<std::int64_t>(b.size()) / seqlen;
    report(progress, t0, whole_done(done, batches, seqlen, windows), windows, seqlen, 0, 0);
  }
  return sum_in_order(nll);
}

// Layer-major (lazy models): the same batches, embedded, then run layer by layer, then through the
// head, so each batch sees the same operations as in window_major_nll and the sum the same order.
double layer_major_nll(model::Model& m, std::span<const std::int32_t> ids, int seqlen, std::int64_t windows,
                       int per_batch, const PplProgressFn& progress, Clock::time_point t0) {
  const auto batches = my_batches(ids, seqlen, windows, per_batch);
  std::vector<MatrixF> hidden(batches.size());  // [n_b·T, d] per batch
  for (std::size_t b = 0; b < batches.size(); ++b) m.embed(batches[b], seqlen, hidden[b]);
  const int layers = m.num_layers();
  for (int i = 0; i < layers; ++i) {
    const bool was_loaded = m.layer_loaded(i);
    m.load_layer(i);
    for (auto& h : hidden) m.layer_forward(i, h, seqlen);
    if (!was_loaded) m.release_layer(i);
    report(progress, t0, 0, windows, seqlen, i + 1, layers);
  }
  std::vector<double> nll;  // per batch
  std::int64_t done = 0;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    nll.push_back(m.head_nll(hidden[b], batches[b], seqlen));
    MatrixF().swap(hidden[b]);
    done += static_cast<std::int64_t>(batches[b].size()) / seqlen;
    report(progress, t0, whole_done(done, batches, seqlen, windows), windows, seqlen, layers, layers);
  }
  return sum_in_order(nll);
}

}  // namespace

PplResult perplexity_ids(model::Model& m, std::span<const std::int32_t> ids, int seqlen, int max_windows, int batch,
                         const std::string& origin, const PplProgressFn& progress) {
  if (seqlen < 2) throw ConfigError(fmt::format("--seqlen (expected >= 2, got {})", seqlen));
  if (max_windows < 0) throw ConfigError(fmt::format("max windows (expected >= 0, got {})", max_windows));
  if (batch < 0) throw ConfigError(fmt::format("--batch (expected >= 0, got {})", batch));
  const auto n_tok = static_cast<std::int64_t>(ids.size());
  if (n_tok < seqlen) {
    throw FormatError(fmt::format("{}: dataset too short for one window (expected >= {} tokens, got {})", origin,
                                  seqlen, n_tok));
  }
  PplResult r;
  r.tokens = n_tok;
  r.seqlen = seqlen;
  r.windows = eval_windows(n_tok, seqlen, max_windows);
  r.predicted = r.windows * (seqlen - 1);
  const int per_batch = eval_batch(batch, seqlen);

  const auto t0 = Clock::now();
  const double nll = m.lazy() ? layer_major_nll(m, ids, seqlen, r.windows, per_batch, progress, t0)
                              : window_major_nll(m, ids, seqlen, r.windows, per_batch, progress, t0);
  r.seconds = seconds_since(t0);
  r.tokens_per_s = static_cast<double>(r.windows * seqlen) / std::max(r.seconds, 1e-9);
  r.mean_nll = nll / static_cast<double>(r.predicted);
  r.ppl = std::exp(r.mean_nll);
  return r;
}

PplResult perplexity(model::Model& m, const io::Tokenizer& tok, const PplOptions& opt,
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
