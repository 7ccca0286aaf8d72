// Rank planning: exact parameter budgets, monotonicity, MACs/FLOPs, errors (issue 3, item 5).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compress/plan/rank_plan.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"

namespace latentllm::compress {
namespace {

constexpr Junction kBI = Junction::BlockIdentity;
constexpr Junction kPlain = Junction::Identity;

TEST(RankPlan, ParameterCounts) {
  EXPECT_EQ(eval::dense_params(768, 3072), 768 * 3072);
  EXPECT_EQ(eval::factored_params(768, 3072, 100, false), 100 * (768 + 3072));
  EXPECT_EQ(eval::factored_params(768, 3072, 100, true), 100 * (768 + 3072) - 100 * 100);
  for (Junction j : {Junction::SInv, Junction::SqrtSInv}) EXPECT_EQ(eval::factored_params(10, 20, 5, j == Junction::BlockIdentity), 150);
  // Full rank with block identity stores exactly d'·d weights.
  EXPECT_EQ(eval::factored_params(64, 256, 64, true), 64 * 256);
}

TEST(RankPlan, HandComputedRanks) {
  // [64, 64] at R = 0.5: budget 2048. Plain: 128·r ≤ 2048 → 16. Block identity: 128·r − r² ≤ 2048 → 18
  // (18: 1980, 19: 2071).
  EXPECT_EQ(rank_for_ratio(64, 64, 0.5, kPlain, "m"), 16);
  EXPECT_EQ(rank_for_ratio(64, 64, 0.5, kBI, "m"), 18);
  // [64, 4096] at R = 0.05: budget 249036.8. Plain: 4160·r → 59. Block identity → 60 (246000; 61: 250039).
  EXPECT_EQ(rank_for_ratio(64, 4096, 0.05, kPlain, "m"), 59);
  EXPECT_EQ(rank_for_ratio(64, 4096, 0.05, kBI, "m"), 60);
  // Exact boundary in decimal: [100, 100] at R = 0.2 → budget 8000 = 200·40: plain r = 40 exactly.
  EXPECT_EQ(rank_for_ratio(100, 100, 0.2, kPlain, "m"), 40);
  // [768, 768] at R = 0.9: budget 58982.4 → plain 38 (58368), block identity 39 (58383; 40: 59840).
  EXPECT_EQ(rank_for_ratio(768, 768, 0.9, kPlain, "m"), 38);
  EXPECT_EQ(rank_for_ratio(768, 768, 0.9, kBI, "m"), 39);
}

TEST(RankPlan, RankIsTheLargestWithinBudget) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {64, 64}, {256, 1024}, {1024, 256}, {768, 3072}, {4096, 11008}, {11008, 4096}, {48, 172}, {24, 40}};
  for (auto [out, in] : shapes) {
    for (Junction j : {kPlain, kBI}) {
      std::int64_t prev = std::numeric_limits<std::int64_t>::max();
      for (int pct = 5; pct <= 90; ++pct) {
        const double ratio = pct / 100.0;
        const std::int64_t r = rank_for_ratio(out, in, ratio, j, "m");
        const double budget = (1.0 - ratio) * static_cast<double>(out * in);
        ASSERT_GE(r, 1);
        ASSERT_LE(r, std::min(out, in));
        EXPECT_LE(static_cast<double>(eval::factored_params(out, in, r, j == Junction::BlockIdentity)), budget * (1 + 1e-12)) << out << "x" << in;
        if (r < std::min(out, in)) {
          EXPECT_GT(static_cast<double>(eval::factored_params(out, in, r + 1, j == Junction::BlockIdentity)), budget) << out << "x" << in;
        }
        EXPECT_LE(r, prev) << "rank must not grow with the ratio";
        prev = r;
        if (j == kBI) {
          EXPECT_GE(r, rank_for_ratio(out, in, ratio, kPlain, "m"));
        }
      }
    }
  }
}

TEST(RankPlan, BudgetSolverMatchesBruteForce) {
  for (std::int64_t out : {3, 17, 40}) {
    for (std::int64_t in : {5, 17, 33}) {
      for (Junction j : {kPlain, kBI}) {
        for (double budget = 0; budget <= static_cast<double>(out * in); budget += 7.5) {
          std::int64_t brute = 0;
          for (std::int64_t r = 1; r <= std::min(out, in); ++r) {
            if (static_cast<double>(eval::factored_params(out, in, r, j == Junction::BlockIdentity)) <= budget) brute = r;
          }
          EXPECT_EQ(max_rank_for_budget(out, in, budget, j), brute) << out << "x" << in << " " << budget;
        }
      }
    }
  }
}

TEST(RankPlan, BadRatiosAndTinyModules) {
  for (double bad : {0.0, 1.0, -0.1, 1.5, std::nan("")}) {
    EXPECT_THROW(rank_for_ratio(64, 64, bad, kBI, "m"), ConfigError) << bad;
    EXPECT_THROW(plan_ranks({{"m", 64, 64}}, bad, kBI), ConfigError) << bad;
  }
  // [2, 2] at R = 0.9 leaves 0.4 weights: not even rank 1 (3 or 4 weights) fits.
  try {
    plan_ranks({{"layers.0.q_proj", 64, 64}, {"layers.0.tiny", 2, 2}}, 0.9, kBI);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.tiny"), std::string::npos);
  }
  EXPECT_THROW(rank_for_ratio(0, 64, 0.5, kBI, "m"), ConfigError);
}

TEST(RankPlan, PlanTotalsMacsAndFlops) {
  const std::vector<ModuleShape> modules = {
      {"q_proj", 768, 768}, {"fc1", 3072, 768}, {"fc2", 768, 3072}};
  const RankPlan plan = plan_ranks(modules, 0.3, kBI, 128);
  ASSERT_EQ(plan.modules.size(), 3u);
  std::int64_t params = 0, dense = 0;
  for (const ModulePlan& m : plan.modules) {
    EXPECT_EQ(m.params, eval::factored_params(m.out, m.in, m.rank, true));
    EXPECT_EQ(m.macs, 128 * m.params);
    EXPECT_EQ(m.dense_macs, 128 * m.out * m.in);
    params += m.params;
    dense += m.dense_params;
  }
  EXPECT_EQ(plan.modules[1].name, "fc1");
  EXPECT_EQ(plan.modules[1].rank, plan.modules[2].rank);  // transposed shapes plan alike
  EXPECT_EQ(plan.params(), params);
  EXPECT_EQ(plan.dense_params(), dense);
  EXPECT_EQ(plan.flops(), 2 * plan.macs());
  EXPECT_EQ(plan.dense_flops(), 2 * 128 * dense);
  EXPECT_GE(plan.achieved_ratio(), 0.3);
  EXPECT_LT(plan.achieved_ratio(), 0.31);
  EXPECT_EQ(eval::factored_macs(768, 768, 10, false, 128), 128 * 10 * 1536);
  EXPECT_EQ(eval::dense_macs(768, 768, 128), 128 * 768 * 768);
}

}  // namespace
}  // namespace latentllm::compress
