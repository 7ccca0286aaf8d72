#include "compress/whitening.hpp"

#include <algorithm>
#include <cmath>

#include "compress/notes.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {

double absolute_damping(const MatrixD& c, double lambda_rel) {
  return c.rows() > 0 ? lambda_rel * c.diagonal().mean() : 0.0;
}

DampedSpectrum damped_spectrum(const MatrixD& c, double lambda_rel, double floor_rel, std::string_view context) {
  DampedSpectrum e;
  e.lambda = absolute_damping(c, lambda_rel);
  MatrixD s = c;  // [d, d]
  s.diagonal().array() += e.lambda;
  e.eig = linalg::sym_eig(s, context);
  const auto d = s.rows();
  const double vmax = d > 0 ? std::max(e.eig.values(0), 0.0) : 0.0;
  e.keep.resize(static_cast<std::size_t>(d));
  for (Eigen::Index i = 0; i < d; ++i) {
    const double v = e.eig.values(i);
    e.keep[static_cast<std::size_t>(i)] = v > floor_rel * vmax && v > 0.0;
    if (!e.keep[static_cast<std::size_t>(i)]) ++e.dropped;
  }
  if (d > 0 && e.dropped == d) {
    e.zero = true;
    record_note(context, "zero-covariance", zero_covariance_detail("input covariance"));
  } else if (e.dropped > 0) {
    record_note(context, "pinv-drop",
                fmt::format("{} of {} eigenvalues of C + λI at or below {:g} x the largest (never excited by the "
                            "calibration data): dropped from P and its pseudo-inverse, B·A does not act on them",
                            e.dropped, d, floor_rel));
  }
  return e;
}

RootCovariance root_covariance(const MatrixD& c, double lambda_rel, std::string_view context, double floor_rel) {
  const DampedSpectrum e = damped_spectrum(c, lambda_rel, floor_rel, context);
  RootCovariance out;
  out.lambda = e.lambda;
  out.dropped = e.dropped;
  out.zero = e.zero;
  if (e.zero) {
    out.p = out.p_pinv = MatrixD::Identity(c.rows(), c.rows());
    return out;
  }
  out.p = spectral(e, [](double w) { return std::sqrt(w); });
  out.p_pinv = spectral(e, [](double w) { return 1.0 / std::sqrt(w); });
  return out;
}

}  // namespace latentllm::compress
