// Local activation-aware SVD (paper Sec. "Activation-aware SVD", Table 1) with junction matrices and
// the bias update (appendix "Bias Update").
//
// For W: [d', d] and a pre-conditioner P: [d, d], W·P = U·S·Vᵀ truncated to rank r gives
//     B = U·S·J: [d', r],   A = J⁻¹·Vᵀ·P⁺: [r, d],   so   B·A·P = svd_r[W·P]   (whenever P·P⁺ acts as I on
// the row space of W·P, i.e. always with damping). The junction J (junction.hpp) is a free invertible
// r×r factor; B·A does not depend on it. With P = (C + λI)^{1/2} this is the minimizer of the (damped)
// activation loss ‖(W − B·A)·(C + λI)^{1/2}‖_F² (Eckart–Young on W·P).
#pragma once

#include <string_view>

#include "compress/math/low_rank.hpp"
#include "compress/math/preconditioner.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// The full local compression of one module: P from the statistics (centered for a bias module when
// opt.update_bias), the truncated SVD of W·P, the junction, the bias update (bias.hpp; the bias is kept
// as it is otherwise). w: [d', d]; bias: [d'] or empty; stats of the module's input (width d);
// 1 ≤ rank ≤ min(d, d'). `context` names the module in errors and notes.
LowRank asvd(const MatrixD& w, const VectorD& bias, const calib::SiteStats& stats, int rank, const LocalOptions& opt,
             std::string_view context);

// asvd with the root covariance and J = I (B = U·S, A = Vᵀ·P⁺): the local solution the joint solvers
// start from or compare against; lambda_rel as LocalOptions::lambda_rel.
LowRank local_rootcov(const MatrixD& w, const VectorD& bias, const calib::SiteStats& stats, int rank, double lambda_rel,
                      std::string_view context);

// The same with a pre-built P (several ranks or junctions from one eigendecomposition); bias empty.
LowRank asvd_with(const MatrixD& w, const PreconditionerMatrix& p, int rank, Junction j, std::string_view context);

// Activation loss ‖(W − B·A)·C^{1/2}‖_F² = tr((W − B·A)·C·(W − B·A)ᵀ). e = W − B·A: [d', d], c: [d, d].
double activation_loss(const MatrixD& e, const MatrixD& c);

// Σ_t ‖E·x_t + δ‖² from the uncentered statistics: tr(E·C·Eᵀ) + 2·n·δᵀ·E·μ + n·‖δ‖²,
// with E = W − B·A: [d', d] and δ = b − b̂: [d'] (empty = 0). c: [d, d], mean: [d] (may be empty when δ is).
double output_error(const MatrixD& e, const VectorD& delta, const MatrixD& c, const VectorD& mean, double n);
// The same with the [d', d]·[d, d] product in float (sgemm), each column's dot summed in double: for the
// report (StageContext::install), where it is the largest product of the local stage (twice 0.84 T
// multiply-adds for the Llama-3-8B shape's down_proj, 33 s a layer in double) and ~5 digits suffice.
double output_error_f32(const MatrixD& e, const VectorD& delta, const MatrixD& c, const VectorD& mean, double n);

}  // namespace latentllm::compress
