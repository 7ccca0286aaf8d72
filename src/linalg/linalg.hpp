// Thin, checked wrappers over LAPACK (through LAPACKE) for the decompositions the compressors need.
// All in double, column-major (Eigen's MatrixXd). Every call checks LAPACK's `info` and throws
// NumericError with the caller's context on failure or on non-finite input.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "latentllm/tensor.hpp"

namespace latentllm::linalg {

// Symmetric eigendecomposition S = V·diag(w)·Vᵀ (dsyevd). Reads the LOWER triangle of S only.
// Eigenvalues are returned in DESCENDING order (the reverse of LAPACK's), eigenvectors as the
// matching columns of V. Cost O(d³).
struct SymEig {
  VectorD values;   // [d], descending
  MatrixD vectors;  // [d, d], column i pairs with values(i)
};
SymEig sym_eig(const MatrixD& s, std::string_view context);
// The eigenvalues of S alone, DESCENDING (dsyevd without vectors: the tridiagonal reduction, about
// 4/3·d³, instead of about 9·d³ with the vectors). Reads the LOWER triangle.
VectorD sym_eigvals(const MatrixD& s, std::string_view context);

// Thin SVD M = U·diag(s)·Vᵀ (dgesdd). Singular values DESCENDING; U: [m, k], V: [n, k], k = min(m, n).
// Cost O(m·n·k).
struct Svd {
  MatrixD u;   // [m, k]
  VectorD s;   // [k]
  MatrixD v;   // [n, k]  (V, not Vᵀ)
};
Svd svd(const MatrixD& m, std::string_view context);

// The leading r singular triplets of M (r ≤ min(m, n)) from the eigendecomposition of the Gram of
// its shorter side: M·Mᵀ = U·S²·Uᵀ when m ≤ n, then V_r = Mᵀ·U_r·S_r⁻¹ (symmetrically when m > n).
// dsyrk + dsyevd on the k × k Gram (k = min(m, n)) instead of dgesdd: 4.1× faster at [2048, 8192] and
// 2.8× at [8192, 2048] (r = 1310, same process), the rank-r products equal to 1.4e-14 relative. The Gram squares the spectrum, so singular values below ~1e-8·s_1 lose their relative
// accuracy; the rank-r product U_r·S_r·V_rᵀ = U_r·U_rᵀ·M stays exact to rounding whatever s_r is
// (which is all reduced-rank regression uses). A column pairs with s_i = 0 is zero. U: [m, r], V: [n, r].
Svd svd_leading(const MatrixD& m, int r, std::string_view context);

// Cholesky factor S = L·Lᵀ (dpotrf, lower). Reads the LOWER triangle of S; L comes back with its strict
// upper triangle zeroed. Returns nullopt when S is not numerically positive definite (dpotrf info > 0:
// the leading minor of that order is not positive), so the caller can take another route; throws
// NumericError on non-finite input or an illegal argument (info < 0). Cost d³/3 multiply-adds.
std::optional<MatrixD> cholesky(const MatrixD& s, std::string_view context);

// The upper Cholesky factor of the inverse, S⁻¹ = Uᵀ·U (U upper triangular, strict lower triangle zeroed):
// dpotrf of S (upper), dpotri (S⁻¹ from that factor, upper triangle), dpotrf of S⁻¹ (upper). Reads the
// UPPER triangle of S. GPTQ's sweep reads its rows (Frantar et al. 2022, Sec. 4 "Cholesky reformulation").
// Returns nullopt when S is not numerically positive definite (the first dpotrf's info > 0); throws
// NumericError on non-finite input, an illegal argument (info < 0) or a singular factor in dpotri or
// the second dpotrf (info > 0 there: S⁻¹ lost definiteness to rounding). Cost d³ multiply-adds. S is
// taken by value and factored in place: a caller that moves it in holds one [d, d] matrix, not two.
std::optional<MatrixD> inverse_cholesky_upper(MatrixD s, std::string_view context);

// With L: [d, d] lower triangular (only its lower triangle is read) and M: [k, d], each d²·k/2
// multiply-adds (dtrmm / dtrsm; half a general product, and no inverse is formed):
MatrixD times_lower(const MatrixD& m, const MatrixD& l);                         // M·L    [k, d]
MatrixD solve_lower_right(const MatrixD& m, const MatrixD& l, bool transposed);  // M·L⁻¹, or M·L⁻ᵀ  [k, d]

// Symmetric matrix function f(S) = V·diag(f(w))·Vᵀ for PSD S, with eigenvalues clamped at 0 first.
// Used for (XXᵀ+λI)^{1/2} and its inverse. `power` is applied to each clamped eigenvalue; for negative
// powers eigenvalues below `floor_rel`·max(w) are treated as that floor (pseudo-inverse root).
MatrixD sym_power(const MatrixD& s, double power, std::string_view context, double floor_rel = 1e-12);

// Column-pivoted QR M·Π = Q·R (dgeqp3, greedy: at step j the remaining column of largest norm after
// removing the span of the first j). perm[j] is the ORIGINAL index of the column placed at position j
// (0-based), so M.col(perm[0..k)) are the k "most independent" columns. R: [min(m, n), n], upper
// trapezoidal, in the permuted column order; |R(0,0)| ≥ |R(1,1)| ≥ … . Q is not formed. Cost O(m·n·k).
struct PivotedQr {
  MatrixD r;              // [min(m, n), n]
  std::vector<int> perm;  // [n]
};
PivotedQr pivoted_qr(const MatrixD& m, std::string_view context);

// Throws NumericError "<context>: <what> contains a non-finite value" if m has NaN/Inf.
// x·xᵀ ([m, m] from x: [m, n]) as a symmetric rank-k update (dsyrk: half the multiply-adds of a
// general product), both triangles filled.
MatrixD gram_rows(const MatrixD& x);

void check_finite(const MatrixD& m, std::string_view context, std::string_view what);

}  // namespace latentllm::linalg
