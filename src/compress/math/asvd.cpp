#include "compress/math/asvd.hpp"

#include <algorithm>

#include "compress/math/bias.hpp"
#include "compress/math/junction.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {

namespace {

void check_inputs(const MatrixD& w, const VectorD& bias, const calib::SiteStats& st, const LocalOptions& opt,
                  std::string_view context) {
  const MatrixD& c = st.xtx;
  if (c.rows() != w.cols() || c.cols() != w.cols()) {
    throw ConfigError(fmt::format("{}: input covariance does not match the weight (expected [{}, {}], got [{}, {}])",
                                  context, w.cols(), w.cols(), c.rows(), c.cols()));
  }
  if (bias.size() != 0 && bias.size() != w.rows()) {
    throw ConfigError(fmt::format("{}: bias length (expected {}, got {})", context, w.rows(), bias.size()));
  }
  if (bias.size() != 0 && opt.update_bias && (st.sum.size() != w.cols() || st.n <= 0)) {
    throw ConfigError(fmt::format("{}: the bias update needs the input mean and token count (expected Σx [{}] and "
                                  "n > 0, got [{}] and {})", context, w.cols(), st.sum.size(), st.n));
  }
  linalg::check_finite(w, context, "weight");
  if (bias.size() != 0) linalg::check_finite(bias, context, "bias");
  if (st.sum.size() != 0) linalg::check_finite(st.sum, context, "input sum");
}

}  // namespace

void check_rank(int rank, Eigen::Index out, Eigen::Index in, std::string_view context) {
  const auto k = std::min(out, in);
  if (rank < 1 || rank > k) {
    throw ConfigError(fmt::format("{}: rank out of range (expected 1..{} for a [{}, {}] module, got {})", context, k,
                                  out, in, rank));
  }
}

LowRank asvd_with(const MatrixD& w, const PreconditionerMatrix& p, int rank, Junction j, std::string_view context) {
  check_rank(rank, w.rows(), w.cols(), context);
  if (p.dim != w.cols()) {
    throw ConfigError(fmt::format("{}: pre-conditioner size (expected {}, got {})", context, w.cols(), p.dim));
  }
  // W·P = U·S·Vᵀ, its leading r triplets by the Gram of the shorter side (only U_r·S_r·V_rᵀ is used)
  const linalg::Svd svd = linalg::svd_leading(p.right_multiply(w), rank, context);
  const MatrixD m = p.right_multiply_pinv(svd.v.transpose());  // [r, d]  V_rᵀ·P⁺
  return apply_junction(svd.u, svd.s, m, j, context);
}

LowRank asvd(const MatrixD& w, const VectorD& bias, const calib::SiteStats& stats, int rank, const LocalOptions& opt,
             std::string_view context) {
  check_inputs(w, bias, stats, opt, context);
  check_rank(rank, w.rows(), w.cols(), context);
  const bool centered = bias.size() != 0 && opt.update_bias;
  MatrixD c_centered;  // [d, d] only for bias modules
  if (centered) c_centered = stats.centered();
  const MatrixD& c = centered ? c_centered : stats.xtx;
  const VectorD abs_mean = stats.abs_sum.size() > 0 ? stats.abs_mean() : VectorD();
  const PreconditionerMatrix p = make_preconditioner(opt.preconditioner, c, abs_mean, opt, context);
  LowRank f = asvd_with(w, p, rank, opt.junction, context);
  f.bias = centered ? updated_bias(w, f.dense(), bias, stats.mean()) : bias;
  linalg::check_finite(f.B, context, "decompression factor");
  return f;
}

LowRank local_rootcov(const MatrixD& w, const VectorD& bias, const calib::SiteStats& stats, int rank, double lambda_rel,
                      std::string_view context) {
  LocalOptions o;
  o.preconditioner = Preconditioner::RootCovariance;
  o.junction = Junction::Identity;
  o.lambda_rel = lambda_rel;
  return asvd(w, bias, stats, rank, o, context);
}

double activation_loss(const MatrixD& e, const MatrixD& c) { return (e * c).cwiseProduct(e).sum(); }

namespace {

double with_bias_terms(double quadratic, const MatrixD& e, const VectorD& delta, const VectorD& mean, double n) {
  if (delta.size() != 0) quadratic += 2.0 * n * delta.dot(e * mean) + n * delta.squaredNorm();
  return quadratic;
}

}  // namespace

double output_error(const MatrixD& e, const VectorD& delta, const MatrixD& c, const VectorD& mean, double n) {
  return with_bias_terms(activation_loss(e, c), e, delta, mean, n);
}

double output_error_f32(const MatrixD& e, const VectorD& delta, const MatrixD& c, const VectorD& mean, double n) {
  const Eigen::MatrixXf ef = e.cast<float>();      // [d', d]
  const Eigen::MatrixXf p = ef * c.cast<float>();  // [d', d]  E·C
  double quadratic = 0;
  for (Eigen::Index j = 0; j < p.cols(); ++j) quadratic += p.col(j).cast<double>().dot(ef.col(j).cast<double>());
  return with_bias_terms(quadratic, e, delta, mean, n);
}

}  // namespace latentllm::compress
