#include "core/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/parallel.hpp"
#include "latentllm/error.hpp"

namespace latentllm::core {

void sgemm_rm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
              const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 1 && !trans_a) {
    // One row (decoding): sgemv streams b once; sgemm would first copy (pack) all of it.
    // c[1, n] = a[1, k]·op(b): b·a as an [n, k] matrix (trans_b) or bᵀ·a with b: [k, n].
    cblas_sgemv(CblasRowMajor, trans_b ? CblasNoTrans : CblasTrans, trans_b ? n : k, trans_b ? k : n, alpha, b, ldb,
                a, 1, beta, c, 1);
    return;
  }
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

void syrk_upper_add_columns(const double* x, int n, int d, int j0, int j1, MatrixD& c) {
  if (c.rows() != d || c.cols() != d || j0 < 0 || j1 > d || j0 > j1) {
    throw Error(fmt::format("syrk_upper_add_columns: accumulator [{}, {}], columns [{}, {}) (expected [{}, {}] and "
                            "0 <= j0 <= j1 <= {})", c.rows(), c.cols(), j0, j1, d, d, d));
  }
  if (n == 0 || j0 == j1) return;
  // x row-major [n, d] is the column-major [d, n] matrix X, and C += X·Xᵀ.
  double* cj = c.data() + static_cast<std::int64_t>(j0) * d;  // column j0 of C
  if (j0 > 0) cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, j0, j1 - j0, n, 1.0, x, d, x + j0, d, 1.0, cj, d);
  cblas_dsyrk(CblasColMajor, CblasUpper, CblasNoTrans, j1 - j0, n, 1.0, x + j0, d, 1.0, cj + j0, d);
}

void ssyrk_upper_add_columns(const float* x, int n, int d, int j0, int j1, float* c) {
  if (n == 0 || j0 == j1) return;
  float* cj = c + static_cast<std::int64_t>(j0) * d;  // column j0 of C
  if (j0 > 0) cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, j0, j1 - j0, n, 1.0f, x, d, x + j0, d, 1.0f, cj, d);
  cblas_ssyrk(CblasColMajor, CblasUpper, CblasNoTrans, j1 - j0, n, 1.0f, x + j0, d, 1.0f, cj + j0, d);
}

void ssyrk_upper_panel(const float* x, int n, int d, int j0, int j1, float* p) {
  if (j0 == j1) return;
  if (n == 0) {
    for (int j = 0; j < j1 - j0; ++j) std::fill_n(p + static_cast<std::int64_t>(j) * j1, j0 + j + 1, 0.0f);
    return;
  }
  if (j0 > 0) cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, j0, j1 - j0, n, 1.0f, x, d, x + j0, d, 0.0f, p, j1);
  cblas_ssyrk(CblasColMajor, CblasUpper, CblasNoTrans, j1 - j0, n, 1.0f, x + j0, d, 0.0f, p + j0, j1);
}

void mirror_upper(MatrixD& c) {
  // In 64 × 64 tiles on the pool's threads: a plain transpose-copy strides through memory a whole column
  // apart per entry (0.30 s at d = 8192, a quarter of a 2048-token float covariance add; tiled: 0.06 s).
  constexpr Eigen::Index kTile = 64;
  const Eigen::Index d = c.rows(), tiles = (d + kTile - 1) / kTile;
  std::vector<std::pair<Eigen::Index, Eigen::Index>> blocks;  // (tile row, tile column), row ≥ column
  for (Eigen::Index tj = 0; tj < tiles; ++tj)
    for (Eigen::Index ti = tj; ti < tiles; ++ti) blocks.emplace_back(ti, tj);
  parallel_for(static_cast<std::int64_t>(blocks.size()), 8, [&](std::int64_t b0, std::int64_t b1) {
    for (auto b = b0; b < b1; ++b) {
      const auto [ti, tj] = blocks[static_cast<std::size_t>(b)];
      const Eigen::Index i0 = ti * kTile, j0 = tj * kTile, i1 = std::min(d, i0 + kTile), j1 = std::min(d, j0 + kTile);
      for (Eigen::Index j = j0; j < j1; ++j)
        for (Eigen::Index i = std::max(i0, j + 1); i < i1; ++i) c(i, j) = c(j, i);
    }
  });
}

void set_blas_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

namespace {

// OpenBLAS runs single-threaded from the start (parallel.cpp, make_blas_single_threaded: its own threads
// change results), not only once the pool exists: a product computed before any parallel loop, on
// OpenBLAS's default threads, gave other bits than the same product after it (with some kernels, e.g.
// OPENBLAS_CORETYPE=Haswell), so two forwards of one model could differ.
const bool g_blas_single_threaded = [] {
  openblas_set_num_threads(1);
  return true;
}();

}  // namespace

}  // namespace latentllm::core
