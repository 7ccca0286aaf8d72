#include "compress/math/regression.hpp"

#include <algorithm>

#include "compress/math/whitening.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {

RegressionStats regression_stats(const MatrixD& s, const MatrixD& t) {
  RegressionStats st;
  st.cross = t * s.transpose();  // [out, in]
  st.cov = linalg::gram_rows(s);  // [in, in]
  st.sum_s = s.rowwise().sum();
  st.sum_t = t.rowwise().sum();
  st.n = static_cast<double>(s.cols());
  return st;
}

LowRank reduced_rank_regression(const RegressionStats& st, int r, bool fit_bias, double lambda_rel,
                                std::string_view context, const MatrixD* prior) {
  check_rank(r, st.cross.rows(), st.cross.cols(), context);
  MatrixD cov = st.cov, cross = st.cross;
  VectorD mu_s, mu_t;
  if (fit_bias) {
    mu_s = st.sum_s / st.n;
    mu_t = st.sum_t / st.n;
    cov -= st.n * mu_s * mu_s.transpose();
    cross -= st.n * mu_t * mu_s.transpose();
  }
  // With cov + λI = F·Fᵀ: Σ‖t − W·s‖² = ‖W·F − cross·F⁻ᵀ‖² + const, so W·F = svd_r[cross·F⁻ᵀ].
  const Whitening wh = whiten(cov, lambda_rel, context);
  if (prior) {
    if (prior->rows() != cross.rows() || prior->cols() != cross.cols()) {
      throw ConfigError(fmt::format("{}: regression prior (expected [{}, {}], got [{}, {}])", context, cross.rows(),
                                    cross.cols(), prior->rows(), prior->cols()));
    }
    cross += wh.lambda * *prior;  // Σ‖t − W·s‖² + λ‖W − prior‖² = ‖W·F − (cross + λ·prior)·F⁻ᵀ‖² + const
  }
  const linalg::Svd s = linalg::svd_leading(wh.times_pinv_t(cross), r, context);  // only U_r·U_rᵀ·M is used
  LowRank out;
  out.B = s.u.leftCols(r) * s.s.head(r).asDiagonal();  // [out, r]
  out.A = wh.times_pinv(s.v.leftCols(r).transpose());  // [r, in]
  if (fit_bias) out.bias = mu_t - out.B * (out.A * mu_s);
  return out;
}

}  // namespace latentllm::compress
