// Whitening by the damped input covariance C + λI (λ = lambda_rel · mean(diag C)), the one home of the
// root covariance behind every method (asvd-rootcov, asvd-cov, asvd-hessian) and every joint solver
// (Q-K, V-O, up-down, the reduced-rank regressions).
//
// The activation loss ‖(W − Ŵ)·X‖² = ‖(W − Ŵ)·C^{1/2}‖² is whitened by the root covariance P = (C +
// λI)^{1/2} (paper Table 1, "RootCov"), but any factor F with F·Fᵀ = C + λI serves as well: F = P·Q with Q
// orthogonal, so ‖(W − Ŵ)·F‖ = ‖(W − Ŵ)·P‖, svd_r[W·F]·F⁻¹ = svd_r[W·P]·P⁻¹ (the same B·A, unique when
// σ_r > σ_{r+1}), and the joint objectives ‖Fᵀ·Δ·F‖ = ‖P·Δ·P‖ with the same optimal A = Uᵀ·F⁻¹. Two routes:
//
//   Cholesky  F = L (dpotrf, d³/3), M·L and M·L⁻¹ by dtrmm / dtrsm, no [d, d] product to form P: 16-26×
//             faster than the spectral whitening at d = 1024..4096 (bench/results/whitening.md), ~8× with
//             the products W·F and V_rᵀ·F⁻¹. Taken whenever it gives what the spectral route would:
//             λ > floor_rel · tr(C + λI), so every eigenvalue of C + λI (≥ λ for a PSD C) lies above the
//             pseudo-inverse floor (the largest is ≤ the trace) and the spectral route would drop nothing,
//             and dpotrf succeeds. The default damping (1e-4) always passes.
//   Spectral  F = P from one eigendecomposition of C + λI (when λ = 0, or C + λI is not numerically
//             positive definite). Eigenvalues at or below floor_rel × the largest (and negative round-off)
//             are directions the calibration never excited: they are dropped from P and P⁺ alike (Moore–
//             Penrose; a "pinv-drop" note), so no factor acts on them. When no eigenvalue is above the floor
//             (all inputs zero) P = P⁺ = I (a "zero-covariance" note): every factorization then has zero
//             activation loss.
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
// The spectral route, and what asvd-cov (C + λI itself) and asvd-hessian (diag of its inverse) need.
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

enum class WhiteningRoute { Cholesky, Spectral };

// A factor F of C + λI and the products the solvers need of it (see the top of this file).
struct Whitening {
  WhiteningRoute route = WhiteningRoute::Spectral;
  MatrixD f;       // [d, d]  Cholesky: L (lower triangular); Spectral: P (symmetric; I when zero)
  MatrixD f_pinv;  // [d, d]  Spectral: P⁺; empty for Cholesky (L⁻¹ is applied by triangular solves)
  double lambda = 0;  // the absolute damping added
  int dropped = 0;    // directions below the floor (Spectral only)
  bool zero = false;  // C + λI was zero: F = I (Spectral only)

  Eigen::Index dim() const { return f.rows(); }
  MatrixD times(const MatrixD& m) const;         // M·F    m: [k, d] -> [k, d]
  MatrixD times_pinv(const MatrixD& m) const;    // M·F⁺   (L⁻¹ or P⁺)
  MatrixD times_pinv_t(const MatrixD& m) const;  // M·F⁺ᵀ  (L⁻ᵀ or P⁺)
  MatrixD pinv_matrix() const;                   // F⁺     [d, d]
};

// The whitening of c + λI by the route above, recording the spectral route's notes. c: [d, d] symmetric
// (the Cholesky route reads its lower triangle, the spectral one too).
Whitening whiten(const MatrixD& c, double lambda_rel, std::string_view context, double floor_rel = kPinvFloorRel);

// While one is alive on this thread, whiten() takes the spectral route: the tests and the benchmark
// compare the routes on the same inputs. Not for production code (both give the same B·A).
class SpectralWhiteningScope {
 public:
  SpectralWhiteningScope();
  ~SpectralWhiteningScope();
  SpectralWhiteningScope(const SpectralWhiteningScope&) = delete;
  SpectralWhiteningScope& operator=(const SpectralWhiteningScope&) = delete;
};

// The root covariance P itself (always the spectral route) and its pseudo-inverse.
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
