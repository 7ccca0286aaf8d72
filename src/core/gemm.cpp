#include "core/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "latentllm/error.hpp"

namespace latentllm::core {

void sgemm_rm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
              const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m,
              n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void matmul_xwt(const MatrixF& x, const MatrixF& w, MatrixF& y, bool accumulate) {
  if (x.cols() != w.cols()) {
    throw Error(fmt::format("matmul_xwt: inner dimension (expected {}, got {})", w.cols(), x.cols()));
  }
  if (!accumulate) {
    y.resize(x.rows(), w.rows());
  } else if (y.rows() != x.rows() || y.cols() != w.rows()) {
    throw Error(fmt::format("matmul_xwt: accumulator shape (expected [{}, {}], got [{}, {}])", x.rows(),
                            w.rows(), y.rows(), y.cols()));
  }
  if (x.rows() == 0 || w.rows() == 0) return;
  if (x.cols() == 0) {
    if (!accumulate) y.setZero();
    return;
  }
  sgemm_rm(false, true, static_cast<int>(x.rows()), static_cast<int>(w.rows()), static_cast<int>(x.cols()),
           1.0f, x.data(), static_cast<int>(x.cols()), w.data(), static_cast<int>(w.cols()),
           accumulate ? 1.0f : 0.0f, y.data(), static_cast<int>(y.cols()));
}

void accumulate_xtx(const float* x, int n, int d, int ldx, MatrixD& c) {
  if (c.rows() != d || c.cols() != d) {
    throw Error(fmt::format("accumulate_xtx: accumulator shape (expected [{}, {}], got [{}, {}])", d, d,
                            c.rows(), c.cols()));
  }
  constexpr int kChunk = 512;
  std::vector<double> buf(static_cast<std::size_t>(kChunk) * d);
  for (int r0 = 0; r0 < n; r0 += kChunk) {
    const int rows = std::min(kChunk, n - r0);
    for (int i = 0; i < rows; ++i) {
      const float* src = x + static_cast<std::size_t>(r0 + i) * ldx;
      double* dst = buf.data() + static_cast<std::size_t>(i) * d;
      for (int j = 0; j < d; ++j) dst[j] = src[j];
    }
    // C (column-major, symmetric) += bufᵀ·buf; buf is row-major [rows, d] = column-major [d, rows].
    cblas_dsyrk(CblasColMajor, CblasUpper, CblasNoTrans, d, rows, 1.0, buf.data(), d, 1.0, c.data(), d);
  }
  // dsyrk updated the upper triangle only; mirror it.
  for (int j = 0; j < d; ++j)
    for (int i = j + 1; i < d; ++i) c(i, j) = c(j, i);
}

void set_blas_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

}  // namespace latentllm::core
