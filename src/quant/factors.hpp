// Quantizing the two factors of a low-rank module W ≈ B·A (B: [d', r], A: [r, d]) on the module's input
// second moment C = Σ x·xᵀ [d, d], the latentllm paper's q-bit factors (appendix "Quantization-Aware
// Distillation") with either quantizer:
//   1. A' = quantize(A) on C (A's inputs are the module's inputs);
//   2. B's inputs are then A'·x, with second moment H_B = A'·C·A'ᵀ [r, r]; optionally B is first refitted
//      to the quantized A, B̃ = argmin_B̃ Σ‖B·A·x − B̃·A'·x‖² + λ‖B̃ − B‖² = (B·A·C·A'ᵀ + λB)·(H_B + λI)⁻¹
//      (least squares damped toward B, λ = percdamp·mean(diag H_B) as GPTQ's), so that B absorbs A's
//      rounding error;
//   3. B' = quantize(B̃ or B) on H_B.
// The error reported is the module's output error on C: tr((B·A − B'·A')·C·(B·A − B'·A')ᵀ). With the refit
// and λ = 0 it splits exactly into the refit's residual and B's quantization error on H_B (B̃ is the
// least-squares optimum, so the cross term vanishes).
//
// Factors in block-identity form (the junction, src/compress/math/junction.hpp) keep their identity
// block exact: with `perm` (a permutation of 0 … d−1) A is the stored block [r, d − r] whose column k is
// the dense A's column perm[r + k], the dense A's columns perm[0 … r) are the identity. Only the stored
// block is quantized, on its inputs' second moment C[perm[r:], perm[r:]]; B's inputs are the dense
// A'·x.
#pragma once

#include <span>
#include <string_view>

#include "quant/gptq.hpp"

namespace latentllm::quant {

enum class Quantizer { Rtn, Gptq };
std::string_view quantizer_name(Quantizer q);  // "rtn", "gptq"

struct FactorOptions {
  QuantSpec spec;                         // the same bits and group size for both factors
  Quantizer quantizer = Quantizer::Gptq;  // Rtn: the paper's rule, round to nearest; Gptq: error-compensating
  GptqOptions gptq;                       // GPTQ's options; percdamp also damps the refit
  bool refit_b = false;                   // refit B to the quantized A before quantizing it
};

struct QuantizedFactors {
  QuantizedMatrix a;   // [r, d]
  QuantizedMatrix b;   // [d', r]
  double error = 0.0;  // tr((B·A − B'·A')·C·(B·A − B'·A')ᵀ)
};

// Throws ConfigError when the shapes disagree (B's columns, A's rows, C's order), besides what rtn and
// gptq throw; NumericError when the refit's A'·C·A'ᵀ + λI is not positive definite. Messages start
// with `context`.
QuantizedFactors quantize_factors(const MatrixD& b, const MatrixD& a, const MatrixD& c, const FactorOptions& opt,
                                  std::string_view context, std::span<const int> perm = {});

}  // namespace latentllm::quant
