// GPTQ (Frantar, Ashkboos, Hoefler, Alistarh 2022, "GPTQ: Accurate Post-Training Quantization for
// Generative Pre-trained Transformers", Algorithm 1): the columns of W are quantized one at a time, and
// each column's rounding error is compensated on the columns not yet quantized, through the inverse of
// the layer's input second moment H = Σ_t x_t·x_tᵀ, so that tr((W − W')·H·(W − W')ᵀ) is small rather
// than ‖W − W'‖.
//
// What this implementation does, and where it follows the reference code (IST-DASLab/gptq):
//   - dead inputs: a column whose diag H is 0 gets H_jj = 1 and W[:, j] = 0 (the input never varies,
//     so the weight is irrelevant to the output);
//   - damping λ = percdamp·mean(diag H) on the diagonal, then U = upper Cholesky factor of (H + λI)⁻¹
//     (the paper's Sec. 4 "Cholesky reformulation"); H + λI not positive definite is an error;
//   - the sweep: column j is rounded on its group's grid, e_j = (w_j − q_j)/U_jj, and e_j·U[j, j+1:] is
//     subtracted from the later columns; within a block of columns at once, later columns by one
//     matrix product per block (the paper's "lazy batch updates");
//   - act-order (the reference's --act-order): the columns are swept in order of decreasing diag H
//     (ties in increasing column index), the codes put back in the original order;
//   - groups: a group's grid (quant.hpp) is fitted when the sweep reaches its first column, on the
//     group's columns as updated so far. The reference reads them from W outside the current block, so
//     for a group starting inside a block it misses that block's updates; here the block size is
//     adjusted to the group size (a multiple of G, or G a multiple of it) so that every group sees all
//     updates, and the result does not depend on the block size but by rounding (the lazy updates are
//     an exact rearrangement). Static groups (the reference's --static-groups) fit every grid on W
//     before the sweep; act-order requires them, since a group must be G consecutive input columns
//     for the storage (pack.hpp), which act-order's sweep order does not visit together.
//
// Deterministic: double precision throughout, no thread pool (the products are single-threaded BLAS).
#pragma once

#include <string_view>
#include <vector>

#include "quant/quant.hpp"

namespace latentllm::quant {

struct GptqOptions {
  double percdamp = 0.01;     // λ = percdamp·mean(diag H) (the reference's default)
  int block = 128;            // columns per lazy batch update
  bool act_order = false;     // sweep columns by decreasing diag H
  bool static_groups = false; // fit every group's grid on W before the sweep (required by act_order)
};

struct GptqResult {
  QuantizedMatrix q;
  // ‖E‖² with E the scaled errors e_j, which equals tr((W₀ − W')·(H₀ + λI)·(W₀ − W')ᵀ): W₀, H₀ are
  // W and H after the dead-input rule (the error-compensation identity W₀ − W' = E·U, since
  // U·(H₀ + λI)·Uᵀ = I).
  double loss = 0.0;
  double damping = 0.0;   // λ
  int dead = 0;           // columns with diag H = 0
  std::vector<int> perm;  // [cols]: the column swept at step j (identity without act_order)
};

// W': the codes and grids of w: [rows, cols] for inputs with second moment h: [cols, cols] (symmetric:
// its upper triangle is used, all of it must be finite). Besides w and h it holds one [cols, cols]
// and one or two [rows, cols] double matrices. Throws ConfigError for a bad spec or options or H's shape,
// NumericError for non-finite W or H, H + λI not positive definite, or a scale beyond half precision;
// every message starts with `context`.
GptqResult gptq(const MatrixD& w, const MatrixD& h, const QuantSpec& spec, const GptqOptions& opt,
                std::string_view context);

}  // namespace latentllm::quant
