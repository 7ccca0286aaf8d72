// Products with weights kept in their stored 16-bit dtype (latentllm::Matrix16, F16 or BF16): the
// weight rows are widened to float32 inside the kernels, never as a whole matrix. The instruction
// set is chosen at run time (AVX-512, F16C with AVX2 and FMA, or portable C++): the library is built
// for the baseline x86-64 and only these functions carry target attributes.
//
// Numerics: widening F16/BF16 to float32 is exact, so
//   - xwt16 with more than kGemvRows rows (any number under ExactProducts) widens the block of W it
//     is given and calls sgemm on it: the same bits as sgemm_rm on that block of the widened matrix
//     (OpenBLAS's results depend on how the output columns are split for small products, so callers
//     keep the float32 path's blocks);
//   - the GEMV (at most kGemvRows rows, decoding; any number under RowwiseProducts, each row the bits it
//     gets alone) accumulates each dot product in float32 in its own
//     order (blocks of the vector width, then a tree sum): it differs from OpenBLAS's sgemv on the
//     widened matrix by rounding only, |Δy_j| <= 2·k·2⁻²⁴·Σ_i |x_i·w_ji| (each order's error is at
//     most (k−1)·u·Σ|x_i·w_ji|), and its result does not depend on the thread count.
#pragma once

#include <cstdint>
#include <string_view>

#include "latentllm/tensor.hpp"

namespace latentllm::core {

// The kernels' instruction sets, from portable to widest.
enum class Isa { Generic, F16c, Avx512 };
std::string_view isa_name(Isa isa);  // "generic", "f16c", "avx512"
// The widest this CPU supports.
Isa best_isa();
// The one in use: best_isa(), or the narrower one the environment variable LATENTLLM_ISA names
// ("generic", "f16c", "avx512"; one wider than the CPU supports, or an unknown name, gives best_isa()).
Isa kernel_isa();
// Forces the instruction set (tests compare the paths); one the CPU lacks gives best_isa(). Returns
// the one now in use.
Isa set_kernel_isa(Isa isa);

// Rows up to which xwt16 runs the GEMV kernel instead of widened panels and sgemm.
constexpr int kGemvRows = 4;

// out: [r1 − r0, w.cols] float32 = rows [r0, r1) of w, widened (exact).
void widen_rows(const Matrix16& w, std::int64_t r0, std::int64_t r1, float* out);

// y[:, 0 : c1 − c0] (leading dimension ldy) = beta·y + x: [n, k] (leading dimension ldx) · w[c0:c1, :]ᵀ,
// w: [rows, k]. On the calling thread (callers split the columns across the pool). beta 0 ignores y.
void xwt16(const float* x, int n, int ldx, const Matrix16& w, std::int64_t c0, std::int64_t c1, float beta, float* y,
           int ldy);

// While one exists (on any thread), xwt16 widens and calls sgemm for any number of rows, never the
// GEMV: products with 16-bit weights are then the float32 path's bits for every n (compress's
// calibration forward, whose checkpoints do not depend on how the weights are held). Nests.
class ExactProducts {
 public:
  ExactProducts();
  ~ExactProducts();
  ExactProducts(const ExactProducts&) = delete;
  ExactProducts& operator=(const ExactProducts&) = delete;
};

// While one exists (on any thread), every product with a weight computes each row of x exactly as it
// would alone: xwt16 runs the GEMV kernel for any number of rows (each row's dot products in the
// kernel's own order, whatever the others), and linear_forward / the LM head give each row the
// one-row kernel of its operand (model::Model::forward_batch: a batch of decoding sequences whose
// results must not depend on what else is in the batch). 16-bit weights are still read once from
// memory for the batch (four weight rows at a time, every x row against them from L1); float32 and
// quantized ones per row of x from a cache-sized column block (docs/KV_CACHE.md). Nests; ExactProducts
// wins when both exist.
class RowwiseProducts {
 public:
  RowwiseProducts();
  ~RowwiseProducts();
  RowwiseProducts(const RowwiseProducts&) = delete;
  RowwiseProducts& operator=(const RowwiseProducts&) = delete;
};
// True while a RowwiseProducts exists.
bool rowwise_products();

// Index of the first non-finite value of w (Inf or NaN), or −1.
std::int64_t first_non_finite(const Matrix16& w);

}  // namespace latentllm::core
