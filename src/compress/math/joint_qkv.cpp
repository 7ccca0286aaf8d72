#include "compress/math/joint_qkv.hpp"

#include <algorithm>
#include <cmath>

#include "compress/math/asvd.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {

std::array<LowRank, 3> joint_qkv(const QkvDense& dense, const calib::SiteStats& stats, int rank, LocalOptions opt,
                                 std::string_view context) {
  const Eigen::Index d = dense.w[0].cols();
  Eigen::Index rows = 0;
  int biased = 0;
  for (int i = 0; i < 3; ++i) {
    if (dense.w[i].cols() != d) {
      throw ConfigError(fmt::format("{}: input width of module {} (expected {}, got {})", context, i, d,
                                    dense.w[i].cols()));
    }
    rows += dense.w[i].rows();
    biased += dense.b[i].size() > 0 ? 1 : 0;
  }
  if (biased != 0 && biased != 3) {
    throw ConfigError(fmt::format("{}: biases (expected on all of q, k, v or on none, got {} of 3)", context, biased));
  }
  MatrixD w(rows, d);  // [d_q + d_k + d_v, d]  [W_q; W_k; W_v]
  VectorD b(biased == 3 ? rows : 0);
  for (Eigen::Index i = 0, at = 0; i < 3; at += dense.w[i].rows(), ++i) {
    w.middleRows(at, dense.w[i].rows()) = dense.w[i];
    if (biased == 3) b.segment(at, dense.w[i].rows()) = dense.b[i];
  }
  opt.junction = Junction::Identity;  // the one A is shared: a junction would be taken once, by the caller
  const LowRank joint = asvd(w, b, stats, rank, opt, context);  // B [Σd_i, r], A [r, d]
  std::array<LowRank, 3> out;
  for (Eigen::Index i = 0, at = 0; i < 3; at += dense.w[i].rows(), ++i) {
    out[i].B = joint.B.middleRows(at, dense.w[i].rows());  // [d_i, r]
    out[i].A = joint.A;                                     // [r, d]
    if (biased == 3) out[i].bias = joint.bias.segment(at, dense.w[i].rows());
  }
  return out;
}

std::int64_t joint_qkv_rank(std::int64_t in, std::int64_t out_sum, double budget, bool block_identity) {
  const std::int64_t r_max = std::min(in, out_sum);
  const double limit = budget + 1e-12 * std::abs(budget);
  const auto params = [&](std::int64_t r) { return r * (out_sum + in) - (block_identity ? r * r : 0); };
  // params is increasing on [0, r_max] (its vertex (Σd_i + d)/2 ≥ r_max): the last r that fits.
  std::int64_t r = 0;
  while (r < r_max && static_cast<double>(params(r + 1)) <= limit) ++r;
  return r;
}

}  // namespace latentllm::compress
