// The KV cache of incremental decoding and Model::forward_cached: the prompt in one call (prefill),
// then one token per call, through the same layer code as a full forward (layer_resume with
// LayerState::kv set; attention in model/attention.cpp reads the cached keys and values).
#include <string>

#include "latentllm/error.hpp"
#include "latentllm/model.hpp"

namespace latentllm::model {

void LayerKvCache::store(int first, const MatrixF& new_k, const MatrixF& new_v) {
  const std::int64_t n = new_k.rows();
  if (first < 0 || first + n > k.rows() || new_v.rows() != n || new_k.cols() != k.cols() || new_v.cols() != v.cols()) {
    throw Error(fmt::format("KV cache: store k [{}, {}], v [{}, {}] at position {} (expected rows within the capacity {} "
                            "and width {})", new_k.rows(), new_k.cols(), new_v.rows(), new_v.cols(), first, k.rows(),
                            k.cols()));
  }
  k.middleRows(first, n) = new_k;
  v.middleRows(first, n) = new_v;
}

KvCache::KvCache(const Model& m, int capacity) : capacity_(capacity) {
  const std::int64_t max_pos = m.config().max_position_embeddings;
  if (capacity < 1 || capacity > max_pos) {
    throw ConfigError(fmt::format("{}: KV cache of {} positions (expected 1..max_position_embeddings = {})",
                                  m.dir().string(), capacity, max_pos));
  }
  const AttentionInfo& a = m.attention();
  const std::int64_t width = static_cast<std::int64_t>(a.num_kv_heads) * a.head_dim;  // H_kv·d_h
  layers_.resize(static_cast<std::size_t>(m.num_layers()));
  for (LayerKvCache& l : layers_) {
    l.k.resize(capacity, width);
    l.v.resize(capacity, width);
  }
}

std::int64_t KvCache::bytes_per_token() const {
  std::int64_t b = 0;
  for (const LayerKvCache& l : layers_) b += l.bytes_per_token();
  return b;
}

void Model::forward_cached(std::span<const std::int32_t> ids, KvCache& cache, MatrixF& logits, bool last_only) const {
  const int past = cache.length();
  const auto n = static_cast<std::int64_t>(ids.size());
  if (n < 1 || past + n > cache.capacity()) {
    throw ConfigError(fmt::format("{}: positions {}..{} (expected 1 or more new positions within the KV cache's "
                                  "capacity of {} positions, got {})", dir_.string(), past, past + n - 1,
                                  cache.capacity(), n));
  }
  const int T = static_cast<int>(n);
  MatrixF h;  // [n, d]
  embed_from(ids, past, h);
  for (int i = 0; i < num_layers(); ++i) {
    LayerState s;
    s.resid.swap(h);
    s.kv = &cache.layer(i);
    s.past = past;
    layer_resume(i, s, T);
    h.swap(s.resid);
  }
  cache.advance(T);
  if (last_only) {
    const MatrixF last = h.bottomRows(1);  // [1, d]
    head(last, logits);                    // [1, V]
  } else {
    head(h, logits);                       // [n, V]
  }
}

}  // namespace latentllm::model
