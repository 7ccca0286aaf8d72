// Global rank allocation (allocate_ranks): optimal against exhaustive search where the theory says it
// must be, within one hull step of it elsewhere, the uniform budget never exceeded, per-role budgets
// with the grouped score, and its option names.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "compress/plan/sensitivity.hpp"
#include "compress/math/whitening.hpp"
#include "joint_test_data.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"

namespace latentllm::compress {
namespace {

constexpr Junction kBI = Junction::BlockIdentity;
constexpr Junction kPlain = Junction::Identity;

ModuleSpectrum spectrum(std::string name, std::int64_t out, std::int64_t in, std::vector<double> s2,
                        model::Role role = model::Role::Q) {
  return {std::move(name), role, out, in, std::move(s2), {}};
}

// Σ over modules of the normalized gains of ranks 1..r (the objective the greedy maximizes).
double objective(const std::vector<ModuleSpectrum>& mods, const std::vector<std::int64_t>& ranks) {
  double total = 0;
  for (std::size_t m = 0; m < mods.size(); ++m) {
    double energy = 0, kept = 0;
    for (std::size_t i = 0; i < mods[m].sigma2.size(); ++i) {
      energy += mods[m].sigma2[i];
      if (static_cast<std::int64_t>(i) < ranks[m]) kept += mods[m].sigma2[i];
    }
    total += energy > 0 ? kept / energy : 0;
  }
  return total;
}

std::int64_t params(const std::vector<ModuleSpectrum>& mods, const std::vector<std::int64_t>& ranks, Junction j) {
  std::int64_t p = 0;
  for (std::size_t m = 0; m < mods.size(); ++m)
    p += eval::factored_params(mods[m].out, mods[m].in, ranks[m], j == kBI);
  return p;
}

// The best objective over every rank vector (1 ≤ r ≤ min(d, d')) within `budget` weights.
double brute_force(const std::vector<ModuleSpectrum>& mods, std::int64_t budget, Junction j) {
  std::vector<std::int64_t> r(mods.size(), 1);
  double best = -1;
  std::function<void(std::size_t)> walk = [&](std::size_t m) {
    if (m == mods.size()) {
      if (params(mods, r, j) <= budget) best = std::max(best, objective(mods, r));
      return;
    }
    for (r[m] = 1; r[m] <= std::min(mods[m].out, mods[m].in); ++r[m]) walk(m + 1);
  };
  walk(0);
  return best;
}

std::vector<std::int64_t> ranks_of(const RankPlan& p) {
  std::vector<std::int64_t> r;
  for (const auto& m : p.modules) r.push_back(m.rank);
  return r;
}

std::int64_t uniform_params(const std::vector<ModuleSpectrum>& mods, double ratio, Junction j) {
  std::vector<ModuleShape> shapes;
  for (const auto& m : mods) shapes.push_back({m.name, m.out, m.in});
  return plan_ranks(shapes, ratio, j).params();
}

// Every step costs the same (identity junction, equal shapes) and the gains fall with r: the best
// plan keeps the largest gains overall, which the greedy must find.
TEST(RankAlloc, GreedyIsOptimalWithEqualStepCosts) {
  const std::vector<ModuleSpectrum> mods = {
      spectrum("a", 6, 8, {9, 5, 3, 2, 1, 0.5}),
      spectrum("b", 6, 8, {4, 4, 3.5, 3, 1, 0.1}),
      spectrum("c", 6, 8, {20, 1, 0.5, 0.2, 0.1, 0.05}),
  };
  const RankPlan plan = allocate_ranks(mods, 0.3, kPlain, AllocScore::Relative);
  const std::int64_t budget = uniform_params(mods, 0.3, kPlain);
  EXPECT_EQ(budget, 3 * 2 * 14);  // uniform: rank 2 each
  EXPECT_EQ(plan.params(), budget);
  EXPECT_DOUBLE_EQ(objective(mods, ranks_of(plan)), brute_force(mods, budget, kPlain));
  EXPECT_EQ(ranks_of(plan), (std::vector<std::int64_t>{2, 3, 1}));
}

// Block identity: a step r → r+1 of a [8, 8] module costs 15 − 2r, so a flat spectrum gains more per
// weight the higher its rank. A greedy on single steps would never start it (at 30 % it would end at
// 1.12 instead of 1.375); the hull sees the whole run at once, and the run that still fits when the
// whole one does not, and takes it when it pays, which is the optimum at 10–30 %. At 40 % the optimum
// (both at rank 2) is a knapsack packing no greedy finds: one step short (0.945 against 0.95).
TEST(RankAlloc, HullFindsStepsWhoseEfficiencyRises) {
  const std::vector<ModuleSpectrum> mods = {
      spectrum("flat", 8, 8, {1, 1, 1, 1, 1, 1, 1, 1}),
      spectrum("decay", 8, 8, {0.5, 0.2, 0.12, 0.08, 0.05, 0.03, 0.015, 0.005}),
  };
  for (double ratio : {0.1, 0.2, 0.3, 0.4}) {
    const RankPlan plan = allocate_ranks(mods, ratio, kBI, AllocScore::Relative);
    const std::int64_t budget = uniform_params(mods, ratio, kBI);
    EXPECT_LE(plan.params(), budget) << ratio;
    const double best = brute_force(mods, budget, kBI), got = objective(mods, ranks_of(plan));
    if (ratio < 0.35) {
      EXPECT_DOUBLE_EQ(got, best) << ratio;
    } else {
      EXPECT_NEAR(got, best - 0.005, 1e-12) << ratio;
    }
  }
  EXPECT_EQ(ranks_of(allocate_ranks(mods, 0.3, kBI, AllocScore::Relative)), (std::vector<std::int64_t>{7, 1}));
}

// Random spectra and shapes: never above the uniform total, ranks in range, and within the gain of one
// hull step of the exhaustive optimum (the greedy is optimal for the continuous relaxation).
TEST(RankAlloc, RandomCasesAreWithinOneStepOfTheOptimum) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> dim(2, 7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<ModuleSpectrum> mods;
    for (int m = 0; m < 3; ++m) {
      const std::int64_t out = dim(rng), in = dim(rng);
      std::vector<double> s2(static_cast<std::size_t>(std::min(out, in)));
      for (auto& v : s2) v = std::pow(u(rng), 3.0);
      std::sort(s2.rbegin(), s2.rend());
      mods.push_back(spectrum("m" + std::to_string(m), out, in, s2));
    }
    const Junction j = trial % 2 ? kBI : kPlain;
    const double ratio = 0.15 + 0.05 * (trial % 5);
    RankPlan plan;
    try {
      plan = allocate_ranks(mods, ratio, j, AllocScore::Relative);
    } catch (const ConfigError&) {
      continue;  // the uniform plan itself has no rank for a module this small
    }
    const std::int64_t budget = uniform_params(mods, ratio, j);
    ASSERT_LE(plan.params(), budget) << trial;
    for (std::size_t m = 0; m < mods.size(); ++m) {
      EXPECT_GE(plan.modules[m].rank, 1);
      EXPECT_LE(plan.modules[m].rank, std::min(mods[m].out, mods[m].in));
    }
    // A module's largest single hull gain is at most its whole normalized energy, 1.
    EXPECT_GE(objective(mods, ranks_of(plan)), brute_force(mods, budget, j) - 1.0 - 1e-12) << trial;
    // Nothing left that a single step could still buy with a positive gain.
    const std::int64_t left = budget - plan.params();
    for (std::size_t m = 0; m < mods.size(); ++m) {
      const std::int64_t r = plan.modules[m].rank;
      if (r >= std::min(mods[m].out, mods[m].in) || mods[m].sigma2[static_cast<std::size_t>(r)] <= 0) continue;
      EXPECT_GT(eval::factored_params(mods[m].out, mods[m].in, r + 1, j == kBI) -
                    eval::factored_params(mods[m].out, mods[m].in, r, j == kBI),
                left)
          << trial;
    }
  }
}

TEST(RankAlloc, GroupedKeepsEachRoleWithinItsUniformTotal) {
  using model::Role;
  const std::vector<ModuleSpectrum> mods = {
      spectrum("q0", 8, 8, {30, 1, 1, 1, 1, 1, 1, 1}, Role::Q), spectrum("q1", 8, 8, {1, 1, 1, 1, 1, 1, 1, 1}, Role::Q),
      spectrum("o0", 8, 8, {9, 8, 7, 6, 5, 4, 3, 2}, Role::O), spectrum("o1", 8, 8, {50, 1, 0, 0, 0, 0, 0, 0}, Role::O),
  };
  const RankPlan rel = allocate_ranks(mods, 0.4, kBI, AllocScore::Relative);
  const RankPlan grp = allocate_ranks(mods, 0.4, kBI, AllocScore::Grouped);
  const std::int64_t per_role = uniform_params({mods[0], mods[1]}, 0.4, kBI);
  EXPECT_LE(grp.modules[0].params + grp.modules[1].params, per_role);
  EXPECT_LE(grp.modules[2].params + grp.modules[3].params, per_role);
  EXPECT_LE(rel.params(), 2 * per_role);
  EXPECT_NE(ranks_of(rel), ranks_of(grp));  // the relative score moves weights between the roles here
}

TEST(RankAlloc, ZeroSpectrumStaysAtRankOne) {
  const std::vector<ModuleSpectrum> mods = {spectrum("dead", 8, 8, std::vector<double>(8, 0.0)),
                                            spectrum("live", 8, 8, {5, 4, 3, 2, 1, 0.5, 0.2, 0.1})};
  const RankPlan plan = allocate_ranks(mods, 0.3, kBI, AllocScore::Relative);
  EXPECT_EQ(plan.modules[0].rank, 1);
  EXPECT_GT(plan.modules[1].rank, rank_for_ratio(8, 8, 0.3, kBI, "live"));
}

TEST(RankAlloc, BadSpectraAndNamesAreRejected) {
  EXPECT_THROW(allocate_ranks({spectrum("short", 8, 8, {1, 2})}, 0.3, kBI, AllocScore::Relative), ConfigError);
  EXPECT_THROW(allocate_ranks({spectrum("nan", 4, 4, {1, std::nan(""), 0, 0})}, 0.3, kPlain, AllocScore::Relative),
               NumericError);
  EXPECT_THROW(allocate_ranks({spectrum("m", 8, 8, std::vector<double>(8, 1.0))}, 1.5, kBI, AllocScore::Relative),
               ConfigError);
  EXPECT_EQ(parse_rank_alloc("global"), RankAlloc::Global);
  EXPECT_EQ(parse_rank_alloc("uniform"), RankAlloc::Uniform);
  EXPECT_EQ(parse_alloc_score("grouped"), AllocScore::Grouped);
  EXPECT_THROW(parse_rank_alloc("local"), ConfigError);
  EXPECT_THROW(parse_alloc_score("absolute"), ConfigError);
}

// The pre-pass's two routes to σ_i² of W·P (compress/plan/sensitivity.hpp): the output side, W·(C + λI)·Wᵀ
// from the module's outputs, gives the input side's values (whitening of C, Gram of W·F) for a wide
// module, centered (bias updated) or not. The output side sums float products in double, so the
// values agree to float's rounding; a wrong λ, centering or transpose moves them by far more.
TEST(RankAlloc, OutputSideSpectrumEqualsTheWhitenedOne) {
  std::mt19937_64 rng(5);
  constexpr int n = 3000, d = 96, dout = 24;
  const MatrixF x = test::correlated_inputs(rng, n, d, 3.0).cast<float>();  // [n, d] with a mean
  const MatrixF w = test::gaussian(rng, dout, d).cast<float>();             // [d', d]
  const MatrixD xd = x.cast<double>(), wd = w.cast<double>();
  for (const bool centered : {false, true}) {
    const calib::SiteStats st = calib::SiteStats::of_rows(xd);
    const MatrixD c = centered ? st.centered() : st.xtx;
    for (const double lambda_rel : {1e-4, 0.5}) {
      const auto in_side = whitened_spectrum(wd, whiten(c, lambda_rel, "test"), "test");
      const auto out_side = output_spectrum(w, x, centered, lambda_rel, "test");
      ASSERT_EQ(out_side.size(), static_cast<std::size_t>(dout));
      ASSERT_EQ(in_side.size(), out_side.size());
      for (std::size_t i = 0; i < in_side.size(); ++i) {
        EXPECT_NEAR(out_side[i], in_side[i], 1e-5 * in_side[0]) << "centered " << centered << " λ " << lambda_rel << " i " << i;
      }
      EXPECT_GT(in_side.back(), 3e-5 * in_side[0]);  // a tail above the tolerance: the comparison sees it
    }
  }
  // Centering matters here (the inputs have a mean): the two forms differ by far more than the tolerance.
  EXPECT_GT(std::abs(output_spectrum(w, x, true, 1e-4, "t")[0] - output_spectrum(w, x, false, 1e-4, "t")[0]),
            1e-2 * output_spectrum(w, x, false, 1e-4, "t")[0]);
  EXPECT_THROW(output_spectrum(MatrixF(d, dout), x, false, 1e-4, "t"), Error);  // not a wide module of x
}

// The route choice: down projections (d' < 0.41 d) only.
TEST(RankAlloc, OutputSideIsChosenForWideModulesOnly) {
  EXPECT_TRUE(output_side_cheaper(4096, 14336));   // Llama-3-8B down_proj
  EXPECT_TRUE(output_side_cheaper(2048, 8192));    // OPT-1.3B fc2
  EXPECT_FALSE(output_side_cheaper(4096, 4096));   // q_proj: square
  EXPECT_FALSE(output_side_cheaper(14336, 4096));  // up_proj: tall
  EXPECT_FALSE(output_side_cheaper(1024, 2048));   // d' = d / 2 > (√2 − 1)·d
}

}  // namespace
}  // namespace latentllm::compress
