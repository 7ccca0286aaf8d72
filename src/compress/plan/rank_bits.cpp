// One budget in bytes (--bpw): each module's rank and bits chosen together (include/latentllm/compress.hpp,
// "One budget in bytes"). The paper's appendix quantizes the factors at one q for every module; here the
// q of each module, and its rank, are what its spectrum and its weight's rounding error make worth it.
#include <algorithm>
#include <cmath>
#include <limits>

#include "compress/plan/rank_plan.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"
#include "quant/pack.hpp"

namespace latentllm::compress {
namespace {

// Relative rounding error of q-bit round to nearest on a group's min–max grid for values spread like a
// Gaussian sample of G: the range of G samples is about 2·√(2 ln G) deviations, the error of a step s is
// s²/12, so ε ≈ 2 ln G / (3 (2^q − 1)²). Taken when a module's error was not measured.
double uniform_noise_rel(int bits, int group) {
  const double levels = std::ldexp(1.0, bits) - 1.0;
  return 2.0 * std::log(static_cast<double>(std::max(group, 2))) / (3.0 * levels * levels);
}

// A module's options: its rank tail and, per bit width, the rounding error.
struct Options {
  std::int64_t out = 0, in = 0, k = 0;
  std::vector<double> tail;  // [k + 1] tail[r]: the relative loss of rank r
  std::array<double, kQuantBits.size() + 1> eps{};  // per kQuantBits, then 16 bits (0)
  // Every option's stored bytes and estimated loss, option (bits b, rank r) at b·k + r − 1: the price's
  // bisection only compares them.
  std::vector<std::int64_t> bytes;
  std::vector<double> loss;
};

constexpr std::array<int, kQuantBits.size() + 1> kAllBits = {2, 3, 4, 8, 16};

double loss_of(const Options& o, std::int64_t r, std::size_t b, bool bi);

Options options_of(const ModuleSpectrum& s, int group, bool bi) {
  Options o;
  o.out = s.out;
  o.in = s.in;
  o.k = std::min(s.out, s.in);
  const double energy = spectrum_energy(s);
  if (!s.quant_rel.empty() && s.quant_rel.size() != kQuantBits.size()) {
    throw ConfigError(fmt::format("{}: rounding errors (expected {} bit widths, got {})", s.name, kQuantBits.size(),
                                  s.quant_rel.size()));
  }
  o.tail.assign(static_cast<std::size_t>(o.k) + 1, 0.0);
  for (std::int64_t r = o.k - 1; r >= 0; --r) {
    const double g = energy > 0 ? s.sigma2[static_cast<std::size_t>(r)] / energy : 0.0;
    o.tail[static_cast<std::size_t>(r)] = o.tail[static_cast<std::size_t>(r) + 1] + g;
  }
  for (std::size_t b = 0; b < kQuantBits.size(); ++b) {
    const double e = s.quant_rel.empty() ? uniform_noise_rel(kQuantBits[b], group) : s.quant_rel[b];
    if (!(e >= 0) || !std::isfinite(e)) {
      throw NumericError(fmt::format("{}: rounding error at {} bits (expected finite and >= 0, got {})", s.name,
                                     kQuantBits[b], e));
    }
    o.eps[b] = e;
  }
  for (std::size_t b = 0; b < kAllBits.size(); ++b) {
    for (std::int64_t r = 1; r <= o.k; ++r) {
      o.bytes.push_back(module_bytes(o.out, o.in, r, kAllBits[b], group, bi));
      o.loss.push_back(loss_of(o, r, b, bi));
    }
  }
  return o;
}

// The estimated relative loss at rank r and bit index b (include/latentllm/compress.hpp).
double loss_of(const Options& o, std::int64_t r, std::size_t b, bool bi) {
  const double tail = std::min(1.0, o.tail[static_cast<std::size_t>(r)]);
  const double a_share = r == o.k ? 0.0 : bi ? static_cast<double>(o.in - r) / static_cast<double>(o.in) : 1.0;
  return tail + (1.0 - tail) * o.eps[b] * (1.0 + a_share);
}

struct Choice {
  std::int64_t rank = 1;
  std::size_t bits = 0;  // index into kAllBits
  std::int64_t bytes = 0;
};

// The option minimising loss + price·bytes (ties: the fewer bytes, then the lower rank and bits).
Choice best_at(const Options& o, double price) {
  Choice best;
  double best_v = std::numeric_limits<double>::infinity();
  std::size_t i = 0;
  for (std::size_t b = 0; b < kAllBits.size(); ++b) {
    for (std::int64_t r = 1; r <= o.k; ++r, ++i) {
      const double v = o.loss[i] + price * static_cast<double>(o.bytes[i]);
      if (v < best_v || (v == best_v && o.bytes[i] < best.bytes)) best_v = v, best = {r, b, o.bytes[i]};
    }
  }
  return best;
}

std::int64_t total_bytes(const std::vector<Choice>& c) {
  std::int64_t n = 0;
  for (const Choice& x : c) n += x.bytes;
  return n;
}

std::vector<Choice> choose_all(const std::vector<Options>& mods, double price) {
  std::vector<Choice> c;
  c.reserve(mods.size());
  for (const Options& o : mods) c.push_back(best_at(o, price));
  return c;
}

}  // namespace

std::int64_t module_bytes(std::int64_t out, std::int64_t in, std::int64_t rank, int bits, int group,
                          bool block_identity) {
  const std::int64_t a_cols = block_identity ? in - rank : in;  // A's stored block [r, d − r] or all of A [r, d]
  if (bits >= 16) return 2 * eval::factored_params(out, in, rank, block_identity);
  const quant::QuantSpec spec{bits, group, quant::Grid::MinMax};
  if (rank == std::min(out, in)) return quant::packed_bytes(out, in, spec);  // the dense weight
  return quant::packed_bytes(out, rank, spec) + (a_cols > 0 ? quant::packed_bytes(rank, a_cols, spec) : 0);
}

RankPlan allocate_ranks_bits(const std::vector<ModuleSpectrum>& spectra, double bpw, int group, Junction j,
                             std::int64_t n_tok) {
  const bool bi = j == Junction::BlockIdentity;
  std::vector<Options> mods;
  mods.reserve(spectra.size());
  std::int64_t dense = 0;
  for (const auto& s : spectra) {
    mods.push_back(options_of(s, group, bi));
    dense += s.out * s.in;
  }
  const auto budget = static_cast<std::int64_t>(std::floor(bpw * static_cast<double>(dense) / 8.0));
  // The cheapest plan (rank 1 at 2 bits) must fit; a price above any loss difference per byte reaches it.
  std::int64_t least = 0;
  for (const Options& o : mods) least += o.bytes.front();  // rank 1 at 2 bits
  if (least > budget) {
    throw ConfigError(fmt::format("--bpw: budget below the smallest plan (expected at least {:.4f} bits per weight: "
                                  "rank 1 at 2 bits in every module, got {})",
                                  8.0 * static_cast<double>(least) / static_cast<double>(dense), bpw));
  }
  // Bisect the price per byte on a log scale: bytes fall as the price rises. Keep the cheapest price
  // whose plan fits.
  // log2 of the price per byte: a module's loss is at most a few units (fractions of its energy), so at
  // 2^10 per byte every module takes its fewest bytes, which fit (checked above).
  double lo = -60, hi = 10;
  std::vector<Choice> fit = choose_all(mods, std::exp2(hi));
  for (int it = 0; it < 80; ++it) {
    const double mid = 0.5 * (lo + hi);
    std::vector<Choice> c = choose_all(mods, std::exp2(mid));
    if (total_bytes(c) <= budget) {
      hi = mid;
      fit = std::move(c);
    } else {
      lo = mid;
    }
  }
  RankPlan plan;
  plan.ratio = 1.0 - static_cast<double>(total_bytes(fit)) / (2.0 * static_cast<double>(dense));
  plan.junction = j;
  plan.n_tok = n_tok;
  for (std::size_t i = 0; i < spectra.size(); ++i) {
    const ModuleSpectrum& s = spectra[i];
    ModulePlan p;
    p.name = s.name;
    p.out = s.out;
    p.in = s.in;
    p.rank = fit[i].rank;
    p.bits = kAllBits[fit[i].bits];
    p.params = eval::factored_params(s.out, s.in, p.rank, bi);
    p.dense_params = s.out * s.in;
    p.macs = eval::factored_macs(s.out, s.in, p.rank, bi, n_tok);
    p.dense_macs = eval::dense_macs(s.out, s.in, n_tok);
    plan.modules.push_back(std::move(p));
  }
  return plan;
}

}  // namespace latentllm::compress
