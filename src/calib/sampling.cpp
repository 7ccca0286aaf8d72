// Calibration windows: GPTQ/SparseGPT random sampling or contiguous windows.
#include <random>

#include "core/random.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"

namespace latentllm::calib {
namespace {

std::vector<std::string> read_documents(const CalibOptions& opt) {
  if (opt.holdout_docs < 0 || (opt.holdout_docs > 0 && opt.source != "c4")) {
    throw ConfigError(fmt::format("--calib-holdout (expected >= 0, and 0 unless --calib c4; got {} with --calib {})",
                                  opt.holdout_docs, opt.source));
  }
  if (opt.source == "c4") {
    std::vector<std::string> docs = io::read_jsonl_texts(opt.data, 0);
    const auto held = static_cast<std::size_t>(opt.holdout_docs);
    if (held >= docs.size()) {
      throw ConfigError(fmt::format("{}: --calib-holdout {} leaves no document to calibrate on (expected fewer than the "
                                    "file's {})", opt.data.string(), held, docs.size()));
    }
    docs.resize(docs.size() - held);
    return docs;
  }
  if (opt.source == "text") return {io::build_eval_text(io::Dataset::Text, opt.data)};
  throw ConfigError(fmt::format("--calib: unknown source (expected c4 or text, got {})", opt.source));
}

// Random windows drawn from far less text than they add up to repeat it: say so (the windows still
// differ, but the statistics see the same tokens many times, and the memory grows with N·L all the same).
void warn_resampling(const CalibOptions& opt, const std::vector<std::vector<std::int32_t>>& cache,
                     const std::vector<bool>& tokenized) {
  const auto L = static_cast<std::size_t>(opt.seqlen);
  std::size_t docs = 0, tokens = 0;
  for (std::size_t d = 0; d < cache.size(); ++d) {
    if (!tokenized[d] || cache[d].size() <= L) continue;
    ++docs;
    tokens += cache[d].size();
  }
  const double need = static_cast<double>(opt.nsamples) * static_cast<double>(L);
  if (tokens == 0 || need <= 2.0 * static_cast<double>(tokens)) return;
  log_warn("calibration resamples its data: {} windows of {} tokens = {} tokens drawn from {} documents of more than "
           "{} tokens holding {} tokens, each token about {:.1f} times (more distinct text needs a larger "
           "--calib-data file; fewer --nsamples cost less memory and time)", opt.nsamples, L,
           static_cast<std::int64_t>(need), docs, L, tokens, need / static_cast<double>(tokens));
}

// GPTQ get_c4: repeat N times: draw documents until one has more than L tokens, then a random window.
std::vector<std::int32_t> sample_random(const io::Tokenizer& tok, const CalibOptions& opt,
                                        const std::vector<std::string>& docs) {
  std::mt19937_64 rng(opt.seed);
  const auto L = static_cast<std::size_t>(opt.seqlen);
  std::vector<std::vector<std::int32_t>> cache(docs.size());
  std::vector<bool> tokenized(docs.size(), false);
  std::size_t long_docs = 0, checked = 0;
  std::vector<std::int32_t> ids;
  ids.reserve(static_cast<std::size_t>(opt.nsamples) * L);
  for (int s = 0; s < opt.nsamples; ++s) {
    std::size_t attempts = 0;
    for (;;) {
      const auto d = static_cast<std::size_t>(core::uniform_below(rng, docs.size()));
      if (!tokenized[d]) {
        cache[d] = tok.encode(docs[d]);
        tokenized[d] = true;
        ++checked;
        if (cache[d].size() > L) ++long_docs;
      }
      const auto& t = cache[d];
      if (t.size() > L) {
        const auto start = static_cast<std::size_t>(core::uniform_below(rng, t.size() - L));
        ids.insert(ids.end(), t.begin() + static_cast<std::ptrdiff_t>(start),
                   t.begin() + static_cast<std::ptrdiff_t>(start + L));
        break;
      }
      // Every document tokenized and none long enough: GPTQ would loop forever; fail instead.
      if (checked == docs.size() && long_docs == 0) {
        throw FormatError(fmt::format("{}: no document has more than {} tokens (calibration seqlen)",
                                      opt.data.string(), L));
      }
      if (++attempts > 1000000) throw FormatError(fmt::format("{}: too few long documents", opt.data.string()));
    }
  }
  warn_resampling(opt, cache, tokenized);
  return ids;
}

}  // namespace

std::vector<std::int32_t> sample_calibration(const io::Tokenizer& tok, const CalibOptions& opt) {
  if (opt.nsamples <= 0) throw ConfigError(fmt::format("--nsamples (expected > 0, got {})", opt.nsamples));
  if (opt.seqlen <= 1) throw ConfigError(fmt::format("--seqlen (expected > 1, got {})", opt.seqlen));
  const auto docs = read_documents(opt);
  if (docs.empty()) throw FormatError(fmt::format("{}: empty dataset", opt.data.string()));
  if (opt.sampling == Sampling::Random) return sample_random(tok, opt, docs);

  // Contiguous: the whole text tokenized once (BOS once at the start, as for perplexity); C4 documents
  // joined by " " as in the evaluation protocol.
  std::string text;
  if (opt.source == "c4") {
    for (std::size_t i = 0; i < docs.size(); ++i) {
      if (i) text += ' ';
      text += docs[i];
    }
  } else {
    text = docs.front();
  }
  const auto all = tok.encode(text);
  const auto need = static_cast<std::size_t>(opt.nsamples) * static_cast<std::size_t>(opt.seqlen);
  if (all.size() < need) {
    throw FormatError(fmt::format("{}: too short for {} contiguous calibration windows (expected >= {} tokens, got {})",
                                  opt.data.string(), opt.nsamples, need, all.size()));
  }
  return {all.begin(), all.begin() + static_cast<std::ptrdiff_t>(need)};
}

void resolve_seqlen(CalibOptions& opt, const model::ModelConfig& c) {
  if (opt.seqlen == 0) opt.seqlen = static_cast<int>(std::min<std::int64_t>(2048, c.max_position_embeddings));
  if (opt.seqlen > c.max_position_embeddings) {
    throw ConfigError(fmt::format("--seqlen beyond the model's context (expected at most max_position_embeddings = {}, "
                                  "got {})", c.max_position_embeddings, opt.seqlen));
  }
}

nlohmann::json calibration_record(const CalibOptions& opt) {
  return {{"source", opt.source}, {"data", opt.data.filename().string()}, {"nsamples", opt.nsamples},
          {"seqlen", opt.seqlen}, {"seed", opt.seed},
          {"sampling", opt.sampling == Sampling::Contiguous ? "contiguous" : "random"},
          {"holdout_docs", opt.holdout_docs}};
}

}  // namespace latentllm::calib
