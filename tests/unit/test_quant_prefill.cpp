// Dequantized tiles into sgemm (src/quant/prefill.cpp): each float value within two roundings of the
// exact dequantized one, and x·W'ᵀ for many rows equal to the double product but for float rounding,
// on any block of output columns.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "quant/prefill.hpp"

namespace latentllm::quant {
namespace {

PackedMatrix random_packed(std::int64_t rows, std::int64_t cols, const QuantSpec& spec, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 0.05);
  MatrixD w(rows, cols);
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = n(rng) + (i % 7 == 0 ? 0.03 : 0.0);
  return pack(rtn(w, spec, "prefill"));
}

TEST(QuantPrefill, DequantizedRowsWithinTwoRoundings) {
  for (int bits : {2, 3, 4, 8}) {
    const PackedMatrix p = random_packed(9, 70, {bits, 16, Grid::MinMax}, 3u + bits);
    const QuantizedMatrix q = unpack(p);
    const MatrixD exact = dequantize(q);
    std::vector<float> rows(static_cast<std::size_t>(5 * 70));
    dequantize_rows(p, 2, 7, rows.data());
    for (int r = 2; r < 7; ++r) {
      for (int j = 0; j < 70; ++j) {
        const GroupGrid g = q.grid(r, j / 16);
        const int c = q.codes[static_cast<std::size_t>(r * 70 + j)];
        const double bound = 2.0 * std::ldexp(1.0, -24) * g.s * (c + std::fabs(g.z));
        const float got = rows[static_cast<std::size_t>((r - 2) * 70 + j)];
        EXPECT_NEAR(got, exact(r, j), bound) << bits << " " << r << " " << j;
      }
    }
  }
}

TEST(QuantPrefill, ProductMatchesTheDoubleProduct) {
  const PackedMatrix p = random_packed(40, 96, {4, 32, Grid::MinMax}, 7);
  const MatrixD wq = dequantize(unpack(p));  // [40, 96]
  std::mt19937 rng(8);
  std::normal_distribution<float> n(0.0f, 1.0f);
  MatrixF x(13, 96);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = n(rng);
  const MatrixD exact = x.cast<double>() * wq.transpose();  // [13, 40]
  MatrixF y(13, 40);
  y.setConstant(1.0f);
  xwtq(x.data(), 13, 96, p, 0, 25, 0.0f, y.data(), 40);          // columns [0, 25)
  xwtq(x.data(), 13, 96, p, 25, 40, 0.0f, y.data() + 25, 40);    // columns [25, 40)
  const MatrixD mag = x.cast<double>().cwiseAbs() * wq.cwiseAbs().transpose();
  for (int i = 0; i < 13; ++i) {
    for (int j = 0; j < 40; ++j) EXPECT_NEAR(y(i, j), exact(i, j), 1e-5 * mag(i, j)) << i << " " << j;
  }
}

}  // namespace
}  // namespace latentllm::quant
