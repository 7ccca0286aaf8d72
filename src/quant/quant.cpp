#include "quant/quant.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::quant {

namespace {

// A MinMax grid keeps |z| <= kZeroBound codes: half precision holds every integer up to 2048, so the
// stored origin s·z is within half a code of the exact one. Only a group whose range is below
// maxq/2048 of its magnitude (constant or nearly so) reaches it; a group that contains 0, or values of
// both signs, never does, and gets the paper's grid unchanged.
constexpr double kZeroBound = 2048.0;

}  // namespace

std::string_view grid_name(Grid grid) { return grid == Grid::MinMax ? "minmax" : "integer-zero"; }

void check_spec(const QuantSpec& spec, std::string_view context) {
  if (spec.bits != 2 && spec.bits != 3 && spec.bits != 4 && spec.bits != 8) {
    throw ConfigError(fmt::format("{}: quantization bits (expected 2, 3, 4 or 8, got {})", context, spec.bits));
  }
  if (spec.group <= 0 || spec.group % 8 != 0) {
    throw ConfigError(
        fmt::format("{}: quantization group size (expected a positive multiple of 8, got {})", context, spec.group));
  }
}

std::uint16_t f64_to_f16(double x) {
  if (std::isnan(x)) return 0x7e00;
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a == 0.0) return sign;
  int e = 0;
  (void)std::frexp(a, &e);                 // a = m·2^e, m ∈ [0.5, 1): the leading bit is 2^(e − 1)
  const int lead = std::max(e - 1, -14);   // below 2^-14 the spacing stays 2^-24 (subnormals)
  // 11 significant bits: scaling by a power of two is exact, nearbyint rounds once, to even.
  const double v = std::ldexp(std::nearbyint(std::ldexp(a, 10 - lead)), lead - 10);
  if (v > 65504.0) return static_cast<std::uint16_t>(sign | 0x7c00);
  return static_cast<std::uint16_t>(sign | f32_to_f16(static_cast<float>(v)));  // v is a half: exact
}

GroupGrid fit_grid(const double* x, std::int64_t n, std::int64_t stride, const QuantSpec& spec,
                   std::string_view context) {
  double lo = x[0], hi = x[0];
  for (std::int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
  }
  const int maxq = spec.maxq();
  if (spec.grid == Grid::IntegerZero) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
    if (lo == 0.0 && hi == 0.0) lo = -1.0, hi = 1.0;  // as the reference: an all-zero group gets [−1, 1]
  }
  double s = (hi - lo) / maxq;
  if (spec.grid == Grid::MinMax) {
    s = std::max(s, std::max(std::fabs(lo), std::fabs(hi)) / kZeroBound);
    if (s == 0.0) s = 1.0;  // an all-zero group: any scale, z = 0 gives code 0 = 0 exactly
  }
  GroupGrid g;
  g.scale_f16 = f64_to_f16(s);
  if ((g.scale_f16 & 0x7fff) == 0x7c00) {
    throw NumericError(fmt::format("{}: quantization scale overflows F16 (expected (max - min) / {} <= 65504, got {})",
                                   context, maxq, s));
  }
  if (g.scale_f16 == 0) g.scale_f16 = 1;  // below half precision: the smallest subnormal, 2^-24
  g.s = f16_to_f32(g.scale_f16);
  double z = -lo / g.s;
  if (spec.grid == Grid::IntegerZero) z = std::clamp(std::nearbyint(z), 0.0, static_cast<double>(maxq));
  g.zero_f16 = f64_to_f16(z);
  g.z = f16_to_f32(g.zero_f16);
  return g;
}

GroupGrid QuantizedMatrix::grid(std::int64_t row, std::int64_t g) const {
  const auto k = static_cast<std::size_t>(row * groups() + g);
  GroupGrid out;
  out.scale_f16 = scales[k];
  out.zero_f16 = zeros[k];
  out.s = f16_to_f32(scales[k]);
  out.z = f16_to_f32(zeros[k]);
  return out;
}

QuantizedMatrix rtn(const MatrixD& w, const QuantSpec& spec, std::string_view context) {
  check_spec(spec, context);
  linalg::check_finite(w, context, "weight");
  QuantizedMatrix q;
  q.rows = w.rows();
  q.cols = w.cols();
  q.spec = spec;
  const std::int64_t n_g = q.groups();
  q.codes.resize(static_cast<std::size_t>(q.rows * q.cols));
  q.scales.resize(static_cast<std::size_t>(q.rows * n_g));
  q.zeros.resize(q.scales.size());
  const int maxq = spec.maxq();
  for (std::int64_t r = 0; r < q.rows; ++r) {
    for (std::int64_t g = 0; g < n_g; ++g) {
      const std::int64_t c0 = g * spec.group, c1 = std::min(q.cols, c0 + spec.group);
      // W is column-major: one row's group is strided by the row count.
      const GroupGrid grid = fit_grid(&w(r, c0), c1 - c0, w.rows(), spec, context);
      q.scales[static_cast<std::size_t>(r * n_g + g)] = grid.scale_f16;
      q.zeros[static_cast<std::size_t>(r * n_g + g)] = grid.zero_f16;
      for (std::int64_t c = c0; c < c1; ++c) {
        q.codes[static_cast<std::size_t>(r * q.cols + c)] = static_cast<std::uint8_t>(code_of(w(r, c), grid, maxq));
      }
    }
  }
  return q;
}

MatrixD dequantize(const QuantizedMatrix& q) {
  MatrixD w(q.rows, q.cols);  // [rows, cols]
  const std::int64_t n_g = q.groups();
  for (std::int64_t r = 0; r < q.rows; ++r) {
    for (std::int64_t g = 0; g < n_g; ++g) {
      const GroupGrid grid = q.grid(r, g);
      const std::int64_t c0 = g * q.spec.group, c1 = std::min(q.cols, c0 + q.spec.group);
      const std::uint8_t* codes = q.codes.data() + r * q.cols;
      for (std::int64_t c = c0; c < c1; ++c) w(r, c) = value_of(codes[c], grid);
    }
  }
  return w;
}

double output_error(const MatrixD& w, const MatrixD& w_hat, const MatrixD& h) {
  const MatrixD d = w - w_hat;  // [rows, cols]
  return (d * h).cwiseProduct(d).sum();
}

}  // namespace latentllm::quant
