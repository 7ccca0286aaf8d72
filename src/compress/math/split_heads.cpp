#include "compress/math/split_heads.hpp"

#include <algorithm>
#include <cmath>

#include "compress/math/asvd.hpp"
#include "compress/math/bias.hpp"
#include "compress/math/preconditioner.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {

LowRank split_heads_asvd(const MatrixD& w, const VectorD& bias, const calib::SiteStats& stats, int heads, int rank,
                         LocalOptions opt, std::string_view context) {
  if (heads < 1 || w.rows() % heads != 0 || rank % heads != 0) {
    throw ConfigError(fmt::format("{}: split heads (expected {} rows and rank {} divisible by the {} heads)", context,
                                  w.rows(), rank, heads));
  }
  const Eigen::Index dh = w.rows() / heads, rh = rank / heads;
  check_rank(static_cast<int>(rh), dh, w.cols(), context);
  if (stats.xtx.rows() != w.cols()) {
    throw ConfigError(fmt::format("{}: input covariance does not match the weight (expected [{}, {}], got [{}, {}])",
                                  context, w.cols(), w.cols(), stats.xtx.rows(), stats.xtx.cols()));
  }
  const bool centered = bias.size() != 0 && opt.update_bias;
  const MatrixD c = centered ? stats.centered() : stats.xtx;  // [d, d]
  const VectorD abs_mean = stats.abs_sum.size() > 0 ? stats.abs_mean() : VectorD();
  const PreconditionerMatrix p = make_preconditioner(opt.preconditioner, c, abs_mean, opt, context);
  LowRank f;
  f.B = MatrixD::Zero(w.rows(), rank);  // [d', r]  diag(B_1 … B_h)
  f.A.resize(rank, w.cols());           // [r, d]   [A_1; …; A_h]
  for (Eigen::Index i = 0; i < heads; ++i) {
    const LowRank h = asvd_with(w.middleRows(i * dh, dh), p, static_cast<int>(rh), Junction::Identity, context);
    f.B.block(i * dh, i * rh, dh, rh) = h.B;  // [d_h, r_h]
    f.A.middleRows(i * rh, rh) = h.A;         // [r_h, d]
  }
  f.bias = centered ? updated_bias(w, f.dense(), bias, stats.mean()) : bias;
  linalg::check_finite(f.B, context, "decompression factor");
  return f;
}

std::int64_t split_heads_params(std::int64_t out, std::int64_t in, std::int64_t heads, std::int64_t rank) {
  return rank * (out / heads + in);
}

std::int64_t split_heads_rank(std::int64_t out, std::int64_t in, std::int64_t heads, double budget) {
  const std::int64_t rh_max = std::min(out / heads, in);
  const double limit = budget + 1e-12 * std::abs(budget);
  std::int64_t rh = 0;
  while (rh < rh_max && static_cast<double>(split_heads_params(out, in, heads, (rh + 1) * heads)) <= limit) ++rh;
  return rh * heads;
}

}  // namespace latentllm::compress
