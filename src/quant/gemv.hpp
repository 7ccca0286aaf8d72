// y = W'·x for a packed quantized matrix (pack.hpp): the decode product, reading the packed codes once
// and never forming W'. With W' = s·(c − z) per group (quant.hpp), each row is
//     y_r = Σ_g s_g·(Σ_{j∈g} c_j·x_j − z_g·Σ_{j∈g} x_j),
// so the inner loop is a product of widened codes with x, and the zero point costs one multiply-add per
// group (Σ_{j∈g} x_j is computed once per call, for every row).
//
// Kernels: AVX-512 and AVX2 + FMA + F16C for q ∈ {4, 8} with G a multiple of 32, portable C++ for every
// other case; the instruction set is core::kernel_isa() (LATENTLLM_ISA, as gemm16.hpp). For q = 4 the
// low nibbles of 16 bytes are 16 codes of even index and the high nibbles 16 of odd index, so x is
// reordered once per call to match (per 32 columns: the even ones, then the odd ones) rather than the
// codes per row.
//
// Numerics: every row is summed in one fixed order per instruction set (the vector kernels: per group
// the products in vector lanes, the lanes scaled by s_g and added over the groups, one horizontal sum
// per row, minus Σ_g s_g·z_g·Σx; the portable code group by group), so y does not depend on the thread
// count. It differs from the float product of the dequantized matrix by rounding only.
#pragma once

#include <span>

#include "quant/pack.hpp"

namespace latentllm::quant {

// y: [rows] = W'·x, x: [cols]. Rows are split over the library's thread pool when worth it.
void gemv(const PackedMatrix& w, std::span<const float> x, std::span<float> y);

// Whether gemv runs a vector kernel for w under the current instruction set (else portable code).
bool gemv_vectorized(const PackedMatrix& w);

}  // namespace latentllm::quant
