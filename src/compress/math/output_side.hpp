// The output side of a wide module: what the root-covariance methods need of W: [d', d] with d' < d,
// from the statistics of its outputs y = W·x instead of the [d, d] input covariance C.
//
// For any factor F·Fᵀ = C + λI, svd_r[W·F] = U_r·S_r·V_rᵀ has U_r, S_r² the leading eigenpairs of
//     G = W·F·Fᵀ·Wᵀ = W·(C + λI)·Wᵀ = Σ_t y_t·y_tᵀ + λ·W·Wᵀ,       [d', d']
// and since U_rᵀ·W·F = S_r·V_rᵀ, the optimal local factorization (asvd.hpp) is
//     B·A = U_r·S_r·V_rᵀ·F⁻¹ = U_r·(U_rᵀ·W),   B = U_r·S_r,  A = S_r⁻¹·U_rᵀ·W   (J = I),
// its activation loss tr((W − B·A)·C·(W − B·A)ᵀ) = tr(G₀) − tr(U_rᵀ·G₀·U_r) with G₀ = W·C·Wᵀ, and the
// bias update b + (W − B·A)·μ = b + (I − U_r·U_rᵀ)·W·μ (bias.hpp; C centered then, as asvd does).
//
// Cost per token: d·d' (the recomputed outputs) + d'²/2 (their Gram) multiply-adds against d²/2 for C,
// so cheaper when d' < (√2 − 1)·d: the down projections (d' = d / 3.5 on Llama-3-8B, d / 4 on OPT).
// And no d³ factorization of C: one d'-wide eigendecomposition replaces the Cholesky of C, W·L, the
// Gram of W·L and V_rᵀ·L⁻¹. The statistics are gathered batch by batch as the pipeline taps the
// module's inputs (calib::Stage::consume), so the inputs are never kept.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "compress/math/low_rank.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tensor.hpp"
#include "model/linear_fused.hpp"

namespace latentllm::compress {

// Whether the output side is the cheaper route for a module [out, in]: per token out·in + out²/2
// multiply-adds against in²/2, before the input side's factorization.
bool output_side_cheaper(std::int64_t out, std::int64_t in);

// Whether the local stage fits a module [out, in] from its outputs (stage_local.cpp; its site must not
// need error compensation): CompressOptions::output_side, the root covariance (the method's pre-conditioner), damped (lambda_rel > 0:
// the input side's Cholesky route then, which drops no direction), float covariance products allowed
// (pipeline.covariance_f32: the default preset; the paper preset keeps C in double), and cheaper.
bool local_output_side(const CompressOptions& o, std::int64_t out, std::int64_t in);

// The statistics of one module's outputs over the calibration tokens, and of its inputs only what the
// damping and the bias update need. Float products (sgemm for y, ssyrk per 1024 tokens for Σ y·yᵀ)
// summed in double, as SiteStats' f32 route.
class OutputStats {
 public:
  // x: [rows, d] a batch of the module's inputs (first_token: the batch's first token, for messages),
  // w: [d', d] the module's weight. Returns the FLOPs done (2 per multiply-add).
  double add(const MatrixF& w, const MatrixF& x, std::int64_t first_token);
  // Rounds the sums (exact until then, calib::ExactSums) and mirrors Σ y·yᵀ after the last add.
  void finish();
  // finish() over every rank's batches (a collective: calib::SiteStats::combine_ranks).
  void finish_ranks();

  std::int64_t tokens() const { return y_.n; }
  // tr C, or of the centered C = Σ (x − μ)(x − μ)ᵀ.
  double input_trace(bool centered) const;
  // λ = lambda_rel · mean(diag C) (absolute_damping), of C or the centered C.
  double damping(bool centered, double lambda_rel) const;
  // G₀ = W·C·Wᵀ, or W·C_centered·Wᵀ = Σ y·yᵀ − n·(W·μ)(W·μ)ᵀ: [d', d'].
  MatrixD output_gram(bool centered) const;
  VectorD output_mean() const { return y_.mean(); }  // W·μ: [d']
  const calib::SiteStats& outputs() const { return y_; }

 private:
  calib::SiteStats y_;    // of y = W·x: Σ y·yᵀ [d', d'], Σ y, n
  VectorD x_sum_;         // [d] Σ x (after finish)
  double x_sq_ = 0;       // Σ ‖x‖² (after finish)
  calib::ExactSums x_exact_;  // [d + 1] the running Σ x, Σ ‖x‖²
  std::int64_t in_ = 0;   // d
};

// The OutputStats of the modules of one layer a stage fits from their outputs, gathered from its
// Stage::consume calls (one layer at a time: a batch of a new layer starts afresh).
class LayerOutputs {
 public:
  // Adds batch x: [rows, w] of layer i to every module `pick` selects; returns the FLOPs.
  template <typename Pick>
  double add(const model::DecoderLayer& layer, int i, const MatrixF& x, std::int64_t first_token, Pick&& pick) {
    if (i != layer_) modules_.clear();
    layer_ = i;
    double flops = 0;
    for (const model::Linear& lin : layer.linears) {
      if (!pick(lin)) continue;
      MatrixF widened;  // [out, in] when lin keeps a 16-bit matrix (stored weights), for this batch
      flops += modules_[lin.name].add(model::weight_f32(lin, widened), x, first_token);
    }
    return flops;
  }
  // The finished statistics of a module over every rank's batches (throws Error when it got no batch; a
  // collective: every rank asks for the same modules in the same order).
  const OutputStats& finished(const std::string& name);
  void clear() { modules_.clear(); }

 private:
  std::map<std::string, OutputStats> modules_;
  int layer_ = -1;
};

// W·(C + λI)·Wᵀ with λ from lambda_rel (damping): [d', d']. w: [d', d] as given to add.
MatrixD damped_output_gram(const OutputStats& s, const MatrixF& w, bool centered, double lambda_rel);

// The local root-covariance ASVD of w: [d', d] (asvd.hpp, same B·A, bias and junction) from its output
// statistics, with its activation loss and the output energy Σ ‖W·x + b‖² that the report divides it
// by. bias: [d'] or empty (updated when opt.update_bias, as asvd). opt.preconditioner is not read.
struct OutputSideFit {
  LowRank f;
  double loss = 0;    // Σ ‖(W − B·A)·x + b − b̂‖²
  double energy = 0;  // Σ ‖W·x + b‖²
};
OutputSideFit output_side_asvd(const MatrixD& w, const MatrixF& w_f32, const VectorD& bias, const OutputStats& s,
                               int rank, const LocalOptions& opt, std::string_view context);

}  // namespace latentllm::compress
