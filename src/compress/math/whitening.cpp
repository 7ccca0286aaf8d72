#include "compress/math/whitening.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "compress/stages/notes.hpp"
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

namespace {

thread_local int force_spectral = 0;  // SpectralWhiteningScope depth on this thread

Whitening spectral_whitening(const MatrixD& c, double lambda_rel, double floor_rel, std::string_view context) {
  const DampedSpectrum e = damped_spectrum(c, lambda_rel, floor_rel, context);
  Whitening out;
  out.route = WhiteningRoute::Spectral;
  out.lambda = e.lambda;
  out.dropped = e.dropped;
  out.zero = e.zero;
  if (e.zero) {
    out.f = out.f_pinv = MatrixD::Identity(c.rows(), c.rows());
    return out;
  }
  out.f = spectral(e, [](double w) { return std::sqrt(w); });
  out.f_pinv = spectral(e, [](double w) { return 1.0 / std::sqrt(w); });
  return out;
}

}  // namespace

SpectralWhiteningScope::SpectralWhiteningScope() { ++force_spectral; }
SpectralWhiteningScope::~SpectralWhiteningScope() { --force_spectral; }

Whitening whiten(const MatrixD& c, double lambda_rel, std::string_view context, double floor_rel) {
  linalg::check_finite(c, context, "input covariance");
  const double lambda = absolute_damping(c, lambda_rel);
  // Every eigenvalue of C + λI is ≥ λ (C is a Gram matrix) and ≤ tr(C + λI), so with λ above the floor
  // times the trace the spectral route would keep every direction: L gives the same B·A.
  const double trace = c.trace() + lambda * static_cast<double>(c.rows());
  if (force_spectral == 0 && lambda > 0.0 && lambda > floor_rel * trace) {
    MatrixD s = c;  // [d, d]
    s.diagonal().array() += lambda;
    if (std::optional<MatrixD> l = linalg::cholesky(s, context)) {
      Whitening out;
      out.route = WhiteningRoute::Cholesky;
      out.f = std::move(*l);
      out.lambda = lambda;
      return out;
    }
    // dpotrf found a non-positive pivot: C has eigenvalues below −λ (not a Gram matrix up to round-off),
    // so the spectral route decides which directions to drop.
  }
  return spectral_whitening(c, lambda_rel, floor_rel, context);
}

MatrixD Whitening::times(const MatrixD& m) const {
  return route == WhiteningRoute::Cholesky ? linalg::times_lower(m, f) : MatrixD(m * f);
}

MatrixD Whitening::times_pinv(const MatrixD& m) const {
  return route == WhiteningRoute::Cholesky ? linalg::solve_lower_right(m, f, false) : MatrixD(m * f_pinv);
}

MatrixD Whitening::times_pinv_t(const MatrixD& m) const {
  return route == WhiteningRoute::Cholesky ? linalg::solve_lower_right(m, f, true) : MatrixD(m * f_pinv);
}

MatrixD Whitening::pinv_matrix() const {
  return route == WhiteningRoute::Cholesky ? times_pinv(MatrixD::Identity(dim(), dim())) : f_pinv;
}

RootCovariance root_covariance(const MatrixD& c, double lambda_rel, std::string_view context, double floor_rel) {
  Whitening w = spectral_whitening(c, lambda_rel, floor_rel, context);
  return RootCovariance{std::move(w.f), std::move(w.f_pinv), w.lambda, w.dropped, w.zero};
}

}  // namespace latentllm::compress
