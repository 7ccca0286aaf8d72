// Attention over a KV cache with dense and latent modules (cached_attention.hpp).
// The latent route is multi-head latent attention (DeepSeek-V2, §2.1.2 "low-rank key-value joint
// compression"): with k = B_k·c_k + b_k and v = B_v·c_v + b_v per position,
//   q_h·k_h(n) = (B_k,hᵀ·q_h)·c_k(n) + q_h·b_k,h   (the last term is the same for every key n: the
//                                                  softmax over n drops it exactly)
//   Σ_n p_n·v_h(n) = B_v,h·(Σ_n p_n·c_v(n)) + b_v,h  (Σ_n p_n = 1)
// where B_·,h are the rows of kv head h. All query heads share one latent, so the scores of every
// head and new position are one GEMM against the cached latents, read once per step.
#include "model/cached_attention.hpp"

#include <algorithm>

#include "core/gemm.hpp"
#include "core/parallel.hpp"
#include "latentllm/error.hpp"
#include "model/linear_fused.hpp"
#include "model/profile.hpp"

namespace latentllm::model {
namespace {

constexpr int kMaxAbsorbedRows = 64;     // new positions up to which the absorbed form may run (scores [T·H, K])
constexpr std::int64_t kKeyBlock = 128;  // cached positions per task of the absorbed scores
constexpr std::int64_t kColBlock = 64;   // latent columns per task of the absorbed P·c_v
constexpr std::int64_t kRowBlock = 64;   // cached positions per task of decompression

// True when the absorbed form of a latent module of rank r costs fewer multiply-adds per cached
// position (T·H·r: every query head against the latent) than decompressing it (H_kv·d_h·r) and
// attending densely (T·H·d_h). One new position (decoding) always; a prompt (prefill) never.
bool absorb_pays(int T, const AttentionShape& s, std::int64_t r) {
  const double absorbed = static_cast<double>(T) * s.H * static_cast<double>(r);
  const double decompressed = static_cast<double>(s.H_kv) * s.d_h * static_cast<double>(r) +
                              static_cast<double>(T) * s.H * s.d_h;
  return T <= kMaxAbsorbedRows && absorbed <= decompressed;
}

// y: [K, out] = c[0:K]·Bᵀ + b: the dense outputs of the first K cached latents c: [capacity, r].
void decompress(const Linear& l, const MatrixF& c, int K, MatrixF& y) {
  const std::int64_t r = l.rank(), out = l.out;
  detail::ProfileScope scope(&ForwardProfile::linear_s, &ForwardProfile::linear_flops,
                             2.0 * static_cast<double>(out * r) * K);
  y.resize(K, out);
  core::BlasSingleThreaded single;
  thread_local core::ScratchF wide;  // [out, r] a 16-bit B widened
  const float* b = widened(l.B, wide);
  core::parallel_for(K, kRowBlock, core::gemm_work(K, out, r), [&](std::int64_t r0, std::int64_t r1) {
    const bool bias = l.bias.size() > 0;
    if (bias) y.middleRows(r0, r1 - r0).rowwise() = l.bias.transpose();
    core::sgemm_rm(false, true, static_cast<int>(r1 - r0), static_cast<int>(out), static_cast<int>(r), 1.0f,
                   c.data() + r0 * r, static_cast<int>(r), b, static_cast<int>(r), bias ? 1.0f : 0.0f,
                   y.data() + r0 * out, static_cast<int>(out));
  });
}

// Softmax of each row of S: [T·H, K] (row t·H + h: query t, head h, at position past + t) over the
// keys it sees, the rest set to 0.
void masked_softmax(MatrixF& S, const AttentionShape& s) {
  const std::int64_t rows = S.rows(), K = S.cols();
  // About 20 operations per score (max, exp, sum, divide), the row read and written.
  const double scores = static_cast<double>(rows) * static_cast<double>(K);
  core::parallel_for(rows, 16, core::Work{20 * scores, 8 * scores}, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const int p = s.past + static_cast<int>(i / s.H);
      const int lo = s.window > 0 ? std::max(0, p - s.window + 1) : 0, hi = p + 1;
      float* row = S.data() + i * K;
      std::fill(row, row + lo, 0.0f);
      Eigen::Map<Eigen::ArrayXf> a(row + lo, hi - lo);
      a = (a - a.maxCoeff()).exp();
      a /= a.sum();
      std::fill(row + hi, row + K, 0.0f);
    }
  });
}

// out: [T, H·d_h] with k_proj absorbed into the queries when kp (keys = the latents c_k: [≥K, r_k];
// else keys: [≥K, H_kv·d_h]) and v_proj applied after the weighted sum when vp (values = c_v; else
// the values).
void absorbed_attention(const MatrixF& q, const MatrixF& keys, const Linear* kp, const MatrixF& values,
                        const Linear* vp, const AttentionShape& s, MatrixF& out) {
  const int T = s.T, H = s.H, d_h = s.d_h, K = s.past + s.T, group = s.H / s.H_kv;
  const std::int64_t width = static_cast<std::int64_t>(s.H_kv) * d_h;
  for (const Linear* l : {kp, vp}) {
    if (l != nullptr && l->out != width) {
      throw Error(fmt::format("{}: latent attention (expected {} = H_kv·d_h outputs, got {})", l->name, width, l->out));
    }
  }
  detail::ProfileScope scope(&ForwardProfile::attention_s);
  const std::int64_t rows = static_cast<std::int64_t>(T) * H;
  MatrixF S(rows, K);  // [T·H, K] scores, then probabilities; row t·H + h
  core::BlasSingleThreaded single;
  if (kp != nullptr) {
    const int r = static_cast<int>(kp->rank());
    thread_local core::ScratchF wide;  // [H_kv·d_h, r_k] a 16-bit B_k widened
    const float* b = widened(kp->B, wide);
    MatrixF qt(T, static_cast<std::int64_t>(H) * r);  // [T, H·r_k] q̃_h = q_h·B_k,h, also [T·H, r_k]
    core::parallel_for(H, 1, core::gemm_work(T, r, d_h) * H, [&](std::int64_t h, std::int64_t) {
      core::sgemm_rm(false, false, T, r, d_h, 1.0f, q.data() + h * d_h, H * d_h,
                     b + (h / group) * d_h * r, r, 0.0f, qt.data() + h * r, H * r);
    });
    core::parallel_for(K, kKeyBlock, core::gemm_work(rows, K, r), [&](std::int64_t k0, std::int64_t k1) {
      core::sgemm_rm(false, true, static_cast<int>(rows), static_cast<int>(k1 - k0), r, s.scale, qt.data(), r,
                     keys.data() + k0 * r, r, 0.0f, S.data() + k0, K);
    });
  } else {
    const int ldk = static_cast<int>(keys.cols());
    core::parallel_for(H, 1, core::gemm_work(T, K, d_h) * H, [&](std::int64_t h, std::int64_t) {
      core::sgemm_rm(false, true, T, K, d_h, s.scale, q.data() + h * d_h, H * d_h, keys.data() + (h / group) * d_h,
                     ldk, 0.0f, S.data() + h * K, H * K);
    });
  }
  masked_softmax(S, s);
  out.resize(T, static_cast<std::int64_t>(H) * d_h);
  if (vp != nullptr) {
    const int r = static_cast<int>(vp->rank());
    thread_local core::ScratchF wide;  // [H_kv·d_h, r_v] a 16-bit B_v widened
    const float* b = widened(vp->B, wide);
    MatrixF ol(T, static_cast<std::int64_t>(H) * r);  // [T, H·r_v] = P·c_v per head, also [T·H, r_v]
    core::parallel_for(r, kColBlock, core::gemm_work(rows, r, K), [&](std::int64_t c0, std::int64_t c1) {
      core::sgemm_rm(false, false, static_cast<int>(rows), static_cast<int>(c1 - c0), K, 1.0f, S.data(), K,
                     values.data() + c0, r, 0.0f, ol.data() + c0, r);
    });
    core::parallel_for(H, 1, core::gemm_work(T, d_h, r) * H, [&](std::int64_t h, std::int64_t) {
      const std::int64_t g = h / group;
      core::sgemm_rm(false, true, T, d_h, r, 1.0f, ol.data() + h * r, H * r, b + g * d_h * r, r, 0.0f,
                     out.data() + h * d_h, H * d_h);
      if (vp->bias.size() > 0) {
        for (int t = 0; t < T; ++t) out.row(t).segment(h * d_h, d_h) += vp->bias.segment(g * d_h, d_h).transpose();
      }
    });
  } else {
    const int ldv = static_cast<int>(values.cols());
    core::parallel_for(H, 1, core::gemm_work(T, d_h, K) * H, [&](std::int64_t h, std::int64_t) {
      core::sgemm_rm(false, false, T, d_h, K, 1.0f, S.data() + h * K, H * K, values.data() + (h / group) * d_h, ldv,
                     0.0f, out.data() + h * d_h, H * d_h);
    });
  }
}

}  // namespace

namespace {

// nk: [n, H_kv·d_h] keys (before the key transform) or [n, r_k] latents, nv likewise: the new rows'
// entries in the forms of kv.
void new_entries(const MatrixF& x, const Linear& k_proj, const Linear& v_proj, const LayerKvCache& kv, MatrixF& nk,
                 MatrixF& nv) {
  if (kv.k_form == KvForm::Latent) {
    latent_forward(k_proj, x, nk);
  } else {
    k_proj.forward(x, nk);
  }
  if (kv.v_form == KvForm::Latent) {
    latent_forward(v_proj, x, nv);
  } else {
    v_proj.forward(x, nv);
  }
}

// The rest of cached_attention once the new positions' entries nk, nv (keys transformed) are known.
void attend(const MatrixF& q, const MatrixF& nk, const MatrixF& nv, const Linear& k_proj, const Linear& v_proj,
            const KeyTransform& key_transform, AttentionShape s, LayerKvCache& kv, int past, MatrixF& out) {
  const int T = static_cast<int>(nk.rows());
  s.T = T;
  s.past = past;
  const bool k_latent = kv.k_form == KvForm::Latent, v_latent = kv.v_form == KvForm::Latent;
  kv.store(past, nk, nv);
  if (!k_latent && !v_latent) {
    causal_attention(q, kv.k, kv.v, s, out);
    return;
  }
  const int K = past + T;
  const bool absorb_k = k_latent && !key_transform && absorb_pays(T, s, k_proj.rank());
  const bool absorb_v = v_latent && absorb_pays(T, s, v_proj.rank());
  MatrixF kd, vd;  // [K, H_kv·d_h] decompressed keys and values
  if (k_latent && !absorb_k) {
    decompress(k_proj, kv.k, K, kd);
    if (key_transform) key_transform(kd, 0);
  }
  if (v_latent && !absorb_v) decompress(v_proj, kv.v, K, vd);
  const MatrixF& keys = k_latent && !absorb_k ? kd : kv.k;
  const MatrixF& values = v_latent && !absorb_v ? vd : kv.v;
  if (!absorb_k && !absorb_v) {
    causal_attention(q, keys, values, s, out);
    return;
  }
  absorbed_attention(q, keys, absorb_k ? &k_proj : nullptr, values, absorb_v ? &v_proj : nullptr, s, out);
}

}  // namespace

void cached_attention(const MatrixF& q, const MatrixF& x, const Linear& k_proj, const Linear& v_proj,
                      const KeyTransform& key_transform, AttentionShape s, LayerKvCache& kv, int past, MatrixF& out) {
  MatrixF nk, nv;  // [T, H_kv·d_h] or [T, r] the new positions' entries
  new_entries(x, k_proj, v_proj, kv, nk, nv);
  if (kv.k_form == KvForm::Dense && key_transform) key_transform(nk, past);
  attend(q, nk, nv, k_proj, v_proj, key_transform, s, kv, past, out);
}

void cached_attention_batch(const MatrixF& q, const MatrixF& x, const Linear& k_proj, const Linear& v_proj,
                            const KeyTransform& key_transform, const AttentionShape& s,
                            std::span<LayerKvCache* const> kvs, std::span<const int> pasts, MatrixF& out) {
  const auto B = static_cast<std::int64_t>(kvs.size());
  if (x.rows() != B || q.rows() != B || static_cast<std::int64_t>(pasts.size()) != B || B < 1) {
    throw Error(fmt::format("{}: batched attention of {} rows, {} queries, {} caches and {} positions (expected one "
                            "each per sequence)", k_proj.name, x.rows(), q.rows(), kvs.size(), pasts.size()));
  }
  for (const LayerKvCache* kv : kvs) {
    if (kv->k_form != kvs[0]->k_form || kv->v_form != kvs[0]->v_form) {
      throw Error(fmt::format("{}: batched attention over caches of different forms ({} and {}; expected one "
                              "--kv-cache choice for the batch)", k_proj.name, kvs[0]->describe(), kv->describe()));
    }
  }
  MatrixF nk, nv;  // [B, H_kv·d_h] or [B, r]: every sequence's new entry, one product per module
  new_entries(x, k_proj, v_proj, *kvs[0], nk, nv);
  out.resize(B, q.cols());
  MatrixF qb, kb, vb, ob;  // row b of q, nk, nv, out
  for (std::int64_t b = 0; b < B; ++b) {
    const auto ub = static_cast<std::size_t>(b);
    qb = q.row(b);
    kb = nk.row(b);
    vb = nv.row(b);
    if (kvs[ub]->k_form == KvForm::Dense && key_transform) key_transform(kb, pasts[ub]);
    attend(qb, kb, vb, k_proj, v_proj, key_transform, s, *kvs[ub], pasts[ub], ob);
    out.row(b) = ob.row(0);
  }
}

}  // namespace latentllm::model
