// Linear::forward with work on its output fused into each row block while the block is in cache:
// the residual add (accumulate) and the MLP activation (plain or gated).
#pragma once

#include <optional>

#include "core/parallel.hpp"
#include "latentllm/model.hpp"
#include "model/ops.hpp"

namespace latentllm::model {

struct Epilogue {
  bool accumulate = false;          // y += x·Wᵀ + b, y already [n, out] (the residual stream)
  std::optional<Activation> act;    // then y = σ(y)
  const MatrixF* times = nullptr;   // then y ⊙= *times, [n, out] (the gated MLP: σ(gate) ⊙ up)
};

// y += x·Wᵀ + b (the residual add).
inline Epilogue accumulated() {
  Epilogue e;
  e.accumulate = true;
  return e;
}
// y = σ(x·Wᵀ + b), times ⊙ that when given.
inline Epilogue activated(Activation act, const MatrixF* times = nullptr) {
  Epilogue e;
  e.act = act;
  e.times = times;
  return e;
}

// y: [n, out] = epilogue(x: [n, in] · Wᵀ + b), W dense or factored, by fixed row blocks on the
// forward's threads (results do not depend on the thread count).
// Fewer rows than one row block (decoding) split the output columns instead, also in fixed blocks.
void linear_forward(const Linear& l, const MatrixF& x, MatrixF& y, const Epilogue& e = {});

// The float32 values of w: its own data when float32, else w widened or dequantized whole into scratch
// (on the pool), valid until scratch changes.
const float* widened(const Weight& w, core::ScratchF& scratch);

// The [out, in] weight of an unfactored l in float32, for a solver that reads it whole: l.weight
// itself, or its 16-bit or quantized form (LoadOptions::Weights::Stored) widened into `widened` (exact), which the caller
// frees when it is done.
const MatrixF& weight_f32(const Linear& l, MatrixF& widened);

// z: [n, r] = the latent A·x of each row of x: [n, in] for a factored l (block identity: the gathered
// identity inputs plus the others · A). Error unless l is factored with input width x.cols().
void latent_forward(const Linear& l, const MatrixF& x, MatrixF& z);

}  // namespace latentllm::model
