// Causal multi-head softmax attention over whole windows, shared by every architecture.
#pragma once

#include "latentllm/tensor.hpp"

namespace latentllm::model {

struct AttentionShape {
  int T = 0;            // tokens per window
  int H = 0;            // query heads
  int H_kv = 0;         // key/value heads (GQA: query head h reads kv head h / (H / H_kv))
  int d_h = 0;          // head dim
  float scale = 1.0f;   // multiplies Q·Kᵀ (1/sqrt(d_h), or 1 when the queries are pre-scaled as in OPT)
  // Sliding window (Mistral): query t sees keys (t − window, t], itself included, as HF's mask
  // kv_idx > q_idx − sliding_window; 0 = plain causal, keys [0, t].
  int window = 0;
  // Positions before each window's first query whose keys and values k and v also hold (incremental
  // decoding with a KV cache): query t of a window is at position past + t and sees keys [0, past + t]
  // (or its sliding window of them). 0 = whole windows.
  int past = 0;
};

// out = softmax(scale · Q_h·K_hᵀ + causal (sliding-window) mask)·V_h per window and head, heads concatenated.
// q: [n_seq·T, H·d_h], k, v: [n_seq·(past + T), H_kv·d_h] -> out: [n_seq·T, H·d_h]. Windows are
// independent (positions restart at 0 in each). With n_seq = 1, k and v may have more rows than
// past + T (a cache's capacity); rows after them are not read. Scores and ·V are sgemm calls on row blocks of a window, keys
// beyond the block's last query (and before its first query's sliding window) skipped; the softmax
// runs in float with max subtraction.
void causal_attention(const MatrixF& q, const MatrixF& k, const MatrixF& v, const AttentionShape& s, MatrixF& out);

// FLOPs of causal_attention's two GEMMs for n_seq windows (2 per multiply-add; the block-causal
// region it multiplies, not the full T×T square). H_kv and scale do not enter.
double causal_attention_flops(const AttentionShape& s, std::int64_t n_seq);

}  // namespace latentllm::model
