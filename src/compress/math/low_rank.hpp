// The factored form of one linear module, the one factors type of every compressor (local ASVD and
// the joint solvers) and of the checkpoint: y ≈ B·(A·x) + bias, W ≈ B·A (paper: "latent" form).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "latentllm/tensor.hpp"

namespace latentllm::compress {

struct LowRank {
  MatrixD B;              // [d', r]  decompression
  MatrixD A;              // [r, d]   compression, or [r, d − r] in block-identity form: the columns perm[r..d)
  std::vector<int> perm;  // [d] block-identity form only: the dense A has column perm[j] = e_j for j < r
  VectorD bias;           // [d'], or empty when the module has none

  int rank() const { return static_cast<int>(B.cols()); }
  bool block_identity() const { return !perm.empty(); }
  int in_features() const { return block_identity() ? static_cast<int>(perm.size()) : static_cast<int>(A.cols()); }
  // The dense compression [r, d]; in block-identity form the identity block is exactly 1.0 / 0.0.
  MatrixD dense_a() const {
    if (!block_identity()) return A;
    const int r = rank();
    MatrixD a = MatrixD::Zero(r, in_features());
    for (int j = 0; j < r; ++j) a(j, perm[static_cast<std::size_t>(j)]) = 1.0;
    for (Eigen::Index k = 0; k < A.cols(); ++k) a.col(perm[static_cast<std::size_t>(r + k)]) = A.col(k);
    return a;
  }
  MatrixD dense() const { return B * dense_a(); }  // [d', d]  B·A
  std::int64_t weight_params() const { return B.size() + A.size(); }
};

// Throws ConfigError "<context>: rank out of range (expected 1..k for a [d', d] module, got r)" unless
// 1 ≤ rank ≤ k = min(d, d').
void check_rank(int rank, Eigen::Index out, Eigen::Index in, std::string_view context);

}  // namespace latentllm::compress
