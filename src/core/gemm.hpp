// Thin wrappers over OpenBLAS sgemm/dgemm for the products the forward pass and the covariance
// accumulators need. Row-major float matrices as in latentllm/tensor.hpp.
#pragma once

#include "latentllm/tensor.hpp"

namespace latentllm::core {

// y = x · Wᵀ (+ y if accumulate).  x: [n, in], w: [out, in], y: [n, out] (resized unless accumulate).
void matmul_xwt(const MatrixF& x, const MatrixF& w, MatrixF& y, bool accumulate = false);
// Same on raw row-major blocks with leading dimensions (for per-head slices).
void sgemm_rm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
              const float* b, int ldb, float beta, float* c, int ldc);
// Upper triangle of C += xᵀ·x (dsyrk), x: [n, d] row-major double, C: [d, d] (column-major). The
// strict lower triangle is not touched: mirror_upper copies the upper one there.
void syrk_upper_add(const double* x, int n, int d, MatrixD& c);
void mirror_upper(MatrixD& c);

// Sets the number of BLAS threads (0 = all cores).
void set_blas_threads(int n);

}  // namespace latentllm::core
