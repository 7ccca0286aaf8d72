// Rotary position embeddings (RopeSpec, latentllm/model.hpp): the one definition of the frequencies,
// used by the forward pass (a cos/sin table applied to q and k) and by joint Q-K compression (the
// rotation between the query and key factors, src/compress/math/joint_qk.cpp).
#pragma once

#include "latentllm/model.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::model {

// cos and sin of p·ω_j for positions p = first..first+T−1 (row p − first) and pairs j < d_h/2, computed
// in double.  [T, d_h/2] each.
struct RopeTable {
  MatrixF cos, sin;
};
RopeTable rope_table(const RopeSpec& rope, int T, int head_dim, int first = 0);

// In place on x: [n_seq·T, heads·d_h] (row i takes the table's row i mod T): x' = x·cos + rotate_half(x)·sin with
// rotate_half(x) = [−x₂, x₁] per head (x₁, x₂ its two halves), on the thread pool.
void apply_rope(MatrixF& x, int T, int head_dim, const RopeTable& t);

// The rotation R_p that apply_rope applies at position p as a matrix: [d_h, d_h], q' = R_p·q.
// R_a·R_b = R_{a+b}, R_pᵀ = R_{−p}, so a score q_mᵀ·k_n after RoPE is q_mᵀ·R_{n−m}·k_n.
MatrixD rope_rotation(const RopeSpec& rope, int head_dim, double p);

}  // namespace latentllm::model
