// Group-wise quantization (src/quant): half-precision rounding of the grid, the paper's chunk-wise
// min–max rule on a hand-computed chunk, the grids' guarantees, and the packed storage (packing order,
// round trips for every bit width).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "quant/pack.hpp"
#include "quant/quant.hpp"

namespace latentllm::quant {
namespace {

MatrixD gaussian(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed, double sigma = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, sigma);
  MatrixD m(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) m(i, j) = n(rng);
  return m;
}

TEST(QuantF16, RoundsOnceFromDouble) {
  // 1 + 2^-11 + 2^-40 lies just above the tie between the halves 1 and 1 + 2^-10: one rounding goes
  // up; through float the 2^-40 is lost first and the tie goes to even (1).
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(f64_to_f16(x), 0x3c01);
  EXPECT_EQ(f32_to_f16(static_cast<float>(x)), 0x3c00);
  EXPECT_EQ(f64_to_f16(1.0 + std::ldexp(1.0, -11)), 0x3c00);  // an exact tie: to even
  EXPECT_EQ(f64_to_f16(65504.0), 0x7bff);
  EXPECT_EQ(f64_to_f16(65519.0), 0x7bff);
  EXPECT_EQ(f64_to_f16(65520.0), 0x7c00);  // the tie above the largest half rounds to infinity
  EXPECT_EQ(f64_to_f16(-std::ldexp(1.0, -25)), 0x8000);          // half the smallest subnormal: to even (0)
  EXPECT_EQ(f64_to_f16(1.5 * std::ldexp(1.0, -25)), 0x0001);     // above it: the smallest subnormal
  EXPECT_EQ(f64_to_f16(3.0 * std::ldexp(1.0, -24)), 0x0003);
  // Agrees with the float path wherever the value is a float (no double rounding possible).
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 10000; ++i) {
    const float f = u(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 30));
    ASSERT_EQ(f64_to_f16(f), f32_to_f16(f)) << f;
  }
}

// The appendix's rule x' = round[(x − x_min)(2^q − 1)/(x_max − x_min)]·(x_max − x_min)/(2^q − 1) + x_min,
// by hand on two chunks of 8 at q = 2 whose scales and offsets are halves exactly.
TEST(QuantRtn, PaperRuleOnAHandComputedChunk) {
  MatrixD w(1, 16);
  // chunk 0: x_min −1.5, x_max 1.5: s = 3/3 = 1, z = 1.5; (x − x_min)/s = 0, 1.25, 1.5, 2, 2.5, 3, 2.2, 0.1
  // chunk 1: x_min 0.25, x_max 1.75: s = 1.5/3 = 0.5, z = −0.5; (x − x_min)/s = 0, 3, 0.5, 1.5, 2.5, 1.3, 1.9, 0.1
  w << -1.5, -0.25, 0.0, 0.5, 1.0, 1.5, 0.7, -1.4, 0.25, 1.75, 0.5, 1.0, 1.5, 0.9, 1.2, 0.3;
  const QuantizedMatrix q = rtn(w, {2, 8, Grid::MinMax}, "test");
  // Ties (1.5, 2.5, 0.5) round to even.
  const std::vector<std::uint8_t> codes = {0, 1, 2, 2, 2, 3, 2, 0, 0, 3, 0, 2, 2, 1, 2, 0};
  EXPECT_EQ(q.codes, codes);
  EXPECT_EQ(q.scales, (std::vector<std::uint16_t>{0x3c00, 0x3800}));  // 1, 0.5
  EXPECT_EQ(q.zeros, (std::vector<std::uint16_t>{0x3e00, 0xb800}));   // 1.5, −0.5
  MatrixD expect(1, 16);
  expect << -1.5, -0.5, 0.5, 0.5, 0.5, 1.5, 0.5, -1.5, 0.25, 1.75, 0.25, 1.25, 1.25, 0.75, 1.25, 0.25;
  EXPECT_EQ(dequantize(q), expect);  // exact
}

// On generic weights every value lies within its stored grid's reach: |w − w'| <= s/2 up to the half
// rounding of s and z, and the codes are the exact rule's (unrounded s, z) but near ties, by one.
TEST(QuantRtn, GenericWeightsFollowTheExactRule) {
  const MatrixD w = gaussian(24, 200, 3, 0.02);  // 200 = 6 groups of 32 and one of 8
  for (int bits : {2, 3, 4, 8}) {
    const QuantSpec spec{bits, 32, Grid::MinMax};
    const QuantizedMatrix q = rtn(w, spec, "test");
    const MatrixD wq = dequantize(q);
    int differ = 0;
    for (Eigen::Index r = 0; r < w.rows(); ++r) {
      for (Eigen::Index c = 0; c < w.cols(); ++c) {
        const auto g = c / 32, c0 = g * 32, n = std::min<Eigen::Index>(32, w.cols() - c0);
        const double lo = w.row(r).segment(c0, n).minCoeff(), hi = w.row(r).segment(c0, n).maxCoeff();
        const int exact = static_cast<int>(std::nearbyint((w(r, c) - lo) * spec.maxq() / (hi - lo)));
        const int code = q.codes[static_cast<std::size_t>(r * w.cols() + c)];
        differ += exact != code;
        EXPECT_LE(std::abs(exact - code), 1);
        EXPECT_LE(std::fabs(w(r, c) - wq(r, c)), 0.75 * q.grid(r, g).s) << bits << " " << r << " " << c;
      }
    }
    // Half-precision s and z move the grid by at most about maxq·2^-12 + |z|·2^-12 codes, so only codes
    // that close to a tie change.
    EXPECT_LE(differ, w.size() * spec.maxq() / 1024 + 2) << bits;
  }
}

TEST(QuantRtn, IntegerZeroGridHoldsZeroExactly) {
  MatrixD w = gaussian(8, 64, 4);
  w(2, 5) = 0.0;
  w.row(3).segment(16, 16).array() = w.row(3).segment(16, 16).array().abs() + 0.5;  // all positive: 0 outside
  const QuantizedMatrix q = rtn(w, {3, 16, Grid::IntegerZero}, "test");
  const MatrixD wq = dequantize(q);
  EXPECT_EQ(wq(2, 5), 0.0);
  for (std::size_t k = 0; k < q.zeros.size(); ++k) {
    const double z = f16_to_f32(q.zeros[k]);
    EXPECT_EQ(z, std::nearbyint(z));
    EXPECT_GE(z, 0.0);
    EXPECT_LE(z, 7.0);
  }
  EXPECT_EQ(q.grid(3, 1).z, 0.0);  // the range [0, max] of a positive group
}

// A constant group (max = min) and an all-zero one: the scale is raised so the zero stays within
// 2048 codes, and the value comes back to half precision.
TEST(QuantRtn, DegenerateGroups) {
  MatrixD w(3, 8);
  w.row(0).setConstant(0.3);
  w.row(1).setConstant(-1234.5);
  w.row(2).setZero();
  for (Grid grid : {Grid::MinMax, Grid::IntegerZero}) {
    const MatrixD wq = dequantize(rtn(w, {4, 8, grid}, "test"));
    for (Eigen::Index c = 0; c < 8; ++c) {
      EXPECT_NEAR(wq(0, c), 0.3, 0.3 * std::ldexp(1.0, -10)) << grid_name(grid);
      EXPECT_NEAR(wq(1, c), -1234.5, 1234.5 * std::ldexp(1.0, -10)) << grid_name(grid);
      EXPECT_EQ(wq(2, c), 0.0) << grid_name(grid);
    }
  }
}

TEST(QuantRtn, OutputErrorIsTheTraceForm) {
  const MatrixD w = gaussian(5, 16, 6), x = gaussian(16, 40, 7);
  const MatrixD wq = dequantize(rtn(w, {3, 8, Grid::MinMax}, "test"));
  const MatrixD h = x * x.transpose();
  EXPECT_NEAR(output_error(w, wq, h), ((w - wq) * x).squaredNorm(), 1e-10 * ((w - wq) * x).squaredNorm());
}

// The packing order of docs/FORMAT.md: a row's little-endian bit stream, low bits first.
TEST(QuantPack, ByteLayout) {
  QuantizedMatrix q;
  q.rows = 1;
  q.cols = 8;
  q.spec = {4, 8, Grid::MinMax};
  q.codes = {1, 2, 3, 4, 5, 6, 7, 15};
  q.scales = {0x3c00};
  q.zeros = {0};
  EXPECT_EQ(pack(q).codes, (std::vector<std::uint8_t>{0x21, 0x43, 0x65, 0xf7}));  // low nibble first
  q.spec.bits = 2;
  q.codes = {1, 2, 3, 0, 3, 3, 0, 1};
  EXPECT_EQ(pack(q).codes, (std::vector<std::uint8_t>{0x39, 0x4f}));  // 0b00'11'10'01, 0b01'00'11'11
  q.spec.bits = 3;
  q.codes = {1, 2, 3, 4, 5, 6, 7, 0};
  // bits: 001 010 011 100 101 110 111 000, stream from bit 0: c0 in bits 0–2, c1 in 3–5, c2 in 6–8, …
  EXPECT_EQ(pack(q).codes, (std::vector<std::uint8_t>{0xd1, 0x58, 0x1f}));
  q.spec.bits = 8;
  q.codes = {1, 2, 3, 4, 5, 6, 7, 255};
  EXPECT_EQ(pack(q).codes, q.codes);
}

TEST(QuantPack, RoundTripsEveryWidthWithAPartialGroup) {
  const MatrixD w = gaussian(7, 100, 8);  // 100 = 3 groups of 32 and a padded one of 4
  for (int bits : {2, 3, 4, 8}) {
    const QuantizedMatrix q = rtn(w, {bits, 32, Grid::MinMax}, "test");
    const PackedMatrix p = pack(q);
    EXPECT_EQ(p.row_bytes(), 4 * 32 * bits / 8);
    EXPECT_EQ(p.codes.size(), static_cast<std::size_t>(7 * p.row_bytes()));
    EXPECT_EQ(packed_bytes(7, 100, {bits, 32, Grid::MinMax}),
              static_cast<std::int64_t>(p.codes.size() + 2 * p.scales.size() + 2 * p.zeros.size()));
    const QuantizedMatrix back = unpack(p);
    EXPECT_EQ(back.codes, q.codes) << bits;
    EXPECT_EQ(back.scales, q.scales);
    EXPECT_EQ(back.zeros, q.zeros);
    EXPECT_EQ(dequantize(back), dequantize(q));
    const PackedTensors t{{7, 4, 32 * bits / 8}, p.codes, {7, 4}, p.scales, {7, 4}, p.zeros};
    const PackedMatrix read = read_packed("m", bits, 32, 100, t);
    EXPECT_EQ(read.codes, p.codes);
    EXPECT_EQ(read.rows, 7);
  }
}

}  // namespace
}  // namespace latentllm::quant
