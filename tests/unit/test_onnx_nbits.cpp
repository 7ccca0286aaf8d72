// format::nbits_tensors: a packed matrix as com.microsoft::MatMulNBits' B, scales and zero points. Read
// back by MatMulNBits' rule (the code of column k at bits [k·bits, (k + 1)·bits) of its row's blocks, the
// zero point of block k / block_size from the packed uint8 or the float zero points, (code − zero)·scale),
// they are exactly latentllm's dequantized matrix, a partial last block included (fractional zero points:
// through the graph's per-group term beside MatMulNBits without zero points); and which matrices ONNX
// Runtime's CPU kernel does not take.
#include <gtest/gtest.h>

#include <random>

#include "format/onnx_nbits.hpp"
#include "latentllm/error.hpp"
#include "quant/pack.hpp"
#include "quant/quant.hpp"

namespace latentllm::format {
namespace {

MatrixD gaussian(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  MatrixD m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
  return m;
}

quant::PackedMatrix packed(int bits, int group, quant::Grid grid, std::int64_t rows = 7, std::int64_t cols = 50) {
  return quant::pack(quant::rtn(gaussian(rows, cols, 3), quant::QuantSpec{bits, group, grid}, "test"));
}

unsigned bits_at(const std::uint8_t* row, std::int64_t bit, int bits) {
  return (row[bit / 8] >> (bit % 8)) & ((1u << bits) - 1u);  // bits divides 8: a value never straddles bytes
}

// W' [N, K] as the graph computes it: MatMulNBits' (code − zero_point)·scale with the uint8 zero points,
// or without zero points (2^(bits−1)) less the fractional zero points' term per group.
MatrixD matmul_nbits_weight(const NBitsTensors& t) {
  const std::int64_t n_blocks = t.b_dims[1], blob = t.b_dims[2], zp_row = (n_blocks * t.bits + 7) / 8;
  MatrixD w(t.N, t.K);
  for (std::int64_t n = 0; n < t.N; ++n) {
    for (std::int64_t k = 0; k < t.K; ++k) {
      const std::int64_t blk = k / t.block_size, g = n * n_blocks + blk;
      const unsigned code = bits_at(t.b.data() + n * n_blocks * blob, k * t.bits, t.bits);
      const double s = f16_to_f32(t.scales[static_cast<std::size_t>(g)]);
      if (t.zeros_u8.empty()) {
        const double z = f16_to_f32(t.zeros_f16[static_cast<std::size_t>(g)]), z0 = t.default_zero();
        w(n, k) = (code - z0) * s - (z - z0) * s;
      } else {
        w(n, k) = (code - static_cast<double>(bits_at(t.zeros_u8.data() + n * zp_row, blk * t.bits, t.bits))) * s;
      }
    }
  }
  return w;
}

TEST(OnnxNBits, FractionalZeroPointsRoundTripExactly) {
  for (const int bits : {2, 4, 8}) {
    const quant::PackedMatrix p = packed(bits, 16, quant::Grid::MinMax);  // 50 columns: blocks 16, 16, 16, 2
    ASSERT_EQ(nbits_unsupported(p), "");
    const NBitsTensors t = nbits_tensors(p);
    EXPECT_EQ(t.b_dims, (std::vector<std::int64_t>{7, 4, 2 * bits}));
    EXPECT_EQ(t.b, p.codes);
    EXPECT_TRUE(t.zeros_u8.empty());
    EXPECT_EQ(t.scales, p.scales);
    EXPECT_EQ(t.zeros_f16, p.zeros);
    EXPECT_EQ(matmul_nbits_weight(t), quant::dequantize(quant::unpack(p))) << bits;
  }
}

TEST(OnnxNBits, IntegerZeroPointsArePackedUint8) {
  for (const int bits : {2, 4, 8}) {
    const quant::PackedMatrix p = packed(bits, 32, quant::Grid::IntegerZero, 5, 70);  // blocks 32, 32, 6
    ASSERT_EQ(nbits_unsupported(p), "") << bits;
    const NBitsTensors t = nbits_tensors(p);
    EXPECT_TRUE(t.zeros_f16.empty()) << bits;
    EXPECT_EQ(t.zeros_u8.size(), static_cast<std::size_t>(5 * ((3 * bits + 7) / 8))) << bits;
    EXPECT_EQ(matmul_nbits_weight(t), quant::dequantize(quant::unpack(p))) << bits;
  }
}

TEST(OnnxNBits, WhatOnnxRuntimeDoesNotTake) {
  EXPECT_NE(nbits_unsupported(packed(3, 32, quant::Grid::MinMax)).find("3-bit"), std::string::npos);
  EXPECT_NE(nbits_unsupported(packed(4, 24, quant::Grid::MinMax)).find("groups of 24"), std::string::npos);
  EXPECT_NE(nbits_unsupported(packed(4, 8, quant::Grid::MinMax)).find("groups of 8"), std::string::npos);
  EXPECT_EQ(nbits_unsupported(packed(8, 32, quant::Grid::MinMax)), "");
  EXPECT_EQ(nbits_unsupported(packed(4, 256, quant::Grid::MinMax)), "");
  EXPECT_THROW(nbits_tensors(packed(3, 32, quant::Grid::MinMax)), Error);
}

}  // namespace
}  // namespace latentllm::format
