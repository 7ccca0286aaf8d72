// Pre-conditioners of the activation-aware SVD (paper Table 1). The root covariance is whitening.hpp's
// (a Cholesky factor or the symmetric root), asvd-cov and the diagonal Hessian come from its damped
// spectrum.
//
// Every function here is invariant to scaling C (and μ-related terms) by a constant: λ and the
// pseudo-inverse floor are relative, so C may be a sum over tokens (what the calibration pipeline
// accumulates) or a per-token mean, as long as C, μ and n agree (C = Σ x xᵀ pairs with n, C/n with 1).
#pragma once

#include <string_view>

#include "compress/math/whitening.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// A built pre-conditioner P and its pseudo-inverse P⁺. Diagonal kinds (Identity, DiagHessian, DiagL1,
// DiagL2) are held as vectors, Covariance as a dense symmetric matrix, RootCovariance as a whitening
// (whitening.hpp): P is then any factor with P·Pᵀ = C + λI — the Cholesky factor L when λ > 0, the
// symmetric root otherwise — which gives the same B·A = svd_r[W·P]·P⁺.
struct PreconditionerMatrix {
  Preconditioner kind = Preconditioner::Identity;
  int dim = 0;          // d
  VectorD diag;         // [d]    diagonal kinds: P = diag(diag)
  VectorD diag_pinv;    // [d]    diagonal kinds: P⁺
  MatrixD dense;        // [d, d] Covariance: P (symmetric)
  MatrixD dense_pinv;   // [d, d] Covariance: P⁺
  Whitening root;       // RootCovariance (unless zero_fallback): P = root.f
  double lambda = 0;    // the absolute damping added to C (0 for kinds without damping)
  int dropped = 0;      // directions below the pseudo-inverse floor (dropped from P and P⁺)
  bool zero_fallback = false;  // C (+ λI) was zero: P = I instead (a "zero-covariance" note)

  bool diagonal() const { return dense.size() == 0 && root.f.size() == 0; }
  MatrixD right_multiply(const MatrixD& w) const;       // W·P:  w [m, d] -> [m, d]
  MatrixD right_multiply_pinv(const MatrixD& m) const;  // M·P⁺: m [k, d] -> [k, d]
  MatrixD matrix() const;                               // P   [d, d]
  MatrixD pinv_matrix() const;                          // P⁺  [d, d]
};

// Builds P from the covariance `c` ([d, d]; the caller passes the centered one for bias modules) and,
// for DiagL1, the per-feature mean absolute activation `abs_mean` ([d]; empty otherwise; uncentered
// even for bias modules, as the calibration accumulates it). The pseudo-inverse floor is applied in
// units of C: to the eigenvalues of C + λI, to diag C (DiagL2) and to abs_mean² (DiagL1); dropped
// directions are recorded as a "pinv-drop" note, and an all-zero input gives P = I with a
// "zero-covariance" note (compress/stages/notes.hpp). Throws ConfigError for a missing/mis-shaped input and
// NumericError for a non-finite covariance.
PreconditionerMatrix make_preconditioner(Preconditioner kind, const MatrixD& c, const VectorD& abs_mean,
                                         const LocalOptions& opt, std::string_view context);

}  // namespace latentllm::compress
