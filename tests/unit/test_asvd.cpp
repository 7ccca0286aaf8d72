// Exact-math tests of the local activation-aware SVD family (issue 3): optimality of the root
// covariance, junction invariance, block identity, bias update, full-rank exactness, pseudo-inverse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include <Eigen/LU>
#include <fmt/format.h>

#include "core/enum_names.hpp"
#include "compress/math/asvd.hpp"
#include "compress/math/junction.hpp"
#include "compress/math/whitening.hpp"
#include "compress/math/preconditioner.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {
namespace {

MatrixD gaussian(Eigen::Index rows, Eigen::Index cols, std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, 1.0);
  MatrixD m(rows, cols);
  for (Eigen::Index j = 0; j < cols; ++j) {
    for (Eigen::Index i = 0; i < rows; ++i) m(i, j) = n(rng);
  }
  return m;
}

// A module W: [out, in], optional bias, and correlated inputs X = L·Z (+ μ₀): [in, n], so C = XXᵀ is far
// from identity (feature scales spread over ~2 decades, strong correlations).
struct Problem {
  MatrixD w;      // [out, in]
  VectorD bias;   // [out]
  MatrixD x;      // [in, n]
  MatrixD c;      // [in, in]
  VectorD mean;   // [in]
  VectorD abs_mean;
  double n = 0;

  calib::SiteStats stats() const {
    return calib::SiteStats{c, mean * n, abs_mean * n, static_cast<std::int64_t>(n)};
  }
};

Problem make_problem(int out, int in, int n, unsigned seed, double mean_scale = 0.0) {
  std::mt19937_64 rng(seed);
  Problem p;
  p.w = gaussian(out, in, rng);
  p.bias = gaussian(out, 1, rng);
  MatrixD l = gaussian(in, in, rng);  // [in, in]
  for (int i = 0; i < in; ++i) l.row(i) *= std::pow(10.0, -2.0 * i / in);
  p.x = l * gaussian(in, n, rng);
  if (mean_scale != 0.0) p.x.colwise() += mean_scale * VectorD(gaussian(in, 1, rng));
  p.c = p.x * p.x.transpose();
  p.n = n;
  p.mean = p.x.rowwise().mean();
  p.abs_mean = p.x.cwiseAbs().rowwise().mean();
  return p;
}

// Σ_{i>r} σᵢ²(W·S^{1/2}): the minimum of ‖(W − B·A)·S^{1/2}‖_F² over rank r (Eckart–Young).
double optimal_loss(const MatrixD& w, const MatrixD& s, int r) {
  const linalg::Svd d = linalg::svd(w * linalg::sym_power(s, 0.5, "test"), "test");
  return d.s.tail(d.s.size() - r).squaredNorm();
}

double rel(const MatrixD& a, const MatrixD& b) { return (a - b).norm() / b.norm(); }

// The activation loss the factorization minimizes: ‖(W − B·A)·C^{1/2}‖², C centered for a module whose
// bias is updated (then it equals the output error, bias included).
double loss_of(const Problem& p, const LowRank& f, bool centered = false) {
  return activation_loss(p.w - f.dense(), centered ? p.stats().centered() : p.c);
}

LocalOptions options(Preconditioner p, Junction j, double lambda_rel) {
  LocalOptions o;
  o.preconditioner = p;
  o.junction = j;
  o.lambda_rel = lambda_rel;
  return o;
}

TEST(Asvd, RootCovarianceAttainsTheMinimalActivationLoss) {
  const Problem p = make_problem(24, 32, 400, 1);
  const int r = 10;
  const double best = optimal_loss(p.w, p.c, r);
  for (Junction j : all_junctions()) {
    const LowRank f = asvd(p.w, {}, p.stats(), r, options(Preconditioner::RootCovariance, j, 0.0), "test");
    EXPECT_NEAR(activation_loss(p.w - f.dense(), p.c), best, 1e-8 * best) << junction_name(j);
  }
  // With damping it minimizes the damped loss ‖(W − B·A)·(C + λI)^{1/2}‖² instead.
  const LocalOptions damped = options(Preconditioner::RootCovariance, Junction::Identity, 1e-2);
  const LowRank f = asvd(p.w, {}, p.stats(), r, damped, "test");
  MatrixD s = p.c;
  s.diagonal().array() += absolute_damping(p.c, damped.lambda_rel);
  const double best_damped = optimal_loss(p.w, s, r);
  EXPECT_NEAR(activation_loss(p.w - f.dense(), s), best_damped, 1e-8 * best_damped);
  EXPECT_GT(loss_of(p, f), best * (1 + 1e-6));  // and is then slightly off the undamped optimum
}

TEST(Asvd, NoPreconditionerBeatsRootCovariance) {
  for (unsigned seed : {2u, 3u, 4u}) {
    const Problem p = make_problem(40, 48, 600, seed);
    for (int r : {4, 16, 32}) {
      const double best = optimal_loss(p.w, p.c, r);
      std::string table = fmt::format("seed {} r {}: optimum {:.6g}", seed, r, best);
      for (double lambda_rel : {0.0, LocalOptions{}.lambda_rel}) {
        for (Preconditioner k : all_preconditioners()) {
          const LowRank f = asvd(p.w, {}, p.stats(), r, options(k, Junction::Identity, lambda_rel), "test");
          const double loss = loss_of(p, f);
          EXPECT_GE(loss, best * (1 - 1e-10)) << preconditioner_name(k);
          if (k == Preconditioner::RootCovariance && lambda_rel == 0.0) {
            EXPECT_NEAR(loss, best, 1e-8 * best);
          }
          table += fmt::format(" | {}{} {:.4f}", preconditioner_name(k), lambda_rel == 0.0 ? "(λ=0)" : "", loss / best);
        }
      }
      std::cout << table << "\n";  // loss / optimum per method, for the report
    }
  }
}

TEST(Asvd, AllJunctionsGiveTheSameProduct) {
  const Problem p = make_problem(20, 36, 300, 5);
  for (Preconditioner k : all_preconditioners()) {
    for (int r : {1, 7, 20}) {
      const LocalOptions base = options(k, Junction::Identity, 1e-4);
      const MatrixD ref = asvd(p.w, {}, p.stats(), r, base, "test").dense();
      for (Junction j : all_junctions()) {
        const LowRank f = asvd(p.w, {}, p.stats(), r, options(k, j, 1e-4), "test");
        EXPECT_LT(rel(f.dense(), ref), 1e-9) << preconditioner_name(k) << " " << junction_name(j) << " r " << r;
        EXPECT_EQ(f.rank(), r);
        EXPECT_EQ(f.B.rows(), 20);
        EXPECT_EQ(f.B.cols(), r);
      }
    }
  }
}

TEST(Asvd, BlockIdentityHoldsAnExactIdentityBlock) {
  const Problem p = make_problem(30, 44, 300, 6);
  const int d_out = 30, d_in = 44;
  for (int r : {1, 12, 30}) {
    const LowRank f =
        asvd(p.w, {}, p.stats(), r, options(Preconditioner::RootCovariance, Junction::BlockIdentity, 1e-4), "test");
    ASSERT_EQ(f.A.rows(), r);
    ASSERT_EQ(f.A.cols(), d_in - r);
    ASSERT_EQ(static_cast<int>(f.perm.size()), d_in);
    std::vector<int> sorted = f.perm;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < d_in; ++i) ASSERT_EQ(sorted[static_cast<std::size_t>(i)], i);
    const MatrixD a = f.dense_a();  // [r, d]
    for (int j = 0; j < r; ++j) {
      for (int i = 0; i < r; ++i) EXPECT_EQ(a(i, f.perm[static_cast<std::size_t>(j)]), i == j ? 1.0 : 0.0);
    }
    EXPECT_EQ(f.weight_params(), static_cast<std::int64_t>(r) * (d_out + d_in) - static_cast<std::int64_t>(r) * r);
    EXPECT_EQ(f.weight_params(), eval::factored_params(d_out, d_in, r, Junction::BlockIdentity == Junction::BlockIdentity));
    // Maxvol bound: every stored entry has magnitude ≤ 1.05 (up to the final re-solve's round-off).
    if (f.A.size() > 0) {
      EXPECT_LE(f.A.cwiseAbs().maxCoeff(), 1.05 + 1e-9);
    }
  }
}

TEST(Asvd, ToBlockIdentityOnAnyFactorPair) {
  std::mt19937_64 rng(7);
  const MatrixD b = gaussian(16, 6, rng);
  MatrixD a = gaussian(6, 25, rng);
  a.col(3) *= 1e3;  // a dominant column must not spoil the bound
  const LowRank f = to_block_identity(b, a, "test");
  EXPECT_LT(rel(f.dense(), b * a), 1e-12);
  EXPECT_LE(f.A.cwiseAbs().maxCoeff(), 1.05 + 1e-9);
  // Rank-deficient A: rank 5 with an identity block and the same product (test_numerics.cpp).
  MatrixD deficient = a;
  deficient.row(5) = deficient.row(0) + deficient.row(1);
  const LowRank g = to_block_identity(b, deficient, "test");
  EXPECT_EQ(g.rank(), 5);
  EXPECT_LT(rel(g.dense(), b * deficient), 1e-12);
  EXPECT_THROW(to_block_identity(b, MatrixD::Zero(6, 25), "test"), NumericError);
}

// Σ_t ‖(W·x_t + b) − (B·A·x_t + b̂)‖² computed from the samples.
double direct_error(const Problem& p, const MatrixD& product, const VectorD& bias) {
  const MatrixD y = (p.w * p.x).colwise() + p.bias;
  const MatrixD yh = (product * p.x).colwise() + bias;
  return (y - yh).squaredNorm();
}

TEST(Asvd, BiasUpdateMinimizesTheOutputError) {
  const Problem p = make_problem(18, 26, 500, 8, /*mean_scale=*/3.0);
  std::mt19937_64 rng(9);
  for (Preconditioner k : all_preconditioners()) {
    const int r = 8;
    const LowRank f = asvd(p.w, p.bias, p.stats(), r, options(k, Junction::BlockIdentity, 1e-4), "test");
    ASSERT_EQ(f.bias.size(), 18);
    const MatrixD ba = f.dense();
    const double e_hat = direct_error(p, ba, f.bias);
    EXPECT_NEAR(loss_of(p, f, /*centered=*/true), e_hat, 1e-9 * e_hat) << preconditioner_name(k);
    EXPECT_NEAR(output_error(p.w - ba, p.bias - f.bias, p.c, p.mean, p.n), e_hat, 1e-8 * e_hat);
    // The report's float products: within float rounding of the exact error.
    EXPECT_NEAR(output_error_f32(p.w - ba, p.bias - f.bias, p.c, p.mean, p.n), e_hat, 1e-5 * e_hat);
    EXPECT_LT(e_hat, direct_error(p, ba, p.bias)) << preconditioner_name(k);  // better than keeping b
    for (int t = 0; t < 20; ++t) {  // optimal: no perturbation does better
      const VectorD delta = gaussian(18, 1, rng) * std::pow(10.0, -(t % 5));
      EXPECT_GT(direct_error(p, ba, f.bias + delta), e_hat) << preconditioner_name(k);
    }
    // The mean output over the calibration set is preserved.
    const VectorD mean_out = p.w * p.mean + p.bias, mean_hat = ba * p.mean + f.bias;
    EXPECT_LT((mean_out - mean_hat).norm(), 1e-9 * mean_out.norm());
  }
  // Root-cov on the centered covariance attains the optimum over (rank-r B·A, free bias), which beats
  // the bias-unaware solution (uncentered P, b kept).
  const int r = 8;
  const double best = optimal_loss(p.w, p.stats().centered(), r);
  const LowRank aware =
      asvd(p.w, p.bias, p.stats(), r, options(Preconditioner::RootCovariance, Junction::Identity, 0.0), "test");
  EXPECT_NEAR(loss_of(p, aware, true), best, 1e-8 * best);
  LocalOptions unaware = options(Preconditioner::RootCovariance, Junction::Identity, 0.0);
  unaware.update_bias = false;
  const LowRank kept = asvd(p.w, p.bias, p.stats(), r, unaware, "test");
  EXPECT_EQ(kept.bias, p.bias);
  EXPECT_NEAR(loss_of(p, kept), direct_error(p, kept.dense(), p.bias), 1e-9 * loss_of(p, kept));
  EXPECT_GT(loss_of(p, kept), loss_of(p, aware, true));
}

TEST(Asvd, FullRankReproducesTheWeight) {
  for (auto [out, in] : {std::pair{12, 20}, std::pair{20, 12}, std::pair{16, 16}}) {
    const Problem p = make_problem(out, in, 200, 10);
    const int r = std::min(out, in);
    for (Preconditioner k : all_preconditioners()) {
      for (Junction j : all_junctions()) {
        const LowRank f = asvd(p.w, p.bias, p.stats(), r, options(k, j, 1e-4), "test");
        EXPECT_LT(rel(f.dense(), p.w), 1e-9) << preconditioner_name(k) << " " << junction_name(j);
        EXPECT_LT((f.bias - p.bias).norm(), 1e-9 * p.bias.norm());
        EXPECT_LT(loss_of(p, f, true), 1e-16 * p.c.trace() * p.w.squaredNorm());
      }
    }
  }
}

TEST(Asvd, SingularCovarianceUsesThePseudoInverse) {
  // Fewer tokens than features: C has rank 10 in 30 dimensions. With λ = 0 the null space is dropped
  // from P and P⁺, the result stays finite, and root-cov still attains the optimum.
  const Problem p = make_problem(16, 30, 10, 11);
  const LocalOptions o = options(Preconditioner::RootCovariance, Junction::BlockIdentity, 0.0);
  const PreconditionerMatrix pm = make_preconditioner(o.preconditioner, p.c, {}, o, "test");
  EXPECT_EQ(pm.dropped, 20);
  const MatrixD pp = pm.matrix(), pinv = pm.pinv_matrix();
  EXPECT_LT(rel(pp * pinv * pp, pp), 1e-9);  // Moore–Penrose identities
  EXPECT_LT(rel(pinv * pp * pinv, pinv), 1e-9);
  const int r = 6;
  const LowRank f = asvd(p.w, {}, p.stats(), r, o, "test");
  ASSERT_TRUE(f.dense().allFinite());
  const double best = optimal_loss(p.w, p.c, r);
  EXPECT_NEAR(loss_of(p, f), best, 1e-7 * best);
  // B·A does not act on directions the calibration never excited: (B·A)·v = 0 for v ⟂ range(X).
  const linalg::Svd sx = linalg::svd(p.x, "test");  // u: [30, 10] spans range(X)
  const MatrixD null_dirs = MatrixD::Identity(30, 30) - sx.u * sx.u.transpose();
  EXPECT_LT((f.dense() * null_dirs).norm(), 1e-6 * f.dense().norm());
}

TEST(Asvd, PreconditionerFormsMatchTable1) {
  const Problem p = make_problem(8, 12, 100, 12);
  LocalOptions o;
  o.lambda_rel = 1e-2;
  const double lambda = absolute_damping(p.c, o.lambda_rel);
  MatrixD s = p.c;
  s.diagonal().array() += lambda;
  const auto build = [&](Preconditioner k) { return make_preconditioner(k, p.c, p.abs_mean, o, "test"); };
  EXPECT_LT(rel(build(Preconditioner::Covariance).matrix(), s), 1e-12);
  // The root covariance may be any factor with P·Pᵀ = C + λI (whitening.hpp): here the Cholesky factor.
  const PreconditionerMatrix root = build(Preconditioner::RootCovariance);
  EXPECT_EQ(root.root.route, WhiteningRoute::Cholesky);
  EXPECT_LT(rel(root.matrix() * root.matrix().transpose(), s), 1e-12);
  const VectorD h = s.inverse().diagonal();
  EXPECT_LT(rel(build(Preconditioner::DiagHessian).diag, h.cwiseSqrt().cwiseInverse()), 1e-10);
  EXPECT_LT(rel(build(Preconditioner::DiagL2).diag, p.c.diagonal().cwiseSqrt()), 1e-14);
  EXPECT_LT(rel(build(Preconditioner::DiagL1).diag, p.abs_mean.cwiseSqrt()), 1e-14);  // α = 0.5
  EXPECT_EQ(build(Preconditioner::Identity).matrix(), MatrixD::Identity(12, 12));
  for (Preconditioner k : all_preconditioners()) {
    const PreconditionerMatrix pm = build(k);
    EXPECT_LT((pm.matrix() * pm.pinv_matrix() - MatrixD::Identity(12, 12)).norm(), 1e-9) << preconditioner_name(k);
  }
}

TEST(Asvd, BadInputsFailClearly) {
  const Problem p = make_problem(8, 12, 100, 13);
  const LocalOptions o;
  EXPECT_THROW(asvd(p.w, {}, p.stats(), 0, o, "m"), ConfigError);
  EXPECT_THROW(asvd(p.w, {}, p.stats(), 9, o, "m"), ConfigError);
  calib::SiteStats no_abs = p.stats();
  no_abs.abs_sum.resize(0);
  try {
    asvd(p.w, {}, no_abs, 4, options(Preconditioner::DiagL1, Junction::Identity, 1e-4), "layers.0.fc1");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.fc1: asvd-l1 needs the mean absolute activation"), std::string::npos);
  }
  calib::SiteStats no_mean = p.stats();
  no_mean.sum.resize(0);
  EXPECT_THROW(asvd(p.w, p.bias, no_mean, 4, o, "m"), ConfigError);
  EXPECT_THROW(asvd(p.w.leftCols(10), {}, p.stats(), 4, o, "m"), ConfigError);
  EXPECT_THROW(asvd(p.w, {}, calib::SiteStats{}, 4, o, "m"), ConfigError);
  MatrixD bad = p.w;
  bad(1, 1) = std::nan("");
  EXPECT_THROW(asvd(bad, {}, p.stats(), 4, o, "m"), NumericError);
  const MatrixD zero = MatrixD::Zero(12, 12);  // no signal: a recorded fallback (test_numerics.cpp), no error
  EXPECT_NO_THROW(asvd(p.w, {}, calib::SiteStats{zero, {}, {}, 0}, 4, o, "m"));
  LocalOptions neg = o;
  neg.lambda_rel = -1;
  EXPECT_THROW(asvd(p.w, {}, p.stats(), 4, neg, "m"), ConfigError);
}

TEST(Asvd, NamesRoundTrip) {
  // A pre-conditioner is named as the baseline method that uses it alone (the registry's row).
  for (Preconditioner k : all_preconditioners()) {
    const Method m = parse_method(preconditioner_name(k));
    EXPECT_EQ(preconditioner_of(m), k) << preconditioner_name(k);
  }
  for (Junction j : all_junctions()) EXPECT_EQ(parse_junction(junction_name(j)), j);
  EXPECT_EQ(parse_junction("block-identity"), Junction::BlockIdentity);
  try {
    parse_junction("none");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "junction: unknown junction (expected one of identity, s-inv, sqrt-s-inv, block-identity, "
                           "got 'none')");
  }
  EXPECT_EQ(all_preconditioners().size(), 6u);
  EXPECT_EQ(all_junctions().size(), 4u);
}

// One enum-name table (core/enum_names.hpp): names both ways, the list for messages, the message itself.
TEST(EnumNames, NamesListsAndMessages) {
  enum class Abc { A, B, C };
  constexpr auto names = core::enum_names<Abc>(core::Named<Abc>{Abc::A, "a"}, core::Named<Abc>{Abc::B, "b"},
                                               core::Named<Abc>{Abc::C, "c"});
  static_assert(names.name(Abc::B) == "b");
  static_assert(*names.find("c") == Abc::C);
  static_assert(!names.find("d").has_value());
  EXPECT_EQ(names.list(), "a, b or c");
  EXPECT_EQ(names.list(", "), "a, b, c");
  EXPECT_EQ(names.parse("a", "x (expected {}, got {})"), Abc::A);
  try {
    names.parse("d", "--x (expected {}, got {})");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--x (expected a, b or c, got d)");
  }
}

}  // namespace
}  // namespace latentllm::compress
