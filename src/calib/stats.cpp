#include <cmath>

#include "core/gemm.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/error.hpp"

namespace latentllm::calib {

void SiteStats::reset(int width) {
  xtx = MatrixD::Zero(width, width);
  sum = VectorD::Zero(width);
  abs_sum = VectorD::Zero(width);
  n = 0;
}

void SiteStats::add(const MatrixF& x, std::int64_t first_token) {
  const auto w = x.cols();
  if (w != xtx.rows()) {
    throw Error(fmt::format("calibration statistics: input width (expected {}, got {})", xtx.rows(), w));
  }
  if (!x.allFinite()) {
    Eigen::Index t = 0, f = 0;
    (!x.array().isFinite()).cast<int>().maxCoeff(&t, &f);
    throw NumericError(fmt::format("non-finite calibration input (expected finite activations, got {} at token {}, "
                                   "feature {})", x(t, f), first_token + t, f));
  }
  core::accumulate_xtx(x.data(), static_cast<int>(x.rows()), static_cast<int>(w), static_cast<int>(w), xtx);
  // Column sums in double: one pass over rows (row-major), vectorizes over w.
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    const auto row = x.row(t).cast<double>();
    sum += row.transpose();
    abs_sum += row.cwiseAbs().transpose();
  }
  n += x.rows();
}

VectorD SiteStats::mean() const { return n > 0 ? VectorD(sum / static_cast<double>(n)) : VectorD(sum); }

VectorD SiteStats::abs_mean() const {
  return n > 0 ? VectorD(abs_sum / static_cast<double>(n)) : VectorD(abs_sum);
}

MatrixD SiteStats::centered() const {
  if (n == 0) return xtx;
  const VectorD mu = mean();
  return xtx - static_cast<double>(n) * mu * mu.transpose();
}

}  // namespace latentllm::calib
