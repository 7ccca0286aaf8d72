// Joint Q-K (LatentLLM Algorithm 1): monotone alternating updates, exactness at full rank, no worse
// than separate root-cov Q and K at equal parameters (MHA, GQA), bias-aware vs bias-unaware, RoPE-aware
// vs plain on the windowed attention map, the per-head junction and the rank plan.
#include <gtest/gtest.h>

#include <cstdio>

#include "compress/math/joint_qk.hpp"
#include "joint_qk_reference.hpp"
#include "model/rope.hpp"
#include "joint_test_data.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {
namespace {

constexpr int kD = 64, kDh = 16, kN = 1024;

struct Case {
  model::AttentionInfo s;
  QkDense w;
  MatrixD x;  // [n, d]
  calib::SiteStats m;
};

Case make_case(int heads, int kv_heads, bool bias, double mean_scale, bool rope, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Case c;
  c.s = {kD, heads, kv_heads, kDh, rope, 10000.0};
  c.w.wq = test::gaussian(rng, heads * kDh, kD, 0.2);
  c.w.wk = test::gaussian(rng, kv_heads * kDh, kD, 0.2);
  if (bias) {
    c.w.bq = test::gaussian_vec(rng, heads * kDh);
    c.w.bk = test::gaussian_vec(rng, kv_heads * kDh);
  }
  c.x = test::correlated_inputs(rng, kN, kD, mean_scale);
  c.m = calib::SiteStats::of_rows(c.x);
  return c;
}

void expect_monotone(const std::vector<double>& loss) {
  ASSERT_GE(loss.size(), 2u);
  for (std::size_t i = 1; i < loss.size(); ++i) EXPECT_LE(loss[i], loss[i - 1] + 1e-10 * loss[0]) << "iteration " << i;
}

TEST(JointQk, AlternatingUpdatesNeverIncreaseLoss) {
  for (auto [h, hkv, rope] : {std::tuple{4, 4, false}, {4, 2, false}, {4, 2, true}}) {
    const Case c = make_case(h, hkv, false, 0.0, rope, 11);
    QkOptions opt;
    opt.r_q = 20;
    opt.r_k = 12;
    opt.iters = 8;
    opt.rope.window = rope ? 4 : 0;
    opt.local_safeguard = false;
    const QkResult r = joint_qk(c.w, c.s, c.m, opt, "test");
    ASSERT_EQ(r.loss.size(), 9u);
    expect_monotone(r.loss);
    EXPECT_LT(r.loss.back(), r.loss.front());  // the iterations do something
  }
}

// --joint-tol: the iterations stop at the first one that lowers the loss by at most tol of it; the
// iterations before are those of the full run, bit for bit, and what is left is small.
TEST(JointQk, ToleranceStopsAtTheFirstConvergedIteration) {
  const Case c = make_case(4, 2, false, 0.0, false, 11);
  QkOptions opt;
  opt.r_q = 20;
  opt.r_k = 12;
  opt.iters = 30;
  opt.local_safeguard = false;
  const QkResult full = joint_qk(c.w, c.s, c.m, opt, "test");
  opt.tol = 1e-4;
  const QkResult early = joint_qk(c.w, c.s, c.m, opt, "test");
  ASSERT_LT(early.loss.size(), full.loss.size());
  ASSERT_GE(early.loss.size(), 2u);
  const std::size_t k = early.loss.size() - 1;  // the iteration it stopped after
  for (std::size_t i = 0; i <= k; ++i) EXPECT_EQ(early.loss[i], full.loss[i]) << i;
  EXPECT_LE(early.loss[k - 1] - early.loss[k], opt.tol * early.loss[k - 1]);
  for (std::size_t i = 1; i < k; ++i) EXPECT_GT(full.loss[i - 1] - full.loss[i], opt.tol * full.loss[i - 1]) << i;
  EXPECT_LT(early.loss.back() - full.loss.back(), 1e-2 * full.loss.back());
}

TEST(JointQk, FullRankIsExactPerHead) {
  const Case c = make_case(4, 2, false, 0.0, false, 12);
  QkOptions opt;
  opt.r_q = opt.r_k = kD;
  const QkResult r = joint_qk(c.w, c.s, c.m, opt, "test");
  for (int i = 0; i < 4; ++i) {
    const int g = c.s.kv_head(i);
    const MatrixD dense = c.w.wq.middleRows(i * kDh, kDh).transpose() * c.w.wk.middleRows(g * kDh, kDh);
    const MatrixD fq = r.f.q.dense(), fk = r.f.k.dense();
    const MatrixD fact = fq.middleRows(i * kDh, kDh).transpose() * fk.middleRows(g * kDh, kDh);
    EXPECT_LT((fact - dense).norm(), 1e-8 * dense.norm()) << "head " << i;
  }
  EXPECT_EQ(r.f.q.A.rows(), kD);
  EXPECT_EQ(r.f.q.B.rows(), 4 * kDh);
  EXPECT_EQ(r.f.k.B.rows(), 2 * kDh);
}

TEST(JointQk, CovarianceLossEqualsExactLossOnTheData) {
  const Case c = make_case(4, 2, true, 1.0, false, 13);
  QkOptions opt;
  opt.r_q = opt.r_k = 16;
  const QkResult r = joint_qk(c.w, c.s, c.m, opt, "test");
  const double cov = qk_attention_loss(c.w, r.f, c.s, c.m);
  const double exact = qk_attention_loss_exact(c.w, r.f, c.s, c.x, kN, -1);
  EXPECT_NEAR(cov, exact, 1e-8 * exact);
}

// At equal ranks both forms have d·(r_q + r_k) + H·d_h·r_q + H_kv·d_h·r_k parameters. The solver runs
// without the local safeguard, so the bound measures Algorithm 1 itself: measured joint/separate
// attention-map loss 0.25–0.58 (MHA) and 0.56–0.79 (GQA, where one key subspace serves 4 query heads).
void compare_with_separate(int h, int hkv, std::uint64_t seed, const char* label, double bound) {
  const Case c = make_case(h, hkv, false, 0.0, false, seed);
  for (int r : {8, 16, 24, 32}) {
    QkOptions opt;
    opt.r_q = opt.r_k = std::min(r, hkv * kDh);
    opt.r_q = r;
    opt.local_safeguard = false;
    const QkResult joint = joint_qk(c.w, c.s, c.m, opt, "test");
    const QkFactors sep = separate_qk(c.w, c.m, opt.r_q, opt.r_k, kDefaultLambdaRel, "test");
    EXPECT_EQ(joint.f.q.B.size() + joint.f.q.A.size() + joint.f.k.B.size() + joint.f.k.A.size(),
              sep.q.B.size() + sep.q.A.size() + sep.k.B.size() + sep.k.A.size());
    const double lj = qk_attention_loss(c.w, joint.f, c.s, c.m);
    const double ls = qk_attention_loss(c.w, sep, c.s, c.m);
    std::printf("[qk %s] r_q=%d r_k=%d joint/separate attention-map loss = %.4f\n", label, opt.r_q, opt.r_k, lj / ls);
    EXPECT_LT(lj, bound * ls) << label << " r=" << r;
  }
}

TEST(JointQk, BeatsSeparateRootCovMha) { compare_with_separate(4, 4, 21, "MHA", 0.7); }
TEST(JointQk, BeatsSeparateRootCovGqa) { compare_with_separate(8, 2, 22, "GQA", 0.85); }

TEST(JointQk, BiasAwareBeatsBiasUnawareWithNonZeroMean) {
  const Case c = make_case(4, 4, true, 3.0, false, 31);
  for (int r : {8, 16, 32}) {
    QkOptions opt;
    opt.r_q = opt.r_k = r;
    const QkResult aware = joint_qk(c.w, c.s, c.m, opt, "test");
    opt.bias_aware = false;
    const QkResult unaware = joint_qk(c.w, c.s, c.m, opt, "test");
    const double la = qk_attention_loss(c.w, aware.f, c.s, c.m);
    const double lu = qk_attention_loss(c.w, unaware.f, c.s, c.m);
    const double ls = qk_attention_loss(c.w, separate_qk(c.w, c.m, r, r, kDefaultLambdaRel, "test"), c.s, c.m);
    std::printf("[qk bias] r=%d aware/unaware attention-map loss = %.4f, aware/separate (bias update) = %.4f\n", r,
                la / lu, la / ls);
    EXPECT_LT(la, ls);
    EXPECT_LT(la, lu) << "r=" << r;
    EXPECT_EQ(aware.f.q.bias.size(), 4 * kDh);
    EXPECT_EQ(aware.f.q.A.cols(), kD);
  }
}

TEST(JointQk, RopeRotationMatchesHfRotateHalf) {
  const MatrixD r = model::rope_rotation(model::RopeSpec{}, kDh, 5.0);
  EXPECT_LT((model::rope_rotation(model::RopeSpec{}, kDh, 2.0) * model::rope_rotation(model::RopeSpec{}, kDh, 3.0) - r).norm(), 1e-12);
  EXPECT_LT((r.transpose() * r - MatrixD::Identity(kDh, kDh)).norm(), 1e-12);
  std::mt19937_64 rng(5);
  const VectorD q = test::gaussian_vec(rng, kDh);
  VectorD rot(kDh);  // q·cos + rotate_half(q)·sin
  for (int j = 0; j < kDh; ++j) {
    const double th = 5.0 * std::pow(10000.0, -2.0 * (j % (kDh / 2)) / kDh);
    const double half = j < kDh / 2 ? -q(j + kDh / 2) : q(j - kDh / 2);
    rot(j) = q(j) * std::cos(th) + half * std::sin(th);
  }
  EXPECT_LT((r * q - rot).norm(), 1e-12);
}

TEST(JointQk, RopeAwareBeatsPlainOnWindowedMap) {
  const Case c = make_case(4, 2, false, 0.0, true, 41);
  const int w = 8;
  QkOptions opt;
  opt.r_q = opt.r_k = 16;
  const QkResult plain = joint_qk(c.w, c.s, c.m, opt, "test");
  opt.rope.window = w;
  const QkResult aware = joint_qk(c.w, c.s, c.m, opt, "test");
  const double lp = qk_attention_loss_exact(c.w, plain.f, c.s, c.x, 128, w);
  const double la = qk_attention_loss_exact(c.w, aware.f, c.s, c.x, 128, w);
  const RopeWindow rw{w, false, {}};
  const double cp = qk_attention_loss(c.w, plain.f, c.s, c.m, rw);
  const double ca = qk_attention_loss(c.w, aware.f, c.s, c.m, rw);
  std::printf("[qk rope] w=%d aware/plain windowed loss: exact %.4f, covariance %.4f\n", w, la / lp, ca / cp);
  EXPECT_LT(la, lp);
  EXPECT_LT(ca, cp);
}

void check_junction(int h, int hkv, QkJunction side) {
  const Case c = make_case(h, hkv, true, 1.0, false, 51);
  QkOptions opt;
  opt.r_q = opt.r_k = 24;
  const QkResult r = joint_qk(c.w, c.s, c.m, opt, "test");
  const QkJunctionResult j = apply_qk_junction(r.f, c.s, side, "test");
  EXPECT_NEAR(qk_attention_loss(c.w, j.f, c.s, c.m), qk_attention_loss(c.w, r.f, c.s, c.m),
              1e-8 * qk_attention_loss(c.w, r.f, c.s, c.m));
  const MatrixD& b = side == QkJunction::Query ? j.f.q.B : j.f.k.B;
  ASSERT_EQ(static_cast<int>(j.identity_cols.size()), side == QkJunction::Query ? h : hkv);
  for (std::size_t hd = 0; hd < j.identity_cols.size(); ++hd) {
    for (int e = 0; e < kDh; ++e) {
      const VectorD col = b.block(static_cast<Eigen::Index>(hd) * kDh, j.identity_cols[hd][e], kDh, 1);
      EXPECT_EQ(col, VectorD::Unit(kDh, e));  // exact, not approximate
    }
  }
  const std::int64_t saved = qk_params(c.s, 24, 24, QkJunction::None) - qk_params(c.s, 24, 24, side);
  EXPECT_EQ(saved, static_cast<std::int64_t>(j.identity_cols.size()) * kDh * kDh);
}

TEST(JointQk, PerHeadJunctionKeepsScoresAndHoldsIdentity) {
  check_junction(4, 4, QkJunction::Query);
  check_junction(4, 4, QkJunction::Key);
  check_junction(8, 2, QkJunction::Key);
  const Case c = make_case(4, 2, false, 0.0, true, 52);
  QkOptions opt;
  opt.r_q = opt.r_k = 24;
  const QkResult r = joint_qk(c.w, c.s, c.m, opt, "test");
  EXPECT_THROW(apply_qk_junction(r.f, c.s, QkJunction::Key, "test"), ConfigError);  // RoPE
  model::AttentionInfo gqa = c.s;
  gqa.rope = false;
  EXPECT_THROW(apply_qk_junction(r.f, gqa, QkJunction::Query, "test"), ConfigError);  // GQA query side
}

TEST(JointQk, RankPlanIsTheLargestFittingRank) {
  const model::AttentionInfo mha{512, 8, 8, 64, false, 1e4};
  const model::AttentionInfo gqa{512, 8, 2, 64, false, 1e4};
  for (const model::AttentionInfo& s : {mha, gqa}) {
    for (QkJunction j : {QkJunction::None, QkJunction::Key}) {
      for (double ratio : {0.05, 0.2, 0.4, 0.9}) {
        const QkRankPlan p = plan_qk_ranks(s, ratio, j);
        const double budget = (1 - ratio) * static_cast<double>(qk_dense_params(s));
        EXPECT_LE(static_cast<double>(p.params), budget);
        EXPECT_EQ(p.params, qk_params(s, p.r_q, p.r_k, p.junction));
        const int next = std::max(p.r_q, p.r_k) + 1;
        if (next <= s.hidden) {
          const int rq = std::min(next, s.hidden), rk = std::min(next, s.num_kv_heads * s.head_dim);
          EXPECT_GT(static_cast<double>(qk_params(s, rq, rk, j)), budget);
        }
      }
    }
  }
  EXPECT_THROW(plan_qk_ranks(mha, 1.2, QkJunction::None), ConfigError);
  model::AttentionInfo rope = mha;
  rope.rope = true;
  EXPECT_THROW(plan_qk_ranks(rope, 0.2, QkJunction::Key), ConfigError);
}

}  // namespace
}  // namespace latentllm::compress
