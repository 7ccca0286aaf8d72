// Reduced-rank regression, the fit behind joint up-down (the paper's Ŵ_u, Ŵ_d updates and our
// output-aware down refit): argmin over rank-r W (and a free bias b when fit_bias) of
// Σ_t ‖t_t − W·s_t − b‖², from sufficient statistics of the sources s [in] and targets t [out]:
// W = svd_r[T̃S̃ᵀ·F⁻ᵀ]·F⁻¹ for any F·Fᵀ = S̃S̃ᵀ + λI (whitening.hpp: the Cholesky factor, or the root
// covariance (S̃S̃ᵀ+λI)^{1/2} with its pseudo-inverse), with S̃, T̃ centered when fit_bias. The rank-r
// truncation comes from linalg::svd_leading (the Gram of the shorter side).
#pragma once

#include <string_view>

#include "compress/math/low_rank.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

struct RegressionStats {
  MatrixD cross;  // [out, in]  Σ t sᵀ
  MatrixD cov;    // [in, in]   Σ s sᵀ
  VectorD sum_s;  // [in]
  VectorD sum_t;  // [out]
  double n = 0;
};
RegressionStats regression_stats(const MatrixD& s, const MatrixD& t);  // s: [in, n], t: [out, n]
// prior: [out, in] or null. The damping λ (lambda_rel · mean diag of the (centered) S̃S̃ᵀ) pulls W toward
// it instead of toward 0: the objective gains λ·‖W − prior‖², i.e. T̃S̃ᵀ becomes T̃S̃ᵀ + λ·prior
// (the error-compensating fit, compensate.hpp: with the dense weight as prior, the fit of identical
// sources and targets X̂ = X is the damped local ASVD exactly).
LowRank reduced_rank_regression(const RegressionStats& st, int r, bool fit_bias, double lambda_rel,
                                std::string_view context, const MatrixD* prior = nullptr);

}  // namespace latentllm::compress
