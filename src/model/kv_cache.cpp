// The KV cache of incremental decoding and Model::forward_cached: the prompt in one call (prefill),
// then one token per call, through the same layer code as a full forward (layer_resume with
// LayerState::kv set; attention in model/attention.cpp reads the cached keys and values).
#include <algorithm>
#include <string>
#include <vector>

#include "core/enum_names.hpp"
#include "core/gemm16.hpp"
#include "core/parallel.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"

namespace latentllm::model {

std::string_view kv_form_name(KvForm f) { return f == KvForm::Latent ? "latent" : "dense"; }

namespace {
constexpr auto kKvCacheModeNames = core::enum_names<KvCacheMode>(
    core::Named<KvCacheMode>{KvCacheMode::Dense, "dense"}, core::Named<KvCacheMode>{KvCacheMode::Latent, "latent"},
    core::Named<KvCacheMode>{KvCacheMode::Auto, "auto"});
}  // namespace

std::string_view kv_cache_mode_name(KvCacheMode m) { return kKvCacheModeNames.name(m); }

KvCacheMode parse_kv_cache_mode(std::string_view s) {
  return kKvCacheModeNames.parse(s, "--kv-cache (expected {}, got {})");
}

void LayerKvCache::store(int first, const MatrixF& new_k, const MatrixF& new_v) {
  const std::int64_t n = new_k.rows();
  if (first < 0 || first + n > k.rows() || new_v.rows() != n || new_k.cols() != k.cols() || new_v.cols() != v.cols()) {
    throw Error(fmt::format("KV cache: store k [{}, {}], v [{}, {}] at position {} (expected rows within the capacity {} "
                            "and widths {} and {})", new_k.rows(), new_k.cols(), new_v.rows(), new_v.cols(), first,
                            k.rows(), k.cols(), v.cols()));
  }
  k.middleRows(first, n) = new_k;
  v.middleRows(first, n) = new_v;
}

std::string LayerKvCache::describe() const {
  return fmt::format("k {} {}, v {} {} floats/position", kv_form_name(k_form), k.cols(), kv_form_name(v_form),
                     v.cols());
}

namespace {

// FLOPs this kind of machine does in the time it reads one byte from memory (sgemm peak over read
// bandwidth: 2 cores with AVX-512 measured 107 GFLOP/s against 30 GB/s, bench/results/decode). The
// absorbed latent attention is compute-bound when the heads are many: per cached position a latent
// module costs H·r multiply-adds on r·4 bytes, a dense one H·d_h on H_kv·d_h·4 bytes.
constexpr double kFlopsPerByte = 4.0;

// Estimated time per cached position of module l (rank r) in either form, in bytes-read units.
double step_cost(std::int64_t bytes, double macs) { return std::max(static_cast<double>(bytes), 2.0 * macs / kFlopsPerByte); }

}  // namespace

KvForm kv_cache_form(const Linear* l, bool is_key, const AttentionInfo& a, KvCacheMode mode) {
  if (l == nullptr || !l->factored() || mode == KvCacheMode::Dense) return KvForm::Dense;
  if (mode == KvCacheMode::Latent) return KvForm::Latent;
  const std::int64_t r = l->rank(), width = static_cast<std::int64_t>(a.num_kv_heads) * a.head_dim;
  const bool smaller = r < width;
  // Not slower: the absorbed route's multiply-adds (every query head against the latent) against the
  // dense cache's reads.
  const bool faster = step_cost(4 * r, static_cast<double>(a.num_heads) * static_cast<double>(r)) <=
                      step_cost(4 * width, static_cast<double>(a.num_heads) * a.head_dim);
  // Keys between the factors and the attention (RoPE, q/k norms) make every step decompress every
  // cached key: smaller, but much slower than a dense cache.
  const bool absorbable = !is_key || (!a.rope && !a.qk_norm);
  return smaller && faster && absorbable ? KvForm::Latent : KvForm::Dense;
}

KvCache::KvCache(const Model& m, int capacity, KvCacheMode mode) : capacity_(capacity) {
  const std::int64_t max_pos = m.config().max_position_embeddings;
  if (capacity < 1 || capacity > max_pos) {
    throw ConfigError(fmt::format("{}: KV cache of {} positions (expected 1..max_position_embeddings = {})",
                                  m.dir().string(), capacity, max_pos));
  }
  const AttentionInfo& a = m.attention();
  const std::int64_t width = static_cast<std::int64_t>(a.num_kv_heads) * a.head_dim;  // H_kv·d_h
  layers_.resize(static_cast<std::size_t>(m.num_layers()));
  for (int i = 0; i < m.num_layers(); ++i) {
    LayerKvCache& l = layers_[static_cast<std::size_t>(i)];
    const DecoderLayer* layer = m.layer_loaded(i) ? &m.layer(i) : nullptr;
    const Linear* kp = layer != nullptr ? layer->find(Role::K) : nullptr;
    const Linear* vp = layer != nullptr ? layer->find(Role::V) : nullptr;
    l.k_form = kv_cache_form(kp, true, a, mode);
    l.v_form = kv_cache_form(vp, false, a, mode);
    l.k.resize(capacity, l.k_form == KvForm::Latent ? kp->rank() : width);
    l.v.resize(capacity, l.v_form == KvForm::Latent ? vp->rank() : width);
  }
  check_latent_requested(m, mode);
}

// A latent cache asked for by name on a model without one factored k_proj / v_proj would report a
// latent cache while every layer caches dense keys and values.
void KvCache::check_latent_requested(const Model& m, KvCacheMode mode) const {
  if (mode != KvCacheMode::Latent) return;
  bool any_loaded = false;
  for (int i = 0; i < m.num_layers(); ++i) any_loaded = any_loaded || m.layer_loaded(i);
  for (const LayerKvCache& l : layers_)
    if (l.k_form == KvForm::Latent || l.v_form == KvForm::Latent) return;
  if (!any_loaded) return;  // a lazy model's unloaded layers: nothing to tell yet
  throw ConfigError(fmt::format("{}: --kv-cache latent (expected a latent checkpoint with factored k_proj or v_proj, "
                                "got a dense model: no layer can cache a latent); use --kv-cache auto or dense",
                                m.dir().string()));
}

std::int64_t KvCache::bytes_per_token() const {
  std::int64_t b = 0;
  for (const LayerKvCache& l : layers_) b += l.bytes_per_token();
  return b;
}

std::vector<std::string> KvCache::describe() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < layers_.size(); ++i) out.push_back(fmt::format("layer {}: {}", i, layers_[i].describe()));
  return out;
}

void Model::forward_cached(std::span<const std::int32_t> ids, KvCache& cache, MatrixF& logits, bool last_only) const {
  // The forward's BLAS calls are single-threaded (the pool splits them): set once for the whole step
  // here, the modules' own scopes then find OpenBLAS at one thread and change nothing.
  core::BlasSingleThreaded single;
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

void Model::forward_batch(std::span<const std::int32_t> ids, std::span<KvCache* const> caches, MatrixF& logits) const {
  const auto B = static_cast<std::int64_t>(ids.size());
  if (B < 1 || static_cast<std::size_t>(B) != caches.size()) {
    throw ConfigError(fmt::format("{}: batch of {} ids for {} caches (expected one id per cache, at least one)",
                                  dir_.string(), B, caches.size()));
  }
  for (const KvCache* c : caches) {
    if (c->length() + 1 > c->capacity()) {
      throw ConfigError(fmt::format("{}: positions {}..{} (expected 1 or more new positions within the KV cache's "
                                    "capacity of {} positions, got 1)", dir_.string(), c->length(), c->length(),
                                    c->capacity()));
    }
  }
  core::BlasSingleThreaded single;
  const core::RowwiseProducts rowwise;  // row b as forward_cached computes it alone
  MatrixF h(B, config_.hidden_size), hb;  // [B, d], [1, d]
  for (std::int64_t b = 0; b < B; ++b) {
    embed_from(ids.subspan(static_cast<std::size_t>(b), 1), caches[static_cast<std::size_t>(b)]->length(), hb);
    h.row(b) = hb.row(0);
  }
  for (int i = 0; i < num_layers(); ++i) {
    LayerState s;
    s.resid.swap(h);
    for (KvCache* c : caches) {
      s.kvs.push_back(&c->layer(i));
      s.pasts.push_back(c->length());
    }
    layer_resume(i, s, 1);
    h.swap(s.resid);
  }
  for (KvCache* c : caches) c->advance(1);
  head(h, logits);  // [B, V]
}

}  // namespace latentllm::model
