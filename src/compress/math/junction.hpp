// Junction matrices (paper "junction matrix"): the free invertible r×r factor J between the two
// factors of W ≈ B·A. Every choice gives the same B·A; the block-identity choice makes A hold an
// identity block on r pivoted input columns, saving r² weights and r² MACs per token.
#pragma once

#include <string_view>

#include "compress/math/low_rank.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// Junction forms of one factorization W ≈ (U·diag(s))·M with U: [d', r], s: [r], M = Vᵀ·P⁺: [r, d]
// (compress.hpp Junction: J = I, S⁻¹, S^{-1/2}, or block identity). Bias left empty.
LowRank apply_junction(const MatrixD& u, const VectorD& s, const MatrixD& m, Junction j, std::string_view context);

// Rewrites any B: [d', r], A: [r, d] (rank(A) = r) as B'·[I_r | A₂]·Πᵀ with B'·A' = B·A: the identity
// columns are chosen by column-pivoted QR of A, then refined by "maxvol" swaps until every entry of
// A₂ has magnitude ≤ 1.05 (so A₂ is bounded and the r×r block J = A[:, perm[0..r)] is as well
// conditioned as the greedy choice allows); B' = B·J, A₂ = J⁻¹·A[:, perm[r..d)]. When A has numerical
// rank k < r (a singular pre-conditioner or weight), B·A is first rewritten exactly with a rank-k A and
// the result has rank k (a "rank-reduced" note, compress/stages/notes.hpp); throws NumericError when A is zero.
// Bias left empty.
LowRank to_block_identity(const MatrixD& b, const MatrixD& a, std::string_view context);

// f in the form junction j asks for: block identity (bias kept) for Junction::BlockIdentity, f itself
// otherwise (the joint solvers' splits are already valid choices of J).
LowRank with_junction(LowRank f, Junction j, std::string_view context);

}  // namespace latentllm::compress
