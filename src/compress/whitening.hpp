// The root covariance P = (C + λI)^{1/2} and its pseudo-inverse P⁺ (paper Table 1, "RootCov": the
// optimal pre-conditioner of the activation loss ‖(W − Ŵ)·X‖² = ‖(W − Ŵ)·C^{1/2}‖²), the one home of
// the damped spectrum behind it: every method (asvd-rootcov, asvd-cov, asvd-hessian) and every joint
// solver (Q-K, V-O, up-down, the reduced-rank regressions) whitens through here.
//
// C + λI is eigendecomposed once (λ = lambda_rel · mean(diag C)). Eigenvalues at or below
// floor_rel × the largest (and negative round-off) are directions the calibration never excited:
// they are dropped from P and P⁺ alike (Moore–Penrose; a "pinv-drop" note), so no factor acts on
// them. When no eigenvalue is above the floor (all inputs zero) P = P⁺ = I (a "zero-covariance"
// note): every factorization then has zero activation loss.
#pragma once

#include <string_view>
#include <vector>

#include "latentllm/tensor.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {

// The floor of the pseudo-inverse, relative to the largest eigenvalue (linalg::sym_power's too).
inline constexpr double kPinvFloorRel = 1e-12;

// λ = lambda_rel · mean(diag C) (0 for an empty C).
double absolute_damping(const MatrixD& c, double lambda_rel);

struct DampedSpectrum {
  linalg::SymEig eig;      // of C + λI, eigenvalues descending
  std::vector<bool> keep;  // [d] above the floor
  int dropped = 0;
  double lambda = 0;       // the absolute damping added
  bool zero = false;       // nothing above the floor
};

// The spectrum of c + λI with the floor applied, recording the notes (context names the module, `what`
// the matrix in the note, e.g. "eigenvalues of C + λI"). c: [d, d], only its lower triangle is read.
DampedSpectrum damped_spectrum(const MatrixD& c, double lambda_rel, double floor_rel, std::string_view context);

// V·diag(f(w))·Vᵀ over the kept eigenpairs (0 on the dropped ones).  [d, d]
template <typename Fn>
MatrixD spectral(const DampedSpectrum& e, Fn&& f) {
  VectorD g = VectorD::Zero(e.eig.values.size());
  for (Eigen::Index i = 0; i < g.size(); ++i) {
    if (e.keep[static_cast<std::size_t>(i)]) g(i) = f(e.eig.values(i));
  }
  return e.eig.vectors * g.asDiagonal() * e.eig.vectors.transpose();
}

struct RootCovariance {
  MatrixD p;       // [d, d]  (C + λI)^{1/2} on the kept directions (I when zero)
  MatrixD p_pinv;  // [d, d]  its pseudo-inverse
  double lambda = 0;
  int dropped = 0;
  bool zero = false;
};
RootCovariance root_covariance(const MatrixD& c, double lambda_rel, std::string_view context,
                               double floor_rel = kPinvFloorRel);

}  // namespace latentllm::compress
