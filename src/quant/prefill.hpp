// Products with many rows of x over a packed quantized matrix (prefill, calibration): the rows of W' are
// dequantized to float32 a block at a time and multiplied by sgemm, as core::xwt16 widens 16-bit weights.
//
// Numerics: a dequantized value is s·(c − z) in float32, c − z rounded once (exact when z is an integer)
// and the product once: within 2·2^-24 of s·(|c| + |z|) of the exact value (dequantize(), in double).
// The product then has sgemm's rounding.
#pragma once

#include <cstdint>

#include "quant/pack.hpp"

namespace latentllm::quant {

// out: [r1 − r0, cols] float32 = rows [r0, r1) of W'.
void dequantize_rows(const PackedMatrix& w, std::int64_t r0, std::int64_t r1, float* out);

// y[:, 0 : c1 − c0] (leading dimension ldy) = beta·y + x: [n, cols] (leading dimension ldx) · W'[c0:c1, :]ᵀ.
// On the calling thread (callers split the output columns over the pool, as with core::xwt16); beta 0
// ignores y.
void xwtq(const float* x, int n, int ldx, const PackedMatrix& w, std::int64_t c0, std::int64_t c1, float beta,
          float* y, int ldy);

}  // namespace latentllm::quant
