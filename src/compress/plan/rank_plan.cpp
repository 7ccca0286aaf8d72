#include "compress/plan/rank_plan.hpp"

#include <algorithm>
#include <cmath>

#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"

namespace latentllm::compress {

namespace {

void check_shape(std::int64_t out, std::int64_t in, std::string_view context) {
  if (out < 1 || in < 1) {
    throw ConfigError(fmt::format("{}: module shape must be positive (expected [d' ≥ 1, d ≥ 1], got [{}, {}])",
                                  context, out, in));
  }
}

void check_ratio(double ratio, std::string_view context) {
  if (!(ratio > 0.0 && ratio < 1.0)) {  // also rejects NaN
    throw ConfigError(fmt::format("{}: compression ratio out of range (expected 0 < R < 1, got {})", context, ratio));
  }
}

}  // namespace

std::int64_t max_rank_for_budget(std::int64_t out, std::int64_t in, double budget, Junction j) {
  const std::int64_t r_max = std::min(out, in);
  const double limit = budget + 1e-12 * std::abs(budget);
  const auto fits = [&](std::int64_t r) { return static_cast<double>(eval::factored_params(out, in, r, j == Junction::BlockIdentity)) <= limit; };
  const double s = static_cast<double>(out + in);
  double guess = budget / s;  // r·(d'+d) ≤ budget
  if (j == Junction::BlockIdentity) {
    // r² − s·r + budget ≥ 0 on the increasing branch: r ≤ (s − √(s² − 4·budget)) / 2.
    const double disc = s * s - 4.0 * budget;
    guess = disc <= 0.0 ? s / 2.0 : (s - std::sqrt(disc)) / 2.0;
  }
  std::int64_t r = std::clamp(static_cast<std::int64_t>(std::floor(guess)), std::int64_t{0}, r_max);
  while (r > 0 && !fits(r)) --r;
  while (r < r_max && fits(r + 1)) ++r;
  return r;
}

std::int64_t rank_for_ratio(std::int64_t out, std::int64_t in, double ratio, Junction j, std::string_view context) {
  check_shape(out, in, context);
  check_ratio(ratio, context);
  const double budget = (1.0 - ratio) * static_cast<double>(eval::dense_params(out, in));
  const std::int64_t r = max_rank_for_budget(out, in, budget, j);
  if (r < 1) {
    throw ConfigError(fmt::format("{}: ratio {} leaves no rank for a [{}, {}] module (expected a budget of at least "
                                  "{} weights for rank 1, got {:.1f})",
                                  context, ratio, out, in, eval::factored_params(out, in, 1, j == Junction::BlockIdentity), budget));
  }
  return r;
}

std::int64_t RankPlan::params() const {
  std::int64_t s = 0;
  for (const auto& m : modules) s += m.params;
  return s;
}

std::int64_t RankPlan::dense_params() const {
  std::int64_t s = 0;
  for (const auto& m : modules) s += m.dense_params;
  return s;
}

std::int64_t RankPlan::macs() const {
  std::int64_t s = 0;
  for (const auto& m : modules) s += m.macs;
  return s;
}

std::int64_t RankPlan::dense_macs() const {
  std::int64_t s = 0;
  for (const auto& m : modules) s += m.dense_macs;
  return s;
}

double RankPlan::achieved_ratio() const {
  const std::int64_t d = dense_params();
  return d > 0 ? 1.0 - static_cast<double>(params()) / static_cast<double>(d) : 0.0;
}

RankPlan plan_ranks(const std::vector<ModuleShape>& modules, double ratio, Junction j, std::int64_t n_tok) {
  check_ratio(ratio, "rank plan");
  if (n_tok < 0) throw ConfigError(fmt::format("rank plan: token count must be ≥ 0 (got {})", n_tok));
  RankPlan plan;
  plan.ratio = ratio;
  plan.junction = j;
  plan.n_tok = n_tok;
  plan.modules.reserve(modules.size());
  for (const ModuleShape& m : modules) {
    ModulePlan p;
    p.name = m.name;
    p.out = m.out;
    p.in = m.in;
    p.rank = rank_for_ratio(m.out, m.in, ratio, j, m.name);
    const bool bi = j == Junction::BlockIdentity;
    p.params = eval::factored_params(m.out, m.in, p.rank, bi);
    p.dense_params = eval::dense_params(m.out, m.in);
    p.macs = eval::factored_macs(m.out, m.in, p.rank, bi, n_tok);
    p.dense_macs = eval::dense_macs(m.out, m.in, n_tok);
    plan.modules.push_back(std::move(p));
  }
  return plan;
}

double spectrum_energy(const ModuleSpectrum& s) {
  const std::int64_t k = std::min(s.out, s.in);
  if (static_cast<std::int64_t>(s.sigma2.size()) != k) {
    throw ConfigError(fmt::format("{}: spectrum length (expected min(d, d') = {}, got {})", s.name, k, s.sigma2.size()));
  }
  double energy = 0;
  for (double v : s.sigma2) {
    if (!(v >= 0) || !std::isfinite(v)) {
      throw NumericError(fmt::format("{}: singular value squared (expected finite and >= 0, got {})", s.name, v));
    }
    energy += v;
  }
  return energy;
}

}  // namespace latentllm::compress
