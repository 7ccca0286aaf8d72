// Cheaper exact whitening (issue 12, part 3): any F·Fᵀ = C + λI gives the root covariance's answers.
// Every solver is run twice on the same inputs, through the Cholesky route (the default with damping)
// and through the spectral route (SpectralWhiteningScope), and the products B·A (and losses) must agree
// to round-off. Each test first checks that the default really took the Cholesky route, so the
// comparison cannot pass by running the same route twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "compress/math/asvd.hpp"
#include "compress/math/joint_qk.hpp"
#include "compress/math/joint_vo.hpp"
#include "compress/stages/notes.hpp"
#include "compress/math/regression.hpp"
#include "compress/math/whitening.hpp"
#include "joint_test_data.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {
namespace {

double rel(const MatrixD& a, const MatrixD& b) { return (a - b).norm() / b.norm(); }

double rel_losses(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / b[i]);
  return worst;
}

// f() once by the default route and once by the spectral route: {cholesky, spectral}.
template <typename F>
auto both_routes(F&& f) {
  auto chol = f();
  SpectralWhiteningScope spectral;
  return std::pair{std::move(chol), f()};
}

void expect_cholesky(const MatrixD& c, double lambda_rel = kDefaultLambdaRel) {
  EXPECT_EQ(whiten(c, lambda_rel, "test").route, WhiteningRoute::Cholesky);
  SpectralWhiteningScope spectral;
  EXPECT_EQ(whiten(c, lambda_rel, "test").route, WhiteningRoute::Spectral);
}

// C = X·Xᵀ from n tokens of correlated inputs [d, d] (rank min(n, d)).
MatrixD covariance(std::mt19937_64& rng, int n, int d) {
  const MatrixD x = test::correlated_inputs(rng, n, d);  // [n, d]
  return x.transpose() * x;
}

std::vector<std::string> kinds(const NoteCollector& c) {
  std::vector<std::string> k;
  for (const auto& n : c.notes()) k.push_back(n.kind);
  return k;
}

TEST(Whitening, BothRoutesFactorTheDampedCovariance) {
  std::mt19937_64 rng(1);
  const MatrixD c = covariance(rng, 200, 40);
  MatrixD s = c;
  s.diagonal().array() += absolute_damping(c, kDefaultLambdaRel);
  const MatrixD m = test::gaussian(rng, 7, 40);  // [k, d]
  const auto [chol, spec] = both_routes([&] { return whiten(c, kDefaultLambdaRel, "test"); });
  ASSERT_EQ(chol.route, WhiteningRoute::Cholesky);
  ASSERT_EQ(spec.route, WhiteningRoute::Spectral);
  for (const Whitening* w : {&chol, &spec}) {
    const MatrixD f = w->times(MatrixD::Identity(40, 40));
    EXPECT_LT(rel(f * f.transpose(), s), 1e-13);  // F·Fᵀ = C + λI
    EXPECT_LT(rel(w->times_pinv(w->times(m)), m), 1e-10);
    EXPECT_LT(rel(w->times_pinv_t(m) * f.transpose(), m), 1e-10);
    EXPECT_LT(rel(w->pinv_matrix() * f, MatrixD::Identity(40, 40)), 1e-10);
    EXPECT_EQ(w->dropped, 0);
    EXPECT_EQ(w->lambda, chol.lambda);
  }
}

// asvd-rootcov B·A, well-conditioned and rank-deficient C (n < d, damped by the default λ), with and
// without the bias update (centered C), every junction.
TEST(Whitening, LocalRootCovProductIsTheSameByBothRoutes) {
  struct Shape { int m, d, n; bool bias; };
  double worst = 0;
  std::uint64_t seed = 10;
  for (const Shape sh : {Shape{48, 64, 1000, false}, Shape{96, 64, 2000, true}, Shape{40, 80, 30, false},
                         Shape{40, 80, 30, true}}) {
    std::mt19937_64 rng(seed++);
    const MatrixD w = test::gaussian(rng, sh.m, sh.d);  // [m, d]
    const VectorD b = sh.bias ? test::gaussian_vec(rng, sh.m) : VectorD();
    const calib::SiteStats st = calib::SiteStats::of_rows(test::correlated_inputs(rng, sh.n, sh.d, 0.5));
    expect_cholesky(sh.bias ? st.centered() : st.xtx);
    for (Junction j : all_junctions()) {
      LocalOptions o;
      o.preconditioner = Preconditioner::RootCovariance;
      o.junction = j;
      const int r = sh.d / 5;
      const auto [chol, spec] = both_routes([&] { return asvd(w, b, st, r, o, "test").dense(); });
      const double e = rel(chol, spec);
      EXPECT_LT(e, 1e-9) << "m " << sh.m << " d " << sh.d << " n " << sh.n << " " << junction_name(j);
      worst = std::max(worst, e);
    }
  }
  std::printf("[whitening] local root-cov: max ‖ΔB·A‖/‖B·A‖ between routes = %.2e\n", worst);
}

TEST(Whitening, RegressionIsTheSameByBothRoutes) {
  std::mt19937_64 rng(20);
  const MatrixD s = test::correlated_inputs(rng, 600, 48, 1.0).transpose();  // [in, n]
  const MatrixD t = test::gaussian(rng, 32, 48) * s + test::gaussian(rng, 32, 600, 0.3);  // [out, n]
  const RegressionStats st = regression_stats(s, t);
  expect_cholesky(st.cov);
  for (bool bias : {false, true}) {
    const auto [chol, spec] = both_routes([&] { return reduced_rank_regression(st, 9, bias, kDefaultLambdaRel, "t"); });
    const double e = rel(chol.dense(), spec.dense());
    std::printf("[whitening] regression (bias %d): ‖ΔW‖/‖W‖ between routes = %.2e\n", bias, e);
    EXPECT_LT(e, 1e-9);
    if (bias) {
      EXPECT_LT(rel(chol.bias, spec.bias), 1e-9);
    }
  }
}

constexpr int kD = 64, kDh = 16, kN = 1024;

// Joint Q-K: Algorithm 1 from eigenvector starts is equivariant under F → F·Q, so the whole loss
// history and the final products agree; only round-off separates the routes.
TEST(Whitening, JointQkIsTheSameByBothRoutes) {
  struct Variant { int h, hkv; bool bias, rope; };
  for (const Variant v : {Variant{4, 4, false, false}, Variant{4, 2, true, false}, Variant{4, 2, false, true}}) {
    std::mt19937_64 rng(30 + v.h * 10 + v.hkv);
    const model::AttentionInfo s{kD, v.h, v.hkv, kDh, v.rope, 10000.0};
    QkDense w;
    w.wq = test::gaussian(rng, v.h * kDh, kD, 0.2);
    w.wk = test::gaussian(rng, v.hkv * kDh, kD, 0.2);
    if (v.bias) {
      w.bq = test::gaussian_vec(rng, v.h * kDh);
      w.bk = test::gaussian_vec(rng, v.hkv * kDh);
    }
    const calib::SiteStats m = calib::SiteStats::of_rows(test::correlated_inputs(rng, kN, kD, v.bias ? 1.0 : 0.0));
    expect_cholesky(v.bias ? m.augmented() : m.xtx);
    QkOptions opt;
    opt.r_q = 20;
    opt.r_k = 12;
    opt.rope.window = v.rope ? 4 : 0;
    const auto [chol, spec] = both_routes([&] { return joint_qk(w, s, m, opt, "test"); });
    const double eq = rel(chol.f.q.dense(), spec.f.q.dense()), ek = rel(chol.f.k.dense(), spec.f.k.dense());
    const double el = rel_losses(chol.loss, spec.loss);
    std::printf("[whitening] joint Q-K H %d H_kv %d bias %d rope %d: ‖ΔB·A‖/‖B·A‖ q %.2e k %.2e, losses %.2e\n", v.h,
                v.hkv, v.bias, v.rope, eq, ek, el);
    EXPECT_LT(eq, 1e-9);
    EXPECT_LT(ek, 1e-9);
    EXPECT_LT(el, 1e-9);
    EXPECT_EQ(chol.used_local_start, spec.used_local_start);
    EXPECT_NEAR(chol.loss_local_start, spec.loss_local_start, 1e-9 * spec.loss_local_start);
    if (v.bias) {
      EXPECT_LT(rel(chol.f.q.bias, spec.f.q.bias), 1e-9);
    }
  }
}

TEST(Whitening, JointVoIsTheSameByBothRoutes) {
  std::mt19937_64 rng(40);
  const model::AttentionInfo s{kD, 4, 2, kDh, false, 1e4};
  VoDense w;
  w.wv = test::gaussian(rng, 2 * kDh, kD, 0.2);
  w.wo = test::gaussian(rng, kD, 4 * kDh, 0.2);
  w.bv = test::gaussian_vec(rng, 2 * kDh);
  w.bo = test::gaussian_vec(rng, kD);
  const calib::SiteStats m = calib::SiteStats::of_rows(test::correlated_inputs(rng, kN, kD, 1.0));
  const calib::SiteStats o_m = calib::SiteStats::of_rows(test::correlated_inputs(rng, kN, 4 * kDh, 0.5));
  expect_cholesky(m.augmented());
  for (bool aware : {false, true}) {
    VoOptions opt;
    opt.r_v = 12;
    opt.r_o = 20;
    opt.o_moments = aware ? &o_m : nullptr;
    const auto [chol, spec] = both_routes([&] { return joint_vo(w, s, m, opt, "test"); });
    const double ev = rel(chol.f.v.dense(), spec.f.v.dense()), eo = rel(chol.f.o.dense(), spec.f.o.dense());
    const double el = rel_losses(chol.loss, spec.loss);
    std::printf("[whitening] joint V-O attention-aware %d: ‖ΔB·A‖/‖B·A‖ v %.2e o %.2e, losses %.2e\n", aware, ev, eo,
                el);
    EXPECT_LT(ev, 1e-9);
    EXPECT_LT(eo, 1e-9);
    EXPECT_LT(el, 1e-9);
    EXPECT_LT(rel(chol.f.v.bias, spec.f.v.bias), 1e-9);
    EXPECT_LT(rel(chol.f.o.bias, spec.f.o.bias), 1e-9);
  }
}

// Without damping, or when C + λI is not positive definite, the spectrum decides what to drop.
TEST(Whitening, UndampedOrIndefiniteTakesTheSpectralRoute) {
  std::mt19937_64 rng(50);
  const MatrixD c = covariance(rng, 10, 30);  // rank 10 in 30 dimensions
  {
    NoteCollector notes;
    const Whitening w = whiten(c, kDefaultLambdaRel, "m");
    EXPECT_EQ(w.route, WhiteningRoute::Cholesky);  // damped: nothing to drop, no note
    EXPECT_EQ(w.dropped, 0);
    EXPECT_TRUE(notes.notes().empty());
  }
  {
    NoteCollector notes;
    const Whitening w = whiten(c, 0.0, "m");
    EXPECT_EQ(w.route, WhiteningRoute::Spectral);
    EXPECT_EQ(w.dropped, 20);
    EXPECT_EQ(kinds(notes), std::vector<std::string>{"pinv-drop"});
  }
  {
    // One eigenvalue far below −λ (not a Gram matrix): dpotrf fails, the spectral route drops it.
    const MatrixD g = test::gaussian(rng, 30, 30);
    const MatrixD v = linalg::sym_eig(g + g.transpose(), "test").vectors;  // [30, 30] orthogonal
    VectorD e = VectorD::LinSpaced(30, 30.0, 1.0);
    e(29) = -1.0;
    const MatrixD bad = v * e.asDiagonal() * v.transpose();
    NoteCollector notes;
    const Whitening w = whiten(bad, kDefaultLambdaRel, "m");
    EXPECT_EQ(w.route, WhiteningRoute::Spectral);
    EXPECT_EQ(w.dropped, 1);
    EXPECT_EQ(kinds(notes), std::vector<std::string>{"pinv-drop"});
  }
  {
    NoteCollector notes;
    const Whitening w = whiten(MatrixD::Zero(6, 6), kDefaultLambdaRel, "m");  // λ = 0 too
    EXPECT_EQ(w.route, WhiteningRoute::Spectral);
    EXPECT_TRUE(w.zero);
    EXPECT_EQ(kinds(notes), std::vector<std::string>{"zero-covariance"});
  }
  {
    SpectralWhiteningScope outer;
    { SpectralWhiteningScope inner; }
    EXPECT_EQ(whiten(c, kDefaultLambdaRel, "m").route, WhiteningRoute::Spectral);  // nesting counts
  }
  EXPECT_EQ(whiten(c, kDefaultLambdaRel, "m").route, WhiteningRoute::Cholesky);
  MatrixD nan = c;
  nan(2, 3) = std::nan("");
  EXPECT_THROW((void)whiten(nan, kDefaultLambdaRel, "m"), NumericError);
}

}  // namespace
}  // namespace latentllm::compress
