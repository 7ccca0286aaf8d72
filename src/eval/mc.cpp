// Zero-shot multiple choice, scored as lm-evaluation-harness scores it (include/latentllm/mc.hpp):
// HFLM._encode_pair, the left-truncated input of HFLM._loglikelihood_tokens, the log-softmax of the
// continuation's positions, acc / acc_norm (by characters) and mean_stderr.
#include "latentllm/mc.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "latentllm/error.hpp"

namespace latentllm::eval::mc {
namespace {

using Clock = std::chrono::steady_clock;

// Python's len of a UTF-8 string: code points.
double characters(const std::string& s) {
  return static_cast<double>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// lm-eval's mean and mean_stderr (sample standard deviation / √n).
std::pair<double, double> mean_stderr(const std::vector<double>& x) {
  const auto n = static_cast<double>(x.size());
  if (x.empty()) return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  double mu = 0;
  for (double v : x) mu += v;
  mu /= n;
  if (x.size() < 2) return {mu, std::numeric_limits<double>::quiet_NaN()};
  double ss = 0;
  for (double v : x) ss += (v - mu) * (v - mu);
  return {mu, std::sqrt(ss / (n - 1)) / std::sqrt(n)};
}

// numpy.argmax: the first maximum.
int argmax(const std::vector<double>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> encode_pair(const io::Tokenizer& tok,
                                                                             const model::Model& m,
                                                                             const std::string& context,
                                                                             const std::string& continuation,
                                                                             const Options& opt) {
  if (context.empty()) {
    // lm-eval: the prefix token (BOS, else EOS) stands for an empty context.
    std::optional<std::int32_t> prefix = tok.bos_id();
    if (!prefix && m.config().eos_token_id) prefix = static_cast<std::int32_t>(*m.config().eos_token_id);
    if (!prefix) throw ConfigError("mc: an empty context (expected a tokenizer with a BOS or EOS token to stand for it)");
    return {{*prefix}, tok.encode(continuation, opt.add_bos.value_or(true))};
  }
  const std::size_t kept = context.find_last_not_of(" \t\n\r\f\v");
  const std::size_t n_spaces = kept == std::string::npos ? context.size() : context.size() - kept - 1;
  const std::string ctx = context.substr(0, context.size() - n_spaces);
  const std::string cont = context.substr(context.size() - n_spaces) + continuation;
  const bool special = opt.add_bos.value_or(true);  // unset: the tokenizer's default call
  std::vector<std::int32_t> whole = tok.encode(ctx + cont, special);
  std::vector<std::int32_t> head = tok.encode(ctx, special);
  const std::size_t n = std::min(head.size(), whole.size());
  return {head, std::vector<std::int32_t>(whole.begin() + static_cast<std::ptrdiff_t>(n), whole.end())};
}

double loglikelihood(const model::Model& m, std::span<const std::int32_t> context,
                     std::span<const std::int32_t> continuation) {
  if (continuation.empty()) return 0.0;
  std::vector<std::int32_t> all(context.begin(), context.end());
  all.insert(all.end(), continuation.begin(), continuation.end());
  // inp = (context + continuation)[-(max_length + 1):][:-1]
  const auto max_length = static_cast<std::size_t>(m.config().max_position_embeddings);
  const std::size_t start = all.size() > max_length + 1 ? all.size() - (max_length + 1) : 0;
  const std::vector<std::int32_t> inp(all.begin() + static_cast<std::ptrdiff_t>(start), all.end() - 1);
  if (continuation.size() > inp.size()) {
    throw ConfigError(fmt::format("mc: a continuation of {} tokens (expected at most max_position_embeddings = {})",
                                  continuation.size(), max_length));
  }
  model::KvCache cache(m, static_cast<int>(inp.size()));
  MatrixF logits;  // [T, V]
  m.forward_cached(inp, cache, logits);
  double sum = 0;
  const Eigen::Index first = static_cast<Eigen::Index>(inp.size() - continuation.size());
  for (std::size_t j = 0; j < continuation.size(); ++j) {
    const auto row = logits.row(first + static_cast<Eigen::Index>(j));
    const double mx = row.maxCoeff();
    double z = 0;
    for (Eigen::Index v = 0; v < row.size(); ++v) z += std::exp(static_cast<double>(row(v)) - mx);
    sum += static_cast<double>(row(continuation[j])) - mx - std::log(z);
  }
  return sum;
}

Result evaluate(const model::Model& m, const io::Tokenizer& tok, const std::vector<Item>& items, const Options& opt,
                const ProgressFn& progress) {
  Result r;
  const auto t0 = Clock::now();
  std::vector<double> acc, acc_norm;
  for (std::size_t k = 0; k < items.size(); ++k) {
    const Item& it = items[k];
    ItemResult ir;
    std::vector<double> norm;
    for (int i = 0; i < it.alternatives(); ++i) {
      const auto [ctx, cont] = encode_pair(tok, m, it.context(i), it.continuation(i), opt);
      ir.loglik.push_back(loglikelihood(m, ctx, cont));
      ir.tokens.push_back(static_cast<int>(cont.size()));
      ir.context_ids.push_back(ctx);
      ir.continuation_ids.push_back(cont);
      norm.push_back(ir.loglik.back() / std::max(1.0, characters(it.choices[static_cast<std::size_t>(i)])));
    }
    ir.pred = argmax(ir.loglik);
    ir.pred_norm = argmax(norm);
    ir.correct = ir.pred == it.gold;
    ir.correct_norm = ir.pred_norm == it.gold;
    acc.push_back(ir.correct);
    acc_norm.push_back(ir.correct_norm);
    r.items.push_back(std::move(ir));
    if (progress) {
      progress(static_cast<int>(k + 1), static_cast<int>(items.size()),
               std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  std::tie(r.acc, r.acc_stderr) = mean_stderr(acc);
  std::tie(r.acc_norm, r.acc_norm_stderr) = mean_stderr(acc_norm);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace latentllm::eval::mc
