// Activation-aware joint Q-K-V compression (paper appendix "Activation-Aware Joint QKV Compression"):
// one compression A shared by q_proj, k_proj and v_proj, which read the same input x, so
//     min ‖[W_q; W_k; W_v]·X − [B_q; B_k; B_v]·A·X‖²   is solved by the SVD of [W_q; W_k; W_v]·C^{1/2}
// (the local root-covariance ASVD of the stacked weight, asvd.hpp). Parameters r·(d_q + d_k + d_v + d)
// instead of Σ r_i·(d_i + d): at d_q = d_k = d_v = d the same budget allows 50 % more rank. The stacked
// loss weighs the three outputs alike; the paper notes that their magnitudes are not balanced, which this
// objective does not correct (docs/JOINT.md).
#pragma once

#include <array>
#include <string_view>

#include "compress/math/low_rank.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// The dense q, k, v projections of one layer: w [d_i, d] (GQA: k and v have the KV heads' rows), b [d_i]
// or empty (all three or none).
struct QkvDense {
  std::array<MatrixD, 3> w;
  std::array<VectorD, 3> b;
};

// The three factorizations with one A: f[i].A is the same [r, d] matrix for i = 0, 1, 2 (J = I), f[i].B the
// rows of B = [B_q; B_k; B_v] for module i ([d_i, r]: r may exceed d_i, the rank is the stacked weight's),
// f[i].bias module i's updated bias (bias.hpp, on the centered statistics, when opt.update_bias and the
// modules have biases). opt's pre-conditioner is used (the paper's: the root covariance); its junction is
// ignored. 1 ≤ rank ≤ min(d, d_q + d_k + d_v). ConfigError when only some modules have a bias.
std::array<LowRank, 3> joint_qkv(const QkvDense& dense, const calib::SiteStats& stats, int rank, LocalOptions opt,
                                 std::string_view context);

// The largest r ≤ min(d, Σ d_i) whose joint parameters r·(Σ d_i + d) (− r² with the block identity, applied
// once to the shared A) stay within `budget`; 0 if none.
std::int64_t joint_qkv_rank(std::int64_t in, std::int64_t out_sum, double budget, bool block_identity);

}  // namespace latentllm::compress
