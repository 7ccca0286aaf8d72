// Quantized low-rank factors (src/quant/factors.cpp): GPTQ on both factors beats round to nearest on
// the module's output error; refitting B to the quantized A lowers it further; with the refit the
// output error splits exactly into the refit's residual and B's quantization error (B̃ is the least-
// squares optimum for the quantized A).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include <Eigen/LU>

#include "quant/factors.hpp"

namespace latentllm::quant {
namespace {

MatrixD gaussian(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  MatrixD m(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) m(i, j) = n(rng);
  return m;
}

// A module's factors and its input second moment: d' = 48, r = 24, d = 96; correlated inputs.
struct Module {
  MatrixD b = 0.1 * gaussian(48, 24, 1);
  MatrixD a = 0.1 * gaussian(24, 96, 2);
  MatrixD c;
  Module() {
    const MatrixD mix = MatrixD::Identity(96, 96) + 0.3 * gaussian(96, 96, 3);
    const MatrixD x = mix * gaussian(96, 400, 4);  // [d, n]
    c = x * x.transpose();
  }
};

FactorOptions options(Quantizer q, int bits, bool refit) {
  FactorOptions o;
  o.spec = {bits, 32, Grid::MinMax};
  o.quantizer = q;
  o.refit_b = refit;
  return o;
}

TEST(QuantFactors, GptqBeatsRoundToNearestAndTheRefitHelps) {
  const Module m;
  for (int bits : {3, 4, 8}) {
    const double rtn_err = quantize_factors(m.b, m.a, m.c, options(Quantizer::Rtn, bits, false), "m").error;
    const double gptq_err = quantize_factors(m.b, m.a, m.c, options(Quantizer::Gptq, bits, false), "m").error;
    const double refit_err = quantize_factors(m.b, m.a, m.c, options(Quantizer::Gptq, bits, true), "m").error;
    EXPECT_LT(gptq_err, rtn_err) << bits;
    EXPECT_LT(refit_err, gptq_err) << bits << ": " << refit_err << " against " << gptq_err;
    RecordProperty(fmt::format("q{}_gptq_over_rtn", bits), fmt::format("{:.3f}", gptq_err / rtn_err));
    RecordProperty(fmt::format("q{}_refit_over_gptq", bits), fmt::format("{:.3f}", refit_err / gptq_err));
  }
}

// With the refit undamped, B·A − B'·A' = (B·A − B̃·A') + (B̃ − B')·A', and the two parts are orthogonal
// in the C inner product (the normal equations), so the errors add.
TEST(QuantFactors, RefitErrorSplitsIntoResidualAndQuantization) {
  const Module m;
  FactorOptions o = options(Quantizer::Rtn, 4, true);
  o.gptq.percdamp = 0.0;
  const QuantizedFactors f = quantize_factors(m.b, m.a, m.c, o, "m");
  const MatrixD a_hat = dequantize(f.a), b_hat = dequantize(f.b);
  const MatrixD h_b = a_hat * m.c * a_hat.transpose();
  const MatrixD b_tilde = (m.b * m.a * m.c * a_hat.transpose()) * h_b.inverse();
  const double residual = output_error(m.b * m.a, b_tilde * a_hat, m.c);
  const double quantization = output_error(b_tilde, b_hat, h_b);
  EXPECT_NEAR(f.error, residual + quantization, 1e-8 * f.error);
  EXPECT_GT(residual, 0.0);
  EXPECT_GT(quantization, 0.0);
}

// Round to nearest on both factors is the paper's rule on each, whatever C is.
TEST(QuantFactors, RoundToNearestIgnoresTheStatistics) {
  const Module m;
  const QuantizedFactors f = quantize_factors(m.b, m.a, m.c, options(Quantizer::Rtn, 3, false), "m");
  EXPECT_EQ(f.a.codes, rtn(m.a, {3, 32, Grid::MinMax}, "a").codes);
  EXPECT_EQ(f.b.codes, rtn(m.b, {3, 32, Grid::MinMax}, "b").codes);
}

}  // namespace
}  // namespace latentllm::quant
