// The attention of incremental decoding over a KV cache whose modules are dense (keys and values) or
// latent (c = A·x of a factored k_proj / v_proj; LayerKvCache, KvForm in latentllm/model.hpp), shared
// by every architecture.
#pragma once

#include <functional>
#include <span>

#include "latentllm/model.hpp"
#include "model/attention.hpp"

namespace latentllm::model {

// Turns k_proj outputs k: [n, H_kv·d_h] at positions first..first+n−1 into keys, in place (Llama:
// Qwen3's k_norm, then RoPE). Empty when the keys are the outputs (OPT).
using KeyTransform = std::function<void(MatrixF& k, int first)>;

// q: [T, H·d_h] the queries of T new positions past..past+T−1 of one sequence (transformed: q_norm,
// RoPE), x: [T, d] the attention block's input they came from -> out: [T, H·d_h] the head outputs.
// Computes the new positions' keys and values (dense: k_proj(x) through key_transform, v_proj(x);
// latent: A·x) and stores them in kv's rows [past, past + T), then attends to all past + T:
//  - both dense: causal_attention on the cache;
//  - a latent module whose absorbed form is cheaper (few new positions, no key_transform for keys):
//    B absorbed into the queries (k) or applied to the attention-weighted latents (v), the k bias
//    dropped (a constant per query) and the v bias added after (weights sum to 1);
//  - otherwise decompressed: B·c + b for every cached position, through key_transform at positions
//    0..past+T−1, then causal_attention.
// Every route is exact up to float round-off. s.T and s.past are set from q and past.
void cached_attention(const MatrixF& q, const MatrixF& x, const Linear& k_proj, const Linear& v_proj,
                      const KeyTransform& key_transform, AttentionShape s, LayerKvCache& kv, int past, MatrixF& out);

// Batched decoding (Model::forward_batch): q: [B, H·d_h] and x: [B, d], row b the one new position
// pasts[b] of sequence b whose cache is kvs[b] -> out: [B, H·d_h]. k_proj and v_proj run once on the
// B rows; each sequence then stores its entries and attends to its own cache as cached_attention does
// with its row alone (the same bits under core::RowwiseProducts). Error when the caches' forms differ.
void cached_attention_batch(const MatrixF& q, const MatrixF& x, const Linear& k_proj, const Linear& v_proj,
                            const KeyTransform& key_transform, const AttentionShape& s,
                            std::span<LayerKvCache* const> kvs, std::span<const int> pasts, MatrixF& out);

}  // namespace latentllm::model
