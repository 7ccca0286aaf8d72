#include "model/ops.hpp"

#include "model/activation.hpp"

#include <cmath>
#include <algorithm>
#include <cstdint>

#include "latentllm/error.hpp"
#include "core/parallel.hpp"

namespace latentllm::model {
namespace {

// Elements per chunk of parallel work: small enough to balance, large enough to amortize a hand-out.
constexpr std::int64_t kChunkElems = 1 << 14;

// f(i) for every row i < n of a [n, width] matrix, in parallel chunks. A norm reads a row twice and
// writes it once, with a few operations per element.
template <typename F>
void for_rows(std::int64_t n, std::int64_t width, F&& f) {
  const std::int64_t grain = std::max<std::int64_t>(1, kChunkElems / std::max<std::int64_t>(width, 1));
  const double elems = static_cast<double>(n) * static_cast<double>(width);
  core::parallel_for(n, grain, core::Work{6 * elems, 12 * elems}, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) f(i);
  });
}

// Σ x_j and Σ (x_j − c)² over a row in double, with 8 independent partial sums (added in a fixed
// order): one serial chain of double adds per row kept the norms latency-bound.
constexpr int kLanes = 8;

double row_sum(const float* x, std::int64_t d) {
  double acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l];
  for (; j < d; ++j) acc[0] += x[j];
  double s = 0;
  for (double a : acc) s += a;
  return s;
}

double row_sq_dev(const float* x, std::int64_t d, double c) {
  double acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += (x[j + l] - c) * (x[j + l] - c);
  for (; j < d; ++j) acc[0] += (x[j] - c) * (x[j] - c);
  double s = 0;
  for (double a : acc) s += a;
  return s;
}

}  // namespace

void layer_norm(const MatrixF& x, const VectorF& w, const VectorF& b, float eps, MatrixF& y) {
  const std::int64_t n = x.rows(), d = x.cols();
  y.resize(n, d);
  const bool affine = w.size() == d;
  const bool has_bias = b.size() == d;
  for_rows(n, d, [&](std::int64_t i) {
    const float* xi = x.data() + i * d;
    float* yi = y.data() + i * d;
    const double mean = row_sum(xi, d) / static_cast<double>(d);
    const double sq = row_sq_dev(xi, d, mean);
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(d) + eps));
    const float m = static_cast<float>(mean);
    for (std::int64_t j = 0; j < d; ++j) {
      float v = (xi[j] - m) * inv;
      if (affine) v *= w[j];
      if (has_bias) v += b[j];
      yi[j] = v;
    }
  });
}

void rms_norm(const MatrixF& x, const VectorF& w, float eps, MatrixF& y) {
  const std::int64_t n = x.rows(), d = x.cols();
  y.resize(n, d);
  for_rows(n, d, [&](std::int64_t i) {
    const float* xi = x.data() + i * d;
    float* yi = y.data() + i * d;
    const double sq = row_sq_dev(xi, d, 0.0);
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(d) + eps));
    for (std::int64_t j = 0; j < d; ++j) yi[j] = w[j] * (xi[j] * inv);
  });
}

void rms_norm_heads(MatrixF& x, std::int64_t d_h, const VectorF& w, float eps) {
  const std::int64_t rows = x.size() / d_h;  // (token, head) pairs: x is row-major, heads contiguous
  for_rows(rows, d_h, [&](std::int64_t i) {
    float* xi = x.data() + i * d_h;
    const double sq = row_sq_dev(xi, d_h, 0.0);
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(d_h) + eps));
    for (std::int64_t j = 0; j < d_h; ++j) xi[j] = w[j] * (xi[j] * inv);
  });
}

void activate_span(float* p, std::int64_t n, Activation act) {
  if (act == Activation::Relu) {
    for (std::int64_t i = 0; i < n; ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) p[i] = activate(act, p[i]);
}

bool all_finite(const float* p, std::int64_t n) {
  const Eigen::Map<const Eigen::ArrayXf> a(p, n);
  return (a - a).sum() == 0.0f;
}

void check_finite(const MatrixF& m, const std::string& what) {
  if (all_finite(m.data(), m.size())) return;
  for (std::int64_t i = 0; i < m.rows(); ++i)
    for (std::int64_t j = 0; j < m.cols(); ++j)
      if (!std::isfinite(m(i, j))) {
        throw NumericError(
            fmt::format("{}: non-finite value at [{}, {}] (expected finite, got {})", what, i, j, m(i, j)));
      }
}

void check_finite(const VectorF& v, const std::string& what) {
  if (all_finite(v.data(), v.size())) return;
  for (std::int64_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) {
      throw NumericError(fmt::format("{}: non-finite value at [{}] (expected finite, got {})", what, i, v[i]));
    }
}

}  // namespace latentllm::model
