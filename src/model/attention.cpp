#include "model/attention.hpp"

#include <algorithm>
#include <vector>

#include "core/gemm.hpp"
#include "latentllm/model.hpp"
#include "latentllm/error.hpp"
#include "core/parallel.hpp"
#include "model/profile.hpp"

namespace latentllm::model {
namespace {

// Query rows per block: the scores block [kBlock, T] stays in L2, and keys past the block's last
// query are never multiplied (about 40 % of the causal square saved at T = 512).
constexpr int kBlock = 64;

// Keys [first_key, end) the query rows [i0, i0 + rows) of a block need together: up to the last
// query, from the first query's sliding window on (0 without a window).
int first_key(int i0, int window) { return window > 0 ? std::max(0, i0 - window + 1) : 0; }

// exp(s − max) over the n_keys entries at s, in place; returns their sum. The division by it is
// applied to the block's output rows (d_h entries) instead of to the probabilities (up to T).
float exp_prefix(float* s, int n_keys) {
  Eigen::Map<Eigen::ArrayXf> a(s, n_keys);
  const float mx = a.maxCoeff();
  a = (a - mx).exp();
  return a.sum();
}

// One window, one query head: rows [w·T, (w+1)·T) of q, [w·K, (w+1)·K) of k and v (K = past + T keys a
// window holds), columns of head h / kv head g. Query row i is at position past + i.
void attend_head(const MatrixF& q, const MatrixF& k, const MatrixF& v, const AttentionShape& s, int w, int h,
                 MatrixF& out, core::ScratchF& scores) {
  const int g = h / (s.H / s.H_kv);
  const int K = s.past + s.T;
  const int ldq = static_cast<int>(q.cols()), ldk = static_cast<int>(k.cols()), ldo = static_cast<int>(out.cols());
  const std::int64_t row0 = static_cast<std::int64_t>(w) * s.T, key0 = static_cast<std::int64_t>(w) * K;
  const float* qh = q.data() + row0 * ldq + static_cast<std::int64_t>(h) * s.d_h;  // [T, d_h], ld ldq
  const float* kh = k.data() + key0 * ldk + static_cast<std::int64_t>(g) * s.d_h;  // [K, d_h], ld ldk
  const float* vh = v.data() + key0 * ldk + static_cast<std::int64_t>(g) * s.d_h;  // [K, d_h], ld ldk
  float* oh = out.data() + row0 * ldo + static_cast<std::int64_t>(h) * s.d_h;      // [T, d_h], ld ldo
  scores.resize(static_cast<std::size_t>(kBlock) * K);
  for (int i0 = 0; i0 < s.T; i0 += kBlock) {
    const int rows = std::min(kBlock, s.T - i0);
    const int p0 = s.past + i0;  // position of the block's first query
    const int k0 = first_key(p0, s.window);
    const int keys = p0 + rows - k0;  // the block's queries see keys [k0, p0 + rows) between them
    // S: [rows, keys] = scale · Q[i0:i0+rows]·K[k0:k0+keys]ᵀ
    core::sgemm_rm(false, true, rows, keys, s.d_h, s.scale, qh + static_cast<std::int64_t>(i0) * ldq, ldq,
                   kh + static_cast<std::int64_t>(k0) * ldk, ldk, 0.0f, scores.data(), keys);
    float inv_sum[kBlock];
    for (int r = 0; r < rows; ++r) {
      float* sr = scores.data() + static_cast<std::int64_t>(r) * keys;
      const int lo = first_key(p0 + r, s.window) - k0, hi = p0 + r + 1 - k0;  // query p0+r sees [lo, hi)
      std::fill(sr, sr + lo, 0.0f);
      inv_sum[r] = 1.0f / exp_prefix(sr + lo, hi - lo);
      std::fill(sr + hi, sr + keys, 0.0f);
    }
    // O[i0:i0+rows] = P: [rows, keys] · V[k0:k0+keys]: [keys, d_h], then each row / its softmax sum.
    float* ob = oh + static_cast<std::int64_t>(i0) * ldo;
    core::sgemm_rm(false, false, rows, s.d_h, keys, 1.0f, scores.data(), keys, vh + static_cast<std::int64_t>(k0) * ldk,
                   ldk, 0.0f, ob, ldo);
    for (int r = 0; r < rows; ++r) {
      Eigen::Map<Eigen::ArrayXf>(ob + static_cast<std::int64_t>(r) * ldo, s.d_h) *= inv_sum[r];
    }
  }
}

}  // namespace

double causal_attention_flops(const AttentionShape& s, std::int64_t n_seq) {
  double keys_total = 0;  // Σ over row blocks of rows × keys multiplied
  for (int i0 = 0; i0 < s.T; i0 += kBlock) {
    const int rows = std::min(kBlock, s.T - i0), p0 = s.past + i0;
    keys_total += static_cast<double>(rows) * (p0 + rows - first_key(p0, s.window));
  }
  return 2.0 * 2.0 * keys_total * s.d_h * s.H * static_cast<double>(n_seq);
}

void causal_attention(const MatrixF& q, const MatrixF& k, const MatrixF& v, const AttentionShape& s, MatrixF& out) {
  const std::int64_t n = q.rows();
  const std::int64_t n_seq = s.T > 0 ? n / s.T : 0, keys = n_seq * (static_cast<std::int64_t>(s.past) + s.T);
  // One window may read a cache with room for more positions than it holds.
  const bool rows_ok = n_seq == 1 ? k.rows() >= keys && v.rows() >= keys : k.rows() == keys && v.rows() == keys;
  if (s.T <= 0 || s.H <= 0 || s.H_kv <= 0 || s.H % s.H_kv != 0 || n % s.T != 0 || s.window < 0 || s.past < 0 ||
      q.cols() != static_cast<std::int64_t>(s.H) * s.d_h || k.cols() != static_cast<std::int64_t>(s.H_kv) * s.d_h ||
      v.cols() != k.cols() || !rows_ok) {
    throw Error(fmt::format("causal_attention: shapes (q [{}, {}], k [{}, {}], v [{}, {}], T {}, past {}, H {}, H_kv {}, "
                            "d_h {}, window {})", q.rows(), q.cols(), k.rows(), k.cols(), v.rows(), v.cols(), s.T,
                            s.past, s.H, s.H_kv, s.d_h, s.window));
  }
  detail::ProfileScope scope(&ForwardProfile::attention_s, &ForwardProfile::attention_flops,
                             causal_attention_flops(s, n_seq));

  out.resize(n, q.cols());
  const int tasks = static_cast<int>(n_seq) * s.H;
  core::BlasSingleThreaded single;
  // The products' flops, the softmax's (about 20 per score: a quarter of a product's 2·2·d_h per score
  // would undercount it at small d_h), and q, k, v and out read or written once per head.
  const double scores = causal_attention_flops(s, n_seq) / (4.0 * s.d_h);
  const double qkvo = 4.0 * static_cast<double>(q.size() + k.size() + v.size() + q.size());
  const core::Work work{causal_attention_flops(s, n_seq) + 20 * scores, qkvo + 4.0 * scores};
  core::parallel_for(tasks, 1, work, [&](std::int64_t t0, std::int64_t t1) {
    // Aligned scratch: Eigen's vectorized reductions peel unaligned heads, so their summation order
    // depends on the address; a fixed alignment keeps results independent of the thread.
    thread_local core::ScratchF scores;  // [kBlock, T] per thread
    for (std::int64_t t = t0; t < t1; ++t) attend_head(q, k, v, s, static_cast<int>(t / s.H), static_cast<int>(t % s.H), out, scores);
  });
}

}  // namespace latentllm::model
