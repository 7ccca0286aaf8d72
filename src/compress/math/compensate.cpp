#include "compress/math/compensate.hpp"

#include "compress/math/regression.hpp"
#include "compress/math/whitening.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {
namespace {

void check_inputs(const MatrixD& w, const VectorD& bias, const calib::SiteStats& hat, const calib::CrossStats& cross,
                  std::string_view context) {
  const auto d = w.cols();
  if (hat.xtx.rows() != d || cross.xh.rows() != d || cross.xh.cols() != d || cross.sum.size() != d ||
      hat.sum.size() != d) {
    throw ConfigError(fmt::format("{}: error-compensating fit statistics (expected [{}, {}] inputs, got C_hh [{}, {}] "
                                  "and C_xh [{}, {}])", context, d, d, hat.xtx.rows(), hat.xtx.cols(),
                                  cross.xh.rows(), cross.xh.cols()));
  }
  if (hat.n != cross.n || hat.n <= 0) {
    throw ConfigError(fmt::format("{}: error-compensating fit token counts (expected the same n > 0 for x̂ and x, "
                                  "got {} and {})", context, hat.n, cross.n));
  }
  if (bias.size() != 0 && bias.size() != w.rows()) {
    throw ConfigError(fmt::format("{}: bias length (expected {}, got {})", context, w.rows(), bias.size()));
  }
  linalg::check_finite(w, context, "weight");
  linalg::check_finite(cross.xh, context, "dense cross moments");
}

}  // namespace

LowRank compensated_fit(const MatrixD& w, const VectorD& bias, const calib::SiteStats& hat,
                        const calib::CrossStats& cross, int rank, const LocalOptions& opt, std::string_view context) {
  check_inputs(w, bias, hat, cross, context);
  const bool fit_bias = bias.size() != 0 && opt.update_bias;
  // Sources x̂, targets W·x (+ b when the bias is free: a kept bias is on both sides and cancels).
  RegressionStats st;
  st.cov = hat.xtx;           // [d, d]   Σ x̂ x̂ᵀ
  st.cross = w * cross.xh;    // [d', d]  Σ (W·x) x̂ᵀ
  st.sum_s = hat.sum;         // [d]
  st.sum_t = w * cross.sum;   // [d']
  st.n = static_cast<double>(hat.n);
  if (fit_bias) {
    st.cross += bias * hat.sum.transpose();
    st.sum_t += st.n * bias;
  }
  LowRank f = reduced_rank_regression(st, rank, fit_bias, opt.lambda_rel, context, &w);
  if (!fit_bias) f.bias = bias;
  linalg::check_finite(f.B, context, "decompression factor");
  return f;
}

MatrixD compensation_map(const calib::SiteStats& hat, const calib::CrossStats& cross, double lambda_rel,
                         bool augmented, std::string_view context) {
  const auto d = hat.xtx.rows();
  if (cross.xh.rows() != d || cross.n != hat.n) {
    throw ConfigError(fmt::format("{}: error-compensating map statistics (expected [{}, {}] over {} tokens, got [{}, {}] "
                                  "over {})", context, d, d, hat.n, cross.xh.rows(), cross.xh.cols(), cross.n));
  }
  MatrixD cxh = cross.xh;  // [d, d] or [d+1, d+1]
  if (augmented) {
    cxh.conservativeResize(d + 1, d + 1);
    cxh.topRightCorner(d, 1) = cross.sum;
    cxh.bottomLeftCorner(1, d) = hat.sum.transpose();
    cxh(d, d) = static_cast<double>(hat.n);
  }
  // (C_hh + λI)⁻¹ = F⁻ᵀ·F⁻¹ for F·Fᵀ = C_hh + λI, so M = (C_xh + λI)·F⁻ᵀ·F⁻¹.
  const Whitening wh = whiten(augmented ? hat.augmented() : hat.xtx, lambda_rel, context);
  cxh.diagonal().array() += wh.lambda;
  return wh.times_pinv(wh.times_pinv_t(cxh));
}

double compensated_loss_offset(const MatrixD& w, const VectorD& bias, const LowRank& f, const calib::SiteStats& hat,
                               const calib::CrossStats& cross) {
  // Σ‖t − ŷ‖² − Σ‖t‖² = Σ‖ŷ‖² − 2 Σ tᵀŷ with t = W·x + b, ŷ = Â·x̂ + b̂.
  const MatrixD a = f.dense();  // [d', d]
  const auto n = static_cast<double>(hat.n);
  double out = (a * hat.xtx).cwiseProduct(a).sum() - 2.0 * (w * cross.xh).cwiseProduct(a).sum();
  const VectorD bh = f.bias.size() ? f.bias : VectorD::Zero(w.rows());
  const VectorD b = bias.size() ? bias : VectorD::Zero(w.rows());
  out += 2.0 * bh.dot(a * hat.sum) + n * bh.squaredNorm();        // ŷ's bias terms
  out -= 2.0 * (b.dot(a * hat.sum) + bh.dot(w * cross.sum) + n * b.dot(bh));  // cross bias terms
  return out;
}

}  // namespace latentllm::compress
