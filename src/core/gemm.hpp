// Thin wrappers over OpenBLAS sgemm/dgemm for the products the forward pass and the covariance
// accumulators need. Row-major float matrices as in latentllm/tensor.hpp.
#pragma once

#include "latentllm/tensor.hpp"

namespace latentllm::core {

// y = x · Wᵀ (+ y if accumulate).  x: [n, in], w: [out, in], y: [n, out] (resized unless accumulate).
void matmul_xwt(const MatrixF& x, const MatrixF& w, MatrixF& y, bool accumulate = false);
// Same on raw row-major blocks with leading dimensions (for per-head slices). One row of a (m = 1,
// not transposed) goes to sgemv, which reads b once instead of packing it first.
void sgemm_rm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
              const float* b, int ldb, float beta, float* c, int ldc);
// Columns [j0, j1) of the upper triangle of C += xᵀ·x, x: [n, d] row-major double, C: [d, d]
// (column-major): C[0:j1, j0:j1] (its upper part) += x[:, 0:j1]ᵀ·x[:, j0:j1], one dgemm above the
// diagonal block and one dsyrk on it. Disjoint column ranges can run on different threads (each
// with single-threaded BLAS). The strict lower triangle is not touched: mirror_upper copies the
// upper one there.
void syrk_upper_add_columns(const double* x, int n, int d, int j0, int j1, MatrixD& c);
void mirror_upper(MatrixD& c);
// The same in float for x: [n, d] row-major float and a float accumulator c: [d, d] column-major
// (c += over columns [j0, j1) of its upper triangle).
void ssyrk_upper_add_columns(const float* x, int n, int d, int j0, int j1, float* c);
// Columns [j0, j1) of the upper triangle of xᵀ·x (x: [n, d] row-major float) into their own panel p:
// [j1, j1 − j0] column-major, p = x[:, 0:j1]ᵀ·x[:, j0:j1] above and on the diagonal (what was in p is
// overwritten; the entries below the diagonal block's diagonal are left as they were).
void ssyrk_upper_panel(const float* x, int n, int d, int j0, int j1, float* p);

// Sets the number of BLAS threads (0 = all cores).
void set_blas_threads(int n);

}  // namespace latentllm::core
