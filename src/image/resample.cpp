// PIL's Image.resize on an 8-bit image (Pillow src/libImaging/Resample.c), reproduced operation for
// operation so that the pixels are the same: the coefficients are computed in double exactly as
// precompute_coeffs does, rounded to 22-bit fixed point (PRECISION_BITS = 32 − 8 − 2), and each output
// sample is the integer dot product plus the rounding half, shifted and clipped to 0..255. The filter
// expressions keep PIL's operation order; this file is compiled without floating-point contraction
// (CMakeLists.txt) so that no fused multiply-add changes a coefficient.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "latentllm/error.hpp"
#include "latentllm/image.hpp"

namespace latentllm::image {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

struct Filter {
  double (*weight)(double);
  double support;
};

double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

// Keys' cubic convolution with a = −0.5, in PIL's form.
double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

Filter filter_of(Resample r) {
  return r == Resample::Bilinear ? Filter{bilinear_filter, 1.0} : Filter{bicubic_filter, 2.0};
}

// For each output index: the first input index, the number of taps and their fixed-point weights.
struct Coefficients {
  int ksize = 0;
  std::vector<int> first;        // [out]
  std::vector<int> count;        // [out]
  std::vector<std::int32_t> k;   // [out, ksize]
};

// precompute_coeffs + normalize_coeffs_8bpc for the box (0, in_size): the filter is stretched by the
// downscale factor (support · scale taps on each side), weights normalised to sum 1, then rounded
// half away from zero to 22 fractional bits.
Coefficients precompute(int in_size, int out_size, const Filter& f) {
  // PIL passes the box as float; in1 − in0 is exact for sizes below 2^24.
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = f.support * filterscale;
  Coefficients c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(std::size_t(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = 0.0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // C's (int) truncation toward zero, as in PIL, then clamped to the image.
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = f.weight((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      c.k[std::size_t(xx) * c.ksize + x] = v < 0 ? static_cast<std::int32_t>(-0.5 + v * (1 << kPrecisionBits))
                                                 : static_cast<std::int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = std::max(xmax, 0);
  }
  return c;
}

// PIL's clip8: the accumulator (which started at half a unit) shifted down and clipped to 0..255.
// int32 as in PIL: the weights of a row sum to 1 with negative lobes of at most a quarter, so |ss| stays
// below 255 · 1.25 · 2^22 + 2^21 < 2^31 (PIL's "two extra bits for overflow").
std::uint8_t clip8(std::int32_t ss) {
  return static_cast<std::uint8_t>(std::clamp(ss >> kPrecisionBits, 0, 255));
}

// Rows [row0, row0 + rows) of `in`, resampled along x to c.first.size() columns.
RgbImage horizontal(const RgbImage& in, int row0, int rows, const Coefficients& c) {
  RgbImage out;
  out.height = rows;
  out.width = static_cast<int>(c.first.size());
  out.data.resize(std::size_t(out.height) * out.width * 3);
  for (int y = 0; y < rows; ++y) {
    for (int xx = 0; xx < out.width; ++xx) {
      const std::uint8_t* src = in.pixel(row0 + y, c.first[xx]);
      const std::int32_t* k = &c.k[std::size_t(xx) * c.ksize];
      std::int32_t ss0 = 1 << (kPrecisionBits - 1), ss1 = ss0, ss2 = ss0;
      for (int t = 0; t < c.count[xx]; ++t) {
        ss0 += src[t * 3 + 0] * k[t];
        ss1 += src[t * 3 + 1] * k[t];
        ss2 += src[t * 3 + 2] * k[t];
      }
      std::uint8_t* d = out.pixel(y, xx);
      d[0] = clip8(ss0);
      d[1] = clip8(ss1);
      d[2] = clip8(ss2);
    }
  }
  return out;
}

// Resampled along y to c.first.size() rows; `row0` is the input row that c's index 0 refers to. Each
// output row is accumulated a whole input row at a time (the same sums, in the same order, as PIL's
// per-pixel loop).
RgbImage vertical(const RgbImage& in, int row0, const Coefficients& c) {
  RgbImage out;
  out.height = static_cast<int>(c.first.size());
  out.width = in.width;
  out.data.resize(std::size_t(out.height) * out.width * 3);
  const std::size_t n = std::size_t(in.width) * 3;
  std::vector<std::int32_t> ss(n);  // [width · 3]
  for (int yy = 0; yy < out.height; ++yy) {
    const std::int32_t* k = &c.k[std::size_t(yy) * c.ksize];
    std::fill(ss.begin(), ss.end(), 1 << (kPrecisionBits - 1));
    for (int t = 0; t < c.count[yy]; ++t) {
      const std::uint8_t* src = in.pixel(c.first[yy] - row0 + t, 0);
      for (std::size_t i = 0; i < n; ++i) ss[i] += src[i] * k[t];
    }
    std::uint8_t* d = out.pixel(yy, 0);
    for (std::size_t i = 0; i < n; ++i) d[i] = clip8(ss[i]);
  }
  return out;
}

}  // namespace

RgbImage resize(const RgbImage& in, int height, int width, Resample resample) {
  if (height < 1 || width < 1 || std::int64_t{height} * width > kMaxImagePixels) {
    throw ConfigError(fmt::format("image {}x{}: resized size {}x{} (expected 1 to {} pixels, got {})", in.width,
                                  in.height, width, height, kMaxImagePixels, std::int64_t{height} * width));
  }
  if (height == in.height && width == in.width) return in;  // PIL: self.copy()
  const Filter f = filter_of(resample);
  const bool need_horizontal = width != in.width;
  const bool need_vertical = height != in.height;
  const Coefficients cv = precompute(in.height, height, f);
  // The horizontal pass only runs over the rows the vertical pass reads (PIL's ybox_first/last).
  const int row0 = need_vertical ? cv.first.front() : 0;
  const int row1 = need_vertical ? cv.first.back() + cv.count.back() : in.height;
  if (!need_vertical) return horizontal(in, 0, in.height, precompute(in.width, width, f));
  if (!need_horizontal) return vertical(in, 0, cv);
  return vertical(horizontal(in, row0, row1 - row0, precompute(in.width, width, f)), row0, cv);
}

}  // namespace latentllm::image
