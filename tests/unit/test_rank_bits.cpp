// One budget in bytes (allocate_ranks_bits, --bpw): the budget never exceeded, the plan optimal against
// exhaustive search for the bytes it uses, more budget never worse, a module whose weight rounds worse
// kept at more bits, the whole budget giving the dense model back, the byte count by hand.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "test_support.hpp"

namespace latentllm::compress {
namespace {

constexpr Junction kBI = Junction::BlockIdentity;
constexpr std::array<int, 5> kBits = {2, 3, 4, 8, 16};

ModuleSpectrum spectrum(std::string name, std::int64_t out, std::int64_t in, std::vector<double> s2,
                        std::vector<double> quant_rel = {}) {
  return {std::move(name), model::Role::Q, out, in, std::move(s2), std::move(quant_rel)};
}

// The estimate the allocation minimises (include/latentllm/compress.hpp), written out again.
double estimate(const ModuleSpectrum& s, std::int64_t r, int bits, bool bi) {
  double energy = 0, tail = 0;
  for (std::size_t i = 0; i < s.sigma2.size(); ++i) {
    energy += s.sigma2[i];
    if (static_cast<std::int64_t>(i) >= r) tail += s.sigma2[i];
  }
  tail = energy > 0 ? tail / energy : 0;
  if (bits == 16) return tail;
  const auto b = static_cast<std::size_t>(std::find(kQuantBits.begin(), kQuantBits.end(), bits) - kQuantBits.begin());
  const double share = bi ? static_cast<double>(s.in - r) / static_cast<double>(s.in) : 1.0;
  return tail + (1 - tail) * s.quant_rel[b] * (1 + share);
}

struct Totals {
  double loss = 0;
  std::int64_t bytes = 0;
};

Totals totals(const std::vector<ModuleSpectrum>& mods, const RankPlan& p, int group) {
  Totals t;
  for (std::size_t i = 0; i < mods.size(); ++i) {
    const ModulePlan& mp = p.modules[i];
    t.loss += estimate(mods[i], mp.rank, mp.bits, true);
    t.bytes += module_bytes(mp.out, mp.in, mp.rank, mp.bits, group, true);
  }
  return t;
}

std::int64_t dense_params(const std::vector<ModuleSpectrum>& mods) {
  std::int64_t n = 0;
  for (const auto& m : mods) n += m.out * m.in;
  return n;
}

std::vector<ModuleSpectrum> random_modules(std::uint32_t seed, int n, std::int64_t max_dim) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> dim(2, max_dim);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<ModuleSpectrum> mods;
  for (int m = 0; m < n; ++m) {
    const std::int64_t out = dim(rng), in = dim(rng);
    std::vector<double> s2;
    double v = 1.0;
    for (std::int64_t i = 0; i < std::min(out, in); ++i) s2.push_back(v *= 0.2 + 0.8 * u(rng));
    std::vector<double> q;
    const double scale = 0.5 + 4 * u(rng);  // modules round differently
    for (int b : kQuantBits) q.push_back(scale * 0.3 / ((1 << b) - 1) / ((1 << b) - 1));
    mods.push_back(spectrum("m" + std::to_string(m), out, in, s2, q));
  }
  return mods;
}

TEST(RankBits, FactorBytesByHand) {
  // B [8, 4]: one group of 8 codes per row (4 padded), 4 bytes of codes + 4 of scale and zero.
  // A's stored block [4, 12]: two groups per row.
  EXPECT_EQ(module_bytes(8, 16, 4, 4, 8, true), 8 * 1 * (4 + 4) + 4 * 2 * (4 + 4));
  EXPECT_EQ(module_bytes(8, 16, 4, 4, 8, false), 8 * 1 * (4 + 4) + 4 * 2 * (4 + 4));  // A [4, 16]: still 2 groups
  EXPECT_EQ(module_bytes(8, 16, 4, 16, 8, true), 2 * 4 * (8 + 16 - 4));
  EXPECT_EQ(module_bytes(8, 8, 8, 8, 8, true), 8 * (8 + 4));  // full rank: A stores nothing
}

TEST(RankBits, BudgetNeverExceededAndBitsFromTheSet) {
  const std::vector<ModuleSpectrum> mods = random_modules(7, 12, 48);
  for (double bpw : {2.5, 3.0, 4.0, 6.0, 9.0}) {
    const RankPlan p = allocate_ranks_bits(mods, bpw, 8, kBI);
    ASSERT_EQ(p.modules.size(), mods.size());
    const Totals t = totals(mods, p, 8);
    EXPECT_LE(t.bytes, static_cast<std::int64_t>(bpw * static_cast<double>(dense_params(mods)) / 8)) << bpw;
    for (const auto& mp : p.modules) {
      EXPECT_NE(std::find(kBits.begin(), kBits.end(), mp.bits), kBits.end());
      EXPECT_GE(mp.rank, 1);
      EXPECT_LE(mp.rank, std::min(mp.out, mp.in));
    }
  }
}

TEST(RankBits, NoPlanOfAsManyBytesLosesLess) {
  // Three small modules, every (rank, bits) of each enumerated: the allocation is the best plan among
  // those of at most its own bytes (the Lagrangian's guarantee).
  // (Modules this small store more bytes quantized than at 16 bits: the budgets are in that range.)
  const std::vector<ModuleSpectrum> mods = random_modules(3, 3, 5);
  for (double bpw : {22.0, 26.0, 32.0}) {
    const RankPlan p = allocate_ranks_bits(mods, bpw, 8, kBI);
    const Totals got = totals(mods, p, 8);
    double best = 1e300;
    std::vector<std::pair<std::int64_t, int>> c(mods.size());
    std::function<void(std::size_t, double, std::int64_t)> walk = [&](std::size_t m, double loss, std::int64_t bytes) {
      if (bytes > got.bytes) return;
      if (m == mods.size()) {
        best = std::min(best, loss);
        return;
      }
      for (std::int64_t r = 1; r <= std::min(mods[m].out, mods[m].in); ++r)
        for (int b : kBits)
          walk(m + 1, loss + estimate(mods[m], r, b, true),
               bytes + module_bytes(mods[m].out, mods[m].in, r, b, 8, true));
    };
    walk(0, 0.0, 0);
    EXPECT_NEAR(got.loss, best, 1e-12) << bpw;
  }
}

TEST(RankBits, MoreBudgetNeverLosesMore) {
  const std::vector<ModuleSpectrum> mods = random_modules(11, 20, 64);
  double last = 1e300;
  for (double bpw : {2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 8.0, 12.0}) {
    const double loss = totals(mods, allocate_ranks_bits(mods, bpw, 8, kBI), 8).loss;
    EXPECT_LE(loss, last) << bpw;
    last = loss;
  }
}

TEST(RankBits, AWeightThatRoundsWorseKeepsMoreBits) {
  std::vector<double> s2;
  for (int i = 0; i < 32; ++i) s2.push_back(1.0 / (1 + i));
  std::vector<double> q;
  for (int b : kQuantBits) q.push_back(0.3 / ((1 << b) - 1) / ((1 << b) - 1));
  std::vector<double> q10 = q;
  for (double& v : q10) v *= 10;
  const std::vector<ModuleSpectrum> mods = {spectrum("calm", 32, 32, s2, q), spectrum("rough", 32, 32, s2, q10)};
  const RankPlan p = allocate_ranks_bits(mods, 4.0, 8, kBI);
  EXPECT_GE(module_bytes(32, 32, p.modules[1].rank, p.modules[1].bits, 8, true),
            module_bytes(32, 32, p.modules[0].rank, p.modules[0].bits, 8, true));
  EXPECT_GE(p.modules[1].bits, p.modules[0].bits);
}

TEST(RankBits, SixteenBitsPerWeightIsTheDenseModel) {
  const std::vector<ModuleSpectrum> mods = random_modules(5, 6, 24);
  const RankPlan p = allocate_ranks_bits(mods, 16.0, 8, kBI);
  for (const auto& mp : p.modules) {
    EXPECT_EQ(mp.rank, std::min(mp.out, mp.in)) << mp.name;
    EXPECT_EQ(mp.bits, 16) << mp.name;
  }
}

TEST(RankBits, UnmeasuredModulesTakeTheUniformNoiseEstimate) {
  // A flat spectrum: 16 bits within 4 bits per weight keeps rank 8 of 64 (7/8 of the energy lost);
  // 2 bits in groups of 16 at full rank cost 4 bits per weight and ε = 2 ln 16 / 27 ≈ 0.21.
  std::vector<double> s2(64, 1.0);
  const RankPlan p = allocate_ranks_bits({spectrum("a", 64, 64, s2)}, 4.0, 16, kBI);
  EXPECT_LE(module_bytes(64, 64, p.modules[0].rank, p.modules[0].bits, 16, true), 64 * 64 * 4 / 8);
  EXPECT_EQ(p.modules[0].bits, 2);
  EXPECT_EQ(p.modules[0].rank, 64);
}

TEST(RankBits, BudgetBelowTheSmallestPlanIsAConfigError) {
  const std::vector<ModuleSpectrum> mods = {spectrum("a", 16, 16, std::vector<double>(16, 1.0))};
  // Rank 1 at 2 bits in groups of 8: B [16, 1] and A [1, 15] take 16·6 + 2·6 = 108 bytes, 3.375 bits per weight.
  EXPECT_EQ(test::error_of<ConfigError>([&] { (void)allocate_ranks_bits(mods, 3.0, 8, kBI); }),
            "--bpw: budget below the smallest plan (expected at least 3.3750 bits per weight: rank 1 at 2 bits in "
            "every module, got 3)");
}

}  // namespace
}  // namespace latentllm::compress
