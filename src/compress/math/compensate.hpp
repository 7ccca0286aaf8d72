// Error-compensating fits (CompressOptions::error_compensation): a module's factors fitted to the
// DENSE model's output at that module, W·x_t + b (x_t its input in the dense model), from the input x̂_t
// the compressed pipeline gives it (the outputs of the compressed layers and modules before it), so
// that each module also undoes part of the error accumulated upstream. The local fit instead matches
// W·x̂_t, and so passes that error on.
//
// Objective (damped as the local ASVD, λ = lambda_rel · mean diag of C_hh, centered with a bias):
//     Σ_t ‖W·x_t + b − (B·A·x̂_t + b̂)‖² + λ·‖W − B·A‖²
// with C_hh = Σ x̂ x̂ᵀ (calib::SiteStats of x̂) and C_xh = Σ x x̂ᵀ (calib::CrossStats): the reduced-rank
// regression (regression.hpp) whose full-rank solution is W̃ = W·(C_xh + λI)·(C_hh + λI)⁻¹ and whose
// rank-r solution is B·A·F = svd_r[W̃·F] for F·Fᵀ = C_hh + λI: the root-covariance ASVD of W̃ (F = the
// Cholesky factor or (C_hh + λI)^½, whitening.hpp). The damping pulls B·A toward W rather than toward 0
// (the λ·W in the cross term), so with x = x̂ (nothing compressed upstream) this is the local
// root-covariance ASVD exactly; λ·‖W − B·A‖² is also what the local fit's damping adds to its loss.
// With a free bias (bias update on) the statistics are centered and b̂ = b + W·μ_x − B·A·μ_x̂.
#pragma once

#include <string_view>

#include "compress/math/low_rank.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// w: [d', d]; bias: [d'] or empty; hat: statistics of x̂ (width d); cross: Σ x x̂ᵀ and Σ x over the same
// n tokens. The junction is applied when installing (block identity; the other junctions give the
// split J = I, B = U·S). Throws ConfigError on shapes or token counts that do not match.
LowRank compensated_fit(const MatrixD& w, const VectorD& bias, const calib::SiteStats& hat,
                        const calib::CrossStats& cross, int rank, const LocalOptions& opt, std::string_view context);

// The full-rank map of the objective, M = (C_xh + λI)·(C_hh + λI)⁻¹: [d, d], so that W̃ = W·M; with
// `augmented` the same for the inputs [x; 1], [x̂; 1] (C_x'h' = [[C_xh, Σx], [Σx̂ᵀ, n]], C_h'h' =
// SiteStats::augmented()): [d+1, d+1], [W̃ | b̃] = [W | b]·M'. λ = lambda_rel · mean diag of C_hh (or
// C_h'h'), the whitening of whitening.hpp (pseudo-inverse when λ = 0). M = I when x = x̂.
//
// Joint Q-K (stage_joint_qk.cpp) compensates through it: the attention-map loss against the dense
// model's map, Σ_{t,s} (x_tᵀ·G·x_s − x̂_tᵀ·Ĝ·x̂_s)² with G = W_qᵀ·W_k per head, is, up to a constant,
// ‖F·(Ĝ − Mᵀ·G·M)·Fᵀ‖² for F·Fᵀ = C_hh (λ = 0): the joint Q-K objective of the dense weights W_q·M,
// W_k·M on the statistics of x̂. Without RoPE only (with it the score couples two positions' rotations).
MatrixD compensation_map(const calib::SiteStats& hat, const calib::CrossStats& cross, double lambda_rel,
                         bool augmented, std::string_view context);

// The loss of the objective above without its damping term, Σ_t ‖W·x_t + b − (B·A·x̂_t + b̂)‖², up to the
// constant Σ_t ‖W·x_t + b‖² (which needs Σ x xᵀ): tr(Â·C_hh·Âᵀ) − 2·tr(W·C_xh·Âᵀ) + bias terms, with
// Â = B·A. Lower is better; tests and logs compare fits with it.
double compensated_loss_offset(const MatrixD& w, const VectorD& bias, const LowRank& f, const calib::SiteStats& hat,
                               const calib::CrossStats& cross);

}  // namespace latentllm::compress
