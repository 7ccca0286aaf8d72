#include <gtest/gtest.h>

#include <algorithm>

#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

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

TEST(Linalg, SvdReconstructs) {
  MatrixD m = MatrixD::Random(9, 14);
  auto d = linalg::svd(m, "test");
  EXPECT_EQ(d.u.cols(), 9);
  EXPECT_EQ(d.v.rows(), 14);
  MatrixD r = d.u * d.s.asDiagonal() * d.v.transpose();
  EXPECT_LT((r - m).norm(), 1e-12 * m.norm() * 10);
  for (int i = 1; i < 9; ++i) EXPECT_GE(d.s(i - 1), d.s(i));
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

}  // namespace
}  // namespace latentllm
