// Per-token log-probabilities of a sequence (include/latentllm/generate.hpp, eval::token_logprobs): what an
// OpenAI-style completions endpoint returns for echo + logprobs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "latentllm/generate.hpp"

namespace latentllm::eval {

namespace {

// logits: [T − 1, V], row i − 1 predicting ids[i]: the inputs ids[0..T − 1) in one forward, or in two (the
// prompt's inputs ids[0..prompt − 1), then the rest on the same cache) when a prompt splits them.
MatrixF predicting_logits(const model::Model& m, std::span<const std::int32_t> ids, std::size_t prompt) {
  const std::span<const std::int32_t> inp = ids.first(ids.size() - 1);
  model::KvCache cache(m, static_cast<int>(inp.size()));
  MatrixF logits;  // [T − 1, V]
  if (prompt < 2 || prompt >= ids.size()) {
    m.forward_cached(inp, cache, logits);
    return logits;
  }
  MatrixF first, rest;  // [prompt − 1, V], [T − prompt, V]
  m.forward_cached(inp.first(prompt - 1), cache, first);
  m.forward_cached(inp.subspan(prompt - 1), cache, rest);
  logits.resize(first.rows() + rest.rows(), first.cols());
  logits.topRows(first.rows()) = first;
  logits.bottomRows(rest.rows()) = rest;
  return logits;
}

}  // namespace

std::vector<TokenLogprob> token_logprobs(const model::Model& m, std::span<const std::int32_t> ids, int top,
                                         std::size_t prompt) {
  std::vector<TokenLogprob> out(ids.size());
  if (ids.empty()) return out;
  out[0].logprob = std::numeric_limits<double>::quiet_NaN();
  if (ids.size() < 2) return out;
  const MatrixF logits = predicting_logits(m, ids, prompt);  // [T − 1, V]
  std::vector<std::int32_t> order(static_cast<std::size_t>(logits.cols()));
  for (std::size_t i = 1; i < ids.size(); ++i) {
    const auto row = logits.row(static_cast<Eigen::Index>(i - 1));
    const double mx = row.maxCoeff();
    double z = 0;
    for (Eigen::Index v = 0; v < row.size(); ++v) z += std::exp(static_cast<double>(row(v)) - mx);
    const double lse = mx + std::log(z);
    out[i].logprob = static_cast<double>(row(ids[i])) - lse;
    if (top > 0) {
      std::iota(order.begin(), order.end(), 0);
      const auto k = std::min<std::size_t>(static_cast<std::size_t>(top), order.size());
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                        [&](std::int32_t a, std::int32_t b) { return row(a) > row(b) || (row(a) == row(b) && a < b); });
      for (std::size_t j = 0; j < k; ++j) out[i].top.emplace_back(order[j], static_cast<double>(row(order[j])) - lse);
    }
  }
  return out;
}

}  // namespace latentllm::eval
