#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <random>

#include <Eigen/Cholesky>
#include <Eigen/LU>
#include <Eigen/QR>

#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

TEST(Linalg, SymEigReconstructsDescending) {
  MatrixD x = MatrixD::Random(40, 12);
  MatrixD s = x.transpose() * x;
  auto e = linalg::sym_eig(s, "test");
  for (int i = 1; i < 12; ++i) EXPECT_GE(e.values(i - 1), e.values(i));
  MatrixD r = e.vectors * e.values.asDiagonal() * e.vectors.transpose();
  EXPECT_LT((r - s).norm(), 1e-10 * s.norm());
}

TEST(Linalg, SymEigvalsEqualTheFullDecompositionsValues) {
  MatrixD x = MatrixD::Random(40, 12);
  MatrixD s = x.transpose() * x;
  const VectorD w = linalg::sym_eigvals(s, "test");
  const auto e = linalg::sym_eig(s, "test");
  ASSERT_EQ(w.size(), 12);
  EXPECT_LT((w - e.values).norm(), 1e-12 * e.values(0));
  EXPECT_NEAR(w.sum(), s.trace(), 1e-12 * s.trace());
  MatrixD bad = s;
  bad(3, 2) = std::nan("");
  EXPECT_THROW((void)linalg::sym_eigvals(bad, "test"), NumericError);
}

TEST(Linalg, SvdReconstructs) {
  MatrixD m = MatrixD::Random(9, 14);
  auto d = linalg::svd(m, "test");
  EXPECT_EQ(d.u.cols(), 9);
  EXPECT_EQ(d.v.rows(), 14);
  MatrixD r = d.u * d.s.asDiagonal() * d.v.transpose();
  EXPECT_LT((r - m).norm(), 1e-12 * m.norm() * 10);
  for (int i = 1; i < 9; ++i) EXPECT_GE(d.s(i - 1), d.s(i));
}

// The Gram route gives the same rank-r truncation as dgesdd, wide and tall, with a decaying spectrum
// (s from 1 to 1e-4), at full rank, and on a rank-deficient matrix (zero singular values).
TEST(Linalg, SvdLeadingMatchesSvd) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> nd;
  const auto random = [&](int rows, int cols) {
    MatrixD x(rows, cols);
    for (double& v : x.reshaped()) v = nd(rng);
    return x;
  };
  for (const auto& [rows, cols] : {std::pair{30, 80}, std::pair{80, 30}}) {
    const int k = std::min(rows, cols);
    const Eigen::HouseholderQR<MatrixD> qu(random(rows, k)), qv(random(cols, k));
    VectorD s(k);
    for (int i = 0; i < k; ++i) s(i) = std::pow(10.0, -4.0 * i / (k - 1));
    const MatrixD m = MatrixD(qu.householderQ()).leftCols(k) * s.asDiagonal() *
                      MatrixD(qv.householderQ()).leftCols(k).transpose();
    const linalg::Svd ref = linalg::svd(m, "test");
    for (int r : {5, 12, k}) {
      const linalg::Svd g = linalg::svd_leading(m, r, "test");
      ASSERT_EQ(g.u.cols(), r);
      ASSERT_EQ(g.v.rows(), cols);
      const MatrixD pr = ref.u.leftCols(r) * ref.s.head(r).asDiagonal() * ref.v.leftCols(r).transpose();
      const MatrixD pg = g.u * g.s.asDiagonal() * g.v.transpose();
      EXPECT_LT((pg - pr).norm(), 1e-10 * pr.norm()) << rows << "x" << cols << " r " << r;
      EXPECT_LT(std::abs(g.s(0) - ref.s(0)), 1e-12);
      EXPECT_LT(std::abs(g.s(4) - ref.s(4)) / ref.s(4), 1e-10);
    }
    const MatrixD low = random(rows, 3) * random(3, cols);  // rank 3: s_4.. are zero
    const linalg::Svd g = linalg::svd_leading(low, 6, "test");
    EXPECT_LT((g.u * g.s.asDiagonal() * g.v.transpose() - low).norm(), 1e-10 * low.norm());
    EXPECT_TRUE(g.u.allFinite() && g.v.allFinite());
  }
  EXPECT_THROW(linalg::svd_leading(MatrixD::Ones(3, 4), 4, "test"), NumericError);
}

TEST(Linalg, SymPowerSquareRoot) {
  MatrixD x = MatrixD::Random(30, 8);
  MatrixD s = x.transpose() * x;
  MatrixD h = linalg::sym_power(s, 0.5, "test");
  EXPECT_LT((h * h - s).norm(), 1e-10 * s.norm());
  MatrixD hi = linalg::sym_power(s, -0.5, "test");
  EXPECT_LT((hi * h - MatrixD::Identity(8, 8)).norm(), 1e-8);
}

TEST(Linalg, PivotedQrPermutesAndFactors) {
  MatrixD m = MatrixD::Random(6, 15);  // [6, 15]
  m.col(9) *= 100.0;                   // the largest column is pivoted first
  const auto qr = linalg::pivoted_qr(m, "test");
  ASSERT_EQ(qr.perm.size(), 15u);
  EXPECT_EQ(qr.perm[0], 9);
  std::vector<int> sorted = qr.perm;
  std::sort(sorted.begin(), sorted.end());
  for (int j = 0; j < 15; ++j) EXPECT_EQ(sorted[static_cast<std::size_t>(j)], j);
  MatrixD mp(6, 15);
  for (int j = 0; j < 15; ++j) mp.col(j) = m.col(qr.perm[static_cast<std::size_t>(j)]);
  // Q orthonormal  <=>  RᵀR = (MΠ)ᵀ(MΠ).
  EXPECT_LT((qr.r.transpose() * qr.r - mp.transpose() * mp).norm(), 1e-10 * mp.squaredNorm());
  for (int i = 1; i < 6; ++i) EXPECT_GE(std::abs(qr.r(i - 1, i - 1)), std::abs(qr.r(i, i)));
  EXPECT_EQ(qr.r(5, 0), 0.0);  // upper trapezoidal
}

TEST(Linalg, NonFiniteInputIsRejectedWithContext) {
  MatrixD s = MatrixD::Identity(3, 3);
  s(1, 1) = std::numeric_limits<double>::quiet_NaN();
  try {
    linalg::sym_eig(s, "model.layers.2.self_attn.q_proj");
    FAIL();
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2.self_attn.q_proj"), std::string::npos);
  }
}

// S = XᵀX + I: [d, d] symmetric positive definite.
MatrixD spd(int d) {
  const MatrixD x = MatrixD::Random(3 * d, d);
  return x.transpose() * x + MatrixD::Identity(d, d);
}

TEST(Linalg, CholeskyMatchesEigenLlt) {
  const MatrixD s = spd(37);
  MatrixD junk = s;
  junk.triangularView<Eigen::StrictlyUpper>().setConstant(1e3);  // only the lower triangle is read
  const std::optional<MatrixD> l = linalg::cholesky(junk, "test");
  ASSERT_TRUE(l.has_value());
  const MatrixD ref = Eigen::LLT<MatrixD>(s).matrixL();
  EXPECT_LT((*l - ref).norm(), 1e-12 * ref.norm());
  EXPECT_EQ(MatrixD(l->triangularView<Eigen::StrictlyUpper>()).norm(), 0.0);
  EXPECT_LT((*l * l->transpose() - s).norm(), 1e-13 * s.norm());
}

TEST(Linalg, CholeskyOfIndefiniteIsNullopt) {
  MatrixD s = spd(12);
  s(5, 5) = -1.0;  // a negative diagonal entry: not positive definite
  EXPECT_FALSE(linalg::cholesky(s, "test").has_value());
  const MatrixD singular = MatrixD::Zero(4, 4);
  EXPECT_FALSE(linalg::cholesky(singular, "test").has_value());
}

TEST(Linalg, CholeskyRejectsNonFiniteAndNonSquare) {
  MatrixD s = spd(6);
  s(3, 2) = std::numeric_limits<double>::quiet_NaN();
  test::expect_error<NumericError>([&] { (void)linalg::cholesky(s, "layers.4.mlp.up_proj"); },
                                   {"layers.4.mlp.up_proj"});
  test::expect_error<NumericError>([&] { (void)linalg::cholesky(MatrixD::Zero(3, 4), "m"); },
                                   {"m: cholesky needs a square matrix (got [3, 4])"});
}

TEST(Linalg, TriangularProductsMatchDense) {
  const MatrixD s = spd(29);
  const MatrixD l = Eigen::LLT<MatrixD>(s).matrixL();  // [d, d] lower
  MatrixD junk = l;
  junk.triangularView<Eigen::StrictlyUpper>().setConstant(7.0);  // only the lower triangle is read
  const MatrixD m = MatrixD::Random(11, 29);                     // [k, d]
  const MatrixD l_inv = l.inverse();
  EXPECT_LT((linalg::times_lower(m, junk) - m * l).norm(), 1e-13 * (m * l).norm());
  EXPECT_LT((linalg::solve_lower_right(m, junk, false) - m * l_inv).norm(), 1e-11 * (m * l_inv).norm());
  EXPECT_LT((linalg::solve_lower_right(m, junk, true) - m * l_inv.transpose()).norm(),
            1e-11 * (m * l_inv.transpose()).norm());
  EXPECT_EQ(linalg::times_lower(MatrixD(0, 29), l).rows(), 0);
  EXPECT_THROW((void)linalg::times_lower(MatrixD::Random(3, 28), l), NumericError);
  EXPECT_THROW((void)linalg::solve_lower_right(MatrixD::Random(3, 28), l, true), NumericError);
}

// GPTQ's factor: S⁻¹ = Uᵀ·U with U upper triangular, read from S's upper triangle only; nullopt for an
// indefinite S.
TEST(Linalg, InverseCholeskyUpper) {
  const MatrixD x = MatrixD::Random(30, 12);
  MatrixD s = x.transpose() * x;
  const MatrixD expect = s.inverse();
  s.triangularView<Eigen::StrictlyLower>().setConstant(std::nan(""));  // never read
  const auto u = linalg::inverse_cholesky_upper(s, "test");
  ASSERT_TRUE(u.has_value());
  EXPECT_TRUE(u->triangularView<Eigen::StrictlyLower>().toDenseMatrix().isZero(0.0));
  EXPECT_LT((u->transpose() * *u - expect).norm(), 1e-10 * expect.norm());
  for (int i = 0; i < 12; ++i) EXPECT_GT((*u)(i, i), 0.0);
  MatrixD indefinite = MatrixD::Identity(4, 4);
  indefinite(2, 2) = -1.0;
  EXPECT_FALSE(linalg::inverse_cholesky_upper(indefinite, "test").has_value());
}

}  // namespace
}  // namespace latentllm
