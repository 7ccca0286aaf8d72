// Biases under compression (paper appendix "Bias Update"), in its two forms.
//
// 1. A module y = W·x + b factored as W ≈ B·A keeps the mean output over the calibration set with
//    b̂ = b + (W − B·A)·μ, the optimal free bias; the factorization itself then only sees the centered
//    inputs (SiteStats::centered). Used by local ASVD and by the joint solvers' module-wise refits.
// 2. Bias-aware joint solutions (Q-K, V-O): the input is augmented by a constant, x' = [x; 1] with the
//    statistics SiteStats::augmented, and the weight by its bias, W' = [W | b]. A shared compression
//    A' = [A | a] of x' then carries a latent bias: the factored module is B·A with bias b̂ = B·a.
#pragma once

#include "compress/math/low_rank.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// b + (W − B·A)·μ.  w, product = B·A: [d', d]; bias: [d']; mean: [d].
VectorD updated_bias(const MatrixD& w, const MatrixD& product, const VectorD& bias, const VectorD& mean);

// [W | b]: [d', d+1] (b = 0 when empty).
MatrixD with_bias_column(const MatrixD& w, const VectorD& b);
// [B·A | bias] of a factored map: [d', d+1].
MatrixD augmented_dense(const LowRank& f);
// f.A = a_aug[:, :d] and f.bias = f.B·a_aug[:, d] for an augmented compression a_aug: [r, d+1] (f.B set).
void split_latent_bias(LowRank& f, const MatrixD& a_aug);

}  // namespace latentllm::compress
