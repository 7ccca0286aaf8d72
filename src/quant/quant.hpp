// Group-wise asymmetric quantization of a weight matrix: the grid of each group, round-to-nearest
// (the latentllm paper's appendix "Quantization-Aware Distillation") and dequantization. GPTQ is in
// gptq.hpp, the packed storage in pack.hpp.
//
// Glossary: q = bits per code, maxq = 2^q − 1, G = group size: G consecutive input columns of one row
// share a scale and a zero point, n_g = ceil(cols / G) groups per row (the last one may be shorter).
// A weight is [rows, cols] = [out, in] (PyTorch order), so a group runs along the input dimension,
// the reduction axis of y = W·x, as in GPTQ and ONNX Runtime's MatMulNBits.
//
// The stored form of a group: its scale s and zero point z, both IEEE half (F16), the zero in code
// units, and one code c ∈ [0, maxq] per weight; the weight it stands for is
//     w' = s·(c − z).
// Why a half-precision zero in code units rather than an integer zero or a half-precision minimum:
// the paper's rule, w' = round[(w − w_min)·maxq/(w_max − w_min)]·(w_max − w_min)/maxq + w_min, has the
// grid origin w_min, which an integer zero cannot hold (−w_min/s is rarely an integer); with z =
// −w_min/s it is exactly s·(c − z). The same (code − zero)·scale form is MatMulNBits' with zero points
// of the scales' type, so a quantized module maps onto it without converting; and the integer zeros of
// GPTQ's reference quantizer (Grid::IntegerZero) are exact in half precision, so one layout holds both.
// In double, s·(c − z) is exact (11 + 36 significant bits), so dequantize() has no rounding at all.
//
// Rounding is to nearest, ties to even (std::nearbyint in the default mode, numpy's rint), and a code
// is always chosen on the stored grid: the half-precision s and z, not the exact ones, so the codes
// are the nearest grid points of what is actually stored.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "latentllm/tensor.hpp"

namespace latentllm::quant {

// How a group's range becomes its grid.
enum class Grid {
  // The paper's chunk-wise min–max rule: the grid spans [w_min, w_max] of the group, z = −w_min/s.
  MinMax,
  // GPTQ's reference quantizer (Frantar et al. 2022, asymmetric): the range is widened to contain 0
  // and the zero point rounded to an integer, so that 0 is exactly representable.
  IntegerZero,
};
std::string_view grid_name(Grid grid);  // "minmax", "integer-zero"

struct QuantSpec {
  int bits = 4;             // q ∈ {2, 3, 4, 8}
  int group = 128;          // G: a positive multiple of 8 (a group's codes then fill whole bytes)
  Grid grid = Grid::MinMax;

  int maxq() const { return (1 << bits) - 1; }
  std::int64_t groups(std::int64_t cols) const { return (cols + group - 1) / group; }  // n_g
};
// Throws ConfigError "<context>: quantization bits (expected 2, 3, 4 or 8, got q)" or the group size's.
void check_spec(const QuantSpec& spec, std::string_view context);

// IEEE half rounding of a double, to nearest even, in one rounding (not through float, which would
// round twice); +-inf beyond the half range. numpy's float64 -> float16 conversion gives the same bits.
std::uint16_t f64_to_f16(double x);

// One group's grid: the stored half-precision scale and zero, and their (exact) values.
struct GroupGrid {
  std::uint16_t scale_f16 = 0, zero_f16 = 0;
  double s = 1.0, z = 0.0;  // f16_to_f32 of the above, widened
};
// The grid of the values x[0], x[stride], …, x[(n − 1)·stride] (one row's group; n >= 1). Scales that
// would underflow half precision, or be too small for the zero to stay within ±2048 codes (a group
// that is constant, or nearly so, relative to its magnitude), are raised so that the grid still
// covers the group; a scale beyond the half range throws NumericError naming `context`.
GroupGrid fit_grid(const double* x, std::int64_t n, std::int64_t stride, const QuantSpec& spec,
                   std::string_view context);

// The code of w on a grid: clamp(nearbyint(w/s + z), 0, maxq).
inline int code_of(double w, const GroupGrid& g, int maxq) {
  const double t = std::nearbyint(w / g.s + g.z);
  return t <= 0.0 ? 0 : (t >= maxq ? maxq : static_cast<int>(t));
}
// w' = s·(c − z), exact in double.
inline double value_of(int code, const GroupGrid& g) { return g.s * (code - g.z); }

// A quantized [rows, cols] matrix, one code per byte (the working form; pack.hpp packs it).
struct QuantizedMatrix {
  std::int64_t rows = 0, cols = 0;
  QuantSpec spec;
  std::vector<std::uint8_t> codes;    // [rows, cols] row-major, each in [0, maxq]
  std::vector<std::uint16_t> scales;  // [rows, n_g] F16
  std::vector<std::uint16_t> zeros;   // [rows, n_g] F16, in code units

  std::int64_t groups() const { return spec.groups(cols); }
  GroupGrid grid(std::int64_t row, std::int64_t g) const;
};

// Round to nearest on each group's own min–max grid: with Grid::MinMax exactly the paper's rule
// (appendix "Quantization-Aware Distillation"), chunk by chunk. w: [rows, cols]. Throws as check_spec,
// NumericError for a non-finite weight ("<context>: weight contains a non-finite value") or a scale
// beyond half precision.
QuantizedMatrix rtn(const MatrixD& w, const QuantSpec& spec, std::string_view context);

// W' = s·(c − z) element by element, [rows, cols], exact.
MatrixD dequantize(const QuantizedMatrix& q);

// The layer-output error of replacing W by W' on inputs with second moment H = Σ x·xᵀ:
// Σ_t ‖(W − W')·x_t‖² = tr((W − W')·H·(W − W')ᵀ). w, w_hat: [rows, cols], h: [cols, cols].
double output_error(const MatrixD& w, const MatrixD& w_hat, const MatrixD& h);

}  // namespace latentllm::quant
