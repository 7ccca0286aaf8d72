// The LM head fused with the log-softmax: next-token NLL without materializing the [n, V] logits.
#pragma once

#include <cstdint>
#include <span>

#include "latentllm/tensor.hpp"
#include "model/weight_table.hpp"

namespace latentllm::model {

// CPU seconds the fused head spent in its GEMMs and in the log-sum-exp (summed over threads).
struct HeadCpuTimes {
  double gemm = 0, lse = 0;
};

// nll[i] = −log softmax(x_i·Wᵀ)[targets[i]] for every row with targets[i] >= 0 (0 elsewhere).
// x: [n, p], w: [V, p], targets: [n], nll: [n]. Row blocks go to the forward's threads; each computes
// its logits one vocabulary block at a time with a single-threaded sgemm (the block stays in L2) and
// keeps an online max-subtracted log-sum-exp per row (float exp, sums in double). A mapped (lazy) w
// is widened one vocabulary block at a time into the task's scratch, 1/rows of the block's GEMM, and
// its pages are dropped at the end. Throws FormatError for a target outside [0, V). times (may be
// null) receives the split when profiling.
void fused_head_nll(const MatrixF& x, const WeightTable& w, std::span<const std::int32_t> targets,
                    std::span<double> nll, HeadCpuTimes* times);

// logits: [n, V] = x: [n, p] · wᵀ. An eager w is one core::parallel_xwt; a mapped one is widened a
// block of vocabulary rows at a time, each block's columns of the logits computed by one sgemm. A
// quantized w (WeightTable::packed) goes through quant::gemv row by row for at most core::kGemvRows
// rows, else through quant::xwtq by vocabulary blocks; fused_head_nll dequantizes its blocks (block()).
void head_logits(const MatrixF& x, const WeightTable& w, MatrixF& logits);

}  // namespace latentllm::model
