// Local activation-aware SVD (paper Sec. "Activation-aware SVD", Table 1) with junction matrices and
// the bias update (appendix "Bias Update").
//
// For W: [d', d] and a pre-conditioner P: [d, d], W·P = U·S·Vᵀ truncated to rank r gives
//     B = U·S·J: [d', r],   A = J⁻¹·Vᵀ·P⁺: [r, d],   so   B·A·P = svd_r[W·P]   (whenever P·P⁺ acts as I on
// the row space of W·P, i.e. always with damping). The junction J (paper: "junction matrix") is a free
// invertible r×r factor; B·A does not depend on it. With P = (C + λI)^{1/2} this is the minimizer of the
// (damped) activation loss ‖(W − B·A)·(C + λI)^{1/2}‖_F² (Eckart–Young on W·P).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "compress/preconditioner.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// The compressed form of one linear module: y ≈ B·(A·x) + bias.
struct LowRankFactors {
  MatrixD B;              // [d', r]
  MatrixD A;              // [r, d], or [r, d − r] for BlockIdentity (the columns perm[r..d), in that order)
  std::vector<int> perm;  // [d] BlockIdentity only: dense A has column perm[j] = e_j for j < r
  Junction junction = Junction::Identity;
  int rank = 0;           // r
  VectorD bias;           // [d'] the (updated) bias; empty when the module has none
  double loss = 0;        // Σ_t ‖(W·x_t + b) − (B·A·x_t + bias)‖² over the calibration tokens (undamped)

  int out_features() const { return static_cast<int>(B.rows()); }
  int in_features() const;
  MatrixD dense_a() const;  // [r, d]; for BlockIdentity the identity block is exactly 1.0 / 0.0
  MatrixD product() const;  // [d', d]  B·A
  std::int64_t weight_params() const { return B.size() + A.size(); }
};

// The full local compression of one module: P from the statistics (centered for a bias module when
// opt.update_bias), the truncated SVD of W·P, the junction, the bias update, the loss.
// w: [d', d]; bias: [d'] or empty; 1 ≤ rank ≤ min(d, d'). `context` names the module in errors.
LowRankFactors asvd(const MatrixD& w, const VectorD& bias, const InputStats& stats, int rank,
                    const LocalOptions& opt, std::string_view context);

// The same with a pre-built P (several ranks or junctions from one eigendecomposition). Sets B, A,
// perm, junction, rank; leaves bias empty and loss 0 (see update_bias and output_error).
LowRankFactors asvd_with(const MatrixD& w, const PreconditionerMatrix& p, int rank, Junction j,
                         std::string_view context);

// Junction forms of one factorization W ≈ (U·diag(s))·M with U: [d', r], s: [r], M = Vᵀ·P⁺: [r, d].
LowRankFactors apply_junction(const MatrixD& u, const VectorD& s, const MatrixD& m, Junction j,
                              std::string_view context);

// Rewrites any B: [d', r], A: [r, d] (rank(A) = r) as B'·[I_r | A₂]·Πᵀ with B'·A' = B·A: the identity
// columns are chosen by column-pivoted QR of A, then refined by "maxvol" swaps until every entry of
// A₂ has magnitude ≤ 1.05 (so A₂ is bounded and the r×r block J = A[:, perm[0..r)] is as well
// conditioned as the greedy choice allows); B' = B·J, A₂ = J⁻¹·A[:, perm[r..d)]. When A has numerical
// rank k < r (a singular pre-conditioner or weight), B·A is first rewritten exactly with a rank-k A and
// the result has rank k (a "rank-reduced" note, compress/notes.hpp); throws NumericError when A is zero.
LowRankFactors to_block_identity(const MatrixD& b, const MatrixD& a, std::string_view context);

// b̂ = b + (W − B·A)·μ: keeps the mean output over the calibration set (optimal for a free bias).
// w: [d', d], product = B·A: [d', d], bias: [d'], mean: [d].
VectorD updated_bias(const MatrixD& w, const MatrixD& product, const VectorD& bias, const VectorD& mean);

// Activation loss ‖(W − B·A)·C^{1/2}‖_F² = tr((W − B·A)·C·(W − B·A)ᵀ). e = W − B·A: [d', d], c: [d, d].
double activation_loss(const MatrixD& e, const MatrixD& c);

// Σ_t ‖E·x_t + δ‖² from the uncentered statistics: tr(E·C·Eᵀ) + 2·n·δᵀ·E·μ + n·‖δ‖²,
// with E = W − B·A: [d', d] and δ = b − b̂: [d'] (empty = 0). c: [d, d], mean: [d] (may be empty when δ is).
double output_error(const MatrixD& e, const VectorD& delta, const MatrixD& c, const VectorD& mean, double n);

}  // namespace latentllm::compress
