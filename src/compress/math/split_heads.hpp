// Split-head compression (paper appendix "Split-Head Compression"): a projection whose output rows are h
// heads, W = [W_1; …; W_h] (W_i [d'/h, d]), factored head by head,
//     min Σ_i ‖W_i·X − B_i·A_i·X‖²,   solved by the separate SVDs of W_i·C^{1/2},
// so B = diag(B_1 … B_h) [d', r] is block diagonal and A = [A_1; …; A_h] [r, d], r = h·r_h. Parameters
// r·(d'/h + d) (B's h blocks and A) instead of r·(d' + d): a sparse B buys more rank per budget, but each
// head gets only its own r_h directions of x.
#pragma once

#include <cstdint>
#include <string_view>

#include "compress/math/low_rank.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// w [d', d] with d' = heads·d_h; bias [d'] or empty; rank a multiple of heads, rank/heads ≤ min(d_h, d).
// B is returned expanded [d', rank] with exact zeros outside the blocks (J = I per head: a junction of the
// whole A would fill them); the bias is updated as asvd.hpp does with opt.update_bias. opt's
// pre-conditioner is built once from the statistics and used for every head; its junction is ignored.
LowRank split_heads_asvd(const MatrixD& w, const VectorD& bias, const calib::SiteStats& stats, int heads, int rank,
                         LocalOptions opt, std::string_view context);

// Parameters of a split-head factorization as its h blocks count them: rank·(d'/heads + d).
std::int64_t split_heads_params(std::int64_t out, std::int64_t in, std::int64_t heads, std::int64_t rank);

// The largest multiple r of heads with r/heads ≤ min(d'/heads, d) and split_heads_params ≤ budget; 0 if none.
std::int64_t split_heads_rank(std::int64_t out, std::int64_t in, std::int64_t heads, double budget);

}  // namespace latentllm::compress
