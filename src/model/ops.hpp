// Row-wise building blocks of the forward pass that are not GEMMs: norms and activations.
// All operate on row-major activations [n_tok, width] and run over rows on the thread pool (core/parallel.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "latentllm/model.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::model {

// y = (x − mean) / sqrt(var + eps) · w + b per row (torch.nn.LayerNorm, biased variance; mean and
// variance accumulated in double). w, b: [d] or empty (no affine).  x, y: [n, d].
void layer_norm(const MatrixF& x, const VectorF& w, const VectorF& b, float eps, MatrixF& y);
// y = x · rsqrt(mean(x²) + eps) · w per row (HF LlamaRMSNorm). w: [d].  x, y: [n, d].
void rms_norm(const MatrixF& x, const VectorF& w, float eps, MatrixF& y);

// In place on x: [n, heads·d_h]: RMSNorm (as rms_norm, weight w: [d_h]) over each head's d_h entries
// of each row (Qwen3's q_norm / k_norm).
void rms_norm_heads(MatrixF& x, std::int64_t d_h, const VectorF& w, float eps);

// p[i] = act(p[i]) for i < n, on the calling thread (fused into the linear forward's row blocks).
void activate_span(float* p, std::int64_t n, Activation act);

// Throws NumericError "<what>: non-finite value at [row, col] (expected finite, got v)" when m holds
// a NaN or an infinity.
// True when none of p[0..n) is NaN or ±Inf: one vectorized pass over contiguous memory (x − x sums to 0
// exactly unless some x is not finite). Eigen's allFinite() on a row-major matrix walks it column by
// column, a cache miss per entry: 7.7 ns a float against 0.21 (a [14336, 4096] weight: 0.45 s against
// 0.012), 8 s for the Llama-3-8B shape's embedding and head at load and 1.7 s more per layer.
bool all_finite(const float* p, std::int64_t n);
void check_finite(const MatrixF& m, const std::string& what);
void check_finite(const VectorF& v, const std::string& what);

}  // namespace latentllm::model
