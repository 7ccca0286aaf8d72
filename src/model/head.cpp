#include "model/head.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include "core/gemm.hpp"
#include "core/gemm16.hpp"
#include "latentllm/error.hpp"
#include "core/parallel.hpp"
#include "quant/gemv.hpp"
#include "quant/prefill.hpp"

namespace latentllm::model {
namespace {

// Rows per task and vocabulary entries per GEMM: the [kRows, kVocab] logits block (512 KiB) stays
// in L2 between the sgemm that writes it and the log-sum-exp that reads it.
constexpr std::int64_t kRows = 256;
constexpr std::int64_t kVocab = 512;
// Float partial sums of this many exp terms are accumulated in double.
constexpr std::int64_t kSumBlock = 64;

using Clock = std::chrono::steady_clock;

// Online log-sum-exp of one row: running max m and Σ exp(z − m) in double.
struct RowLse {
  float m = -std::numeric_limits<float>::infinity();
  double s = 0;
  float target_logit = 0;

  void update(const float* z, std::int64_t len) {
    Eigen::Map<const Eigen::ArrayXf> a(z, len);
    const float bm = a.maxCoeff();
    if (bm > m) {
      s *= std::exp(static_cast<double>(m) - static_cast<double>(bm));
      m = bm;
    }
    for (std::int64_t j = 0; j < len; j += kSumBlock) {
      const auto l = std::min(kSumBlock, len - j);
      s += static_cast<double>((a.segment(j, l) - m).exp().sum());
    }
  }
};

// logits: [n, V] = x: [n, p] · W'ᵀ for a quantized head: each of at most core::kGemvRows rows (decoding)
// through quant::gemv, which reads the packed codes once and splits the vocabulary over the pool; more
// rows through dequantized vocabulary blocks into sgemm (quant::xwtq). Either way each logit's sum has
// one order whatever the thread count.
void packed_logits(const MatrixF& x, const quant::PackedMatrix& q, MatrixF& logits) {
  const std::int64_t n = x.rows(), p = x.cols(), V = q.rows;
  // Decoding, or a batch of decoding sequences whose every row must be the one-row result (RowwiseProducts).
  if (n <= core::kGemvRows || core::rowwise_products()) {
    std::vector<float> y(static_cast<std::size_t>(V));  // [V]
    for (std::int64_t i = 0; i < n; ++i) {
      quant::gemv(q, std::span<const float>(x.data() + i * p, static_cast<std::size_t>(p)), y);
      std::copy(y.begin(), y.end(), logits.data() + i * V);
    }
    return;
  }
  core::parallel_for(V, kVocab, core::gemm_work(n, V, p), [&](std::int64_t v0, std::int64_t v1) {
    quant::xwtq(x.data(), static_cast<int>(n), static_cast<int>(p), q, v0, v1, 0.0f, logits.data() + v0,
                static_cast<int>(V));
  });
}

}  // namespace

void fused_head_nll(const MatrixF& x, const WeightTable& w, std::span<const std::int32_t> targets,
                    std::span<double> nll, HeadCpuTimes* times) {
  const std::int64_t n = x.rows(), p = x.cols(), V = w.rows();
  if (w.cols() != p || static_cast<std::int64_t>(targets.size()) != n || static_cast<std::int64_t>(nll.size()) != n) {
    throw Error(fmt::format("fused_head_nll: shapes (x [{}, {}], w [{}, {}], {} targets, {} outputs)", n, p, V,
                            w.cols(), targets.size(), nll.size()));
  }
  for (std::int64_t i = 0; i < n; ++i) {
    if (targets[static_cast<std::size_t>(i)] >= V) {
      throw FormatError(fmt::format("token id at position {} (expected 0..{}, got {})", i + 1, V - 1,
                                    targets[static_cast<std::size_t>(i)]));
    }
  }
  std::mutex times_mutex;
  core::BlasSingleThreaded single;
  // The log-sum-exp adds about 20 operations per logit (an exp and its sum) to the GEMM's 2·p.
  const core::Work work = core::gemm_work(n, V, p) + core::Work{20.0 * static_cast<double>(n * V), 0};
  core::parallel_for(n, kRows, work, [&](std::int64_t r0, std::int64_t r1) {
    const std::int64_t rows = r1 - r0;
    thread_local core::ScratchF logits;  // [rows, kVocab], aligned (see core::ScratchF)
    thread_local core::ScratchF wblock;  // [kVocab, p] a widened vocabulary block (lazy w only)
    logits.resize(static_cast<std::size_t>(kRows * kVocab));
    std::vector<RowLse> lse(static_cast<std::size_t>(rows));
    double t_gemm = 0, t_lse = 0;
    for (std::int64_t v0 = 0; v0 < V; v0 += kVocab) {
      const std::int64_t vb = std::min(kVocab, V - v0);
      const auto t0 = times ? Clock::now() : Clock::time_point{};
      const float* wb = w.block(v0, vb, wblock);  // [vb, p]
      // logits: [rows, vb] = x[r0:r1]·W[v0:v0+vb]ᵀ
      core::sgemm_rm(false, true, static_cast<int>(rows), static_cast<int>(vb), static_cast<int>(p), 1.0f,
                     x.data() + r0 * p, static_cast<int>(p), wb, static_cast<int>(p), 0.0f, logits.data(),
                     static_cast<int>(vb));
      const auto t1 = times ? Clock::now() : Clock::time_point{};
      for (std::int64_t i = 0; i < rows; ++i) {
        const float* z = logits.data() + i * vb;
        auto& st = lse[static_cast<std::size_t>(i)];
        st.update(z, vb);
        const std::int32_t t = targets[static_cast<std::size_t>(r0 + i)];
        if (t >= v0 && t < v0 + vb) st.target_logit = z[t - v0];
      }
      if (times) {
        t_gemm += std::chrono::duration<double>(t1 - t0).count();
        t_lse += std::chrono::duration<double>(Clock::now() - t1).count();
      }
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto& st = lse[static_cast<std::size_t>(i)];
      nll[static_cast<std::size_t>(r0 + i)] =
          targets[static_cast<std::size_t>(r0 + i)] < 0 ? 0.0 : std::log(st.s) + st.m - st.target_logit;
    }
    if (times) {
      std::lock_guard lock(times_mutex);
      times->gemm += t_gemm;
      times->lse += t_lse;
    }
  });
  w.release_pages();
}

void head_logits(const MatrixF& x, const WeightTable& w, MatrixF& logits) {
  const bool rowwise = x.rows() > 1 && core::rowwise_products();
  if (rowwise && !w.view16()) {  // each row as alone (a 16-bit table's GEMV below already is)
    logits.resize(x.rows(), w.rows());
    MatrixF row, one;  // [1, p], [1, V]
    for (std::int64_t i = 0; i < x.rows(); ++i) {
      row = x.row(i);
      head_logits(row, w, one);
      logits.row(i) = one;
    }
    return;
  }
  if (w.is_widened()) {
    core::parallel_xwt(x, w.matrix(), logits);  // eager: one product, as every other wide GEMM
    return;
  }
  const std::int64_t n = x.rows(), p = x.cols(), V = w.rows();
  if (w.cols() != p) throw Error(fmt::format("head_logits: inner dimension (expected {}, got {})", w.cols(), p));
  logits.resize(n, V);
  core::BlasSingleThreaded single;
  if (const quant::PackedMatrix* q = w.packed()) {
    packed_logits(x, *q, logits);
    return;
  }
  if (const auto w16 = w.view16(); w16 && (n <= core::kGemvRows || core::rowwise_products())) {
    // Decoding: the GEMV reads the 16-bit rows once, widening them in registers (the stored model
    // checked them finite at load).
    core::parallel_for(V, kVocab, core::gemm_work(n, V, p), [&](std::int64_t v0, std::int64_t v1) {
      core::xwt16(x.data(), static_cast<int>(n), static_cast<int>(p), *w16, v0, v1, 0.0f, logits.data() + v0,
                  static_cast<int>(V));
    });
    w.release_pages();
    return;
  }
  core::parallel_for(V, kVocab, core::gemm_work(n, V, p), [&](std::int64_t v0, std::int64_t v1) {
    thread_local core::ScratchF wblock;  // [kVocab, p]
    const float* wb = w.block(v0, v1 - v0, wblock);
    // logits[:, v0:v1] = x · W[v0:v1]ᵀ
    core::sgemm_rm(false, true, static_cast<int>(n), static_cast<int>(v1 - v0), static_cast<int>(p), 1.0f, x.data(),
                   static_cast<int>(p), wb, static_cast<int>(p), 0.0f, logits.data() + v0, static_cast<int>(V));
  });
  w.release_pages();
}

}  // namespace latentllm::model
