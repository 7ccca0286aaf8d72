// Test-only companions of joint Q-K (src/compress/math/joint_qk.hpp): the attention-map loss computed from
// the tokens themselves (the covariance form's reference), and the per-head junction of the paper's
// joint Q-K with its parameter count and rank plan. The compressor uses the stacked factors with the
// generic block-identity junction instead (src/compress/math/junction.hpp), so these live with the tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include <Eigen/LU>
#include <Eigen/QR>

#include "compress/math/bias.hpp"
#include "compress/math/joint_qk.hpp"
#include "latentllm/error.hpp"
#include "model/rope.hpp"

namespace latentllm::compress {

// The same from the tokens x: [n, d] cut into windows of seqlen tokens (positions 0..seqlen−1):
// Σ_i Σ_pairs (s_i(m, n) − ŝ_i(m, n))², pairs (m, n) in one window with 0 ≤ m − n ≤ window, or all
// pairs when window < 0; scores rotated by RoPE when s.rope.
inline double qk_attention_loss_exact(const QkDense& dense, const QkFactors& f, const model::AttentionInfo& s, const MatrixD& x,
                               int seqlen, int window);

// ---- Per-head junction and parameter counting -------------------------------------------------
//
// An invertible J [d_h, d_h] between the two decompressions leaves every score unchanged:
// (J·q̂)ᵀ(J⁻ᵀ·k̂) = q̂ᵀk̂. Choosing J so that one side's per-head decompression holds an exact identity
// block (d_h columns chosen by column-pivoted QR for conditioning) saves d_h² parameters per head.
// Query: J_i·B_q,i = [I | …] per query head (MHA only: a kv head shared by a group cannot absorb
// different J_i). Key: J_g⁻ᵀ·B_k,g = [I | …] per kv head, with J_g applied to all query heads of the
// group (works for GQA; saves H_kv·d_h²). NOT valid with RoPE: the rotation between the two sides does
// not commute with J (apply_qk_junction throws ConfigError when s.rope).
enum class QkJunction { None, Query, Key };

struct QkJunctionResult {
  QkFactors f;
  // Per head of the junction side: the d_h columns of that head's B block that hold the identity
  // (identity_cols[h][j] = column holding e_j).
  std::vector<std::vector<int>> identity_cols;
};
inline QkJunctionResult apply_qk_junction(const QkFactors& f, const model::AttentionInfo& s, QkJunction side, std::string_view context);

// d·(r_q + r_k) + H·d_h·r_q + H_kv·d_h·r_k, minus H·d_h² (Query, r_q ≥ d_h) or H_kv·d_h² (Key, r_k ≥ d_h).
// Biases are not counted.
inline std::int64_t qk_params(const model::AttentionInfo& s, int r_q, int r_k, QkJunction j);
inline std::int64_t qk_dense_params(const model::AttentionInfo& s);  // d·(H + H_kv)·d_h

struct QkRankPlan {
  int r_q = 0;
  int r_k = 0;
  QkJunction junction = QkJunction::None;  // the junction the count assumed (None if it cannot apply)
  std::int64_t params = 0;
  std::int64_t dense_params = 0;
};
// The largest common rank r with r_q = min(r, min(d, H·d_h)), r_k = min(r, min(d, H_kv·d_h)) (a rank
// beyond a projection's output size captures nothing) and params ≤ (1 − ratio)·dense. The junction is
// counted only where it applies (its side's rank ≥ d_h). Throws ConfigError if ratio ∉ (0, 1), no rank
// fits, or a junction is asked for with RoPE.
inline QkRankPlan plan_qk_ranks(const model::AttentionInfo& s, double ratio, QkJunction j);

inline MatrixD head_rows_of(const MatrixD& w, int h, int d_h) {
  return w.middleRows(static_cast<Eigen::Index>(h) * d_h, d_h);
}


// Per-head rotated projections of one window: rows = tokens. w: [H'·d_h, d+1] augmented;
// rot[t]: R_t for position t (empty without RoPE).
inline MatrixD project_head(const MatrixD& xw, const MatrixD& w, int h, int d_h, const std::vector<MatrixD>& rot) {
  MatrixD y = xw * head_rows_of(w, h, d_h).transpose();  // [L, d_h]
  for (std::size_t t = 0; t < rot.size(); ++t) {
    const auto row = static_cast<Eigen::Index>(t);
    y.row(row) = (rot[t] * y.row(row).transpose()).transpose();
  }
  return y;
}

inline double qk_attention_loss_exact(const QkDense& dense, const QkFactors& f, const model::AttentionInfo& s, const MatrixD& x,
                               int seqlen, int window) {
  s.validate("qk_attention_loss_exact");
  const MatrixD wq = with_bias_column(dense.wq, dense.bq), wk = with_bias_column(dense.wk, dense.bk);
  const MatrixD fq = augmented_dense(f.q), fk = augmented_dense(f.k);
  std::vector<MatrixD> rot;
  for (int t = 0; s.rope && t < seqlen; ++t) rot.push_back(model::rope_rotation(s.rope_spec, s.head_dim, t));
  const int dh = s.head_dim;
  double loss = 0;
  for (Eigen::Index start = 0; start + seqlen <= x.rows(); start += seqlen) {
    MatrixD xw(seqlen, x.cols() + 1);  // [L, d+1]
    xw.leftCols(x.cols()) = x.middleRows(start, seqlen);
    xw.col(x.cols()).setOnes();
    for (int i = 0; i < s.num_heads; ++i) {
      const int g = s.kv_head(i);
      const MatrixD sd = project_head(xw, wq, i, dh, rot) * project_head(xw, wk, g, dh, rot).transpose();  // [L, L]
      const MatrixD sf = project_head(xw, fq, i, dh, rot) * project_head(xw, fk, g, dh, rot).transpose();
      for (int mq = 0; mq < seqlen; ++mq) {
        for (int nk = 0; nk < seqlen; ++nk) {
          if (window >= 0 && (mq - nk < 0 || mq - nk > window)) continue;
          const double e = sd(mq, nk) - sf(mq, nk);
          loss += e * e;
        }
      }
    }
  }
  return loss;
}

// ---- Junction and parameter counting ---------------------------------------------------------


// Makes head block `h` of `side` an exact identity on d_h pivoted columns: side_h ← S⁻¹·side_h,
// other_j ← Sᵀ·other_j for every head j of `others` (and their biases alike). Returns the columns.
inline std::vector<int> junction_block(LowRank& side, int h, LowRank& other, const std::vector<int>& others, int dh,
                                std::string_view context) {
  const Eigen::Index r0 = static_cast<Eigen::Index>(h) * dh;
  const MatrixD blk = side.B.middleRows(r0, dh);  // [d_h, r]
  const Eigen::ColPivHouseholderQR<MatrixD> qr(blk);
  std::vector<int> cols(static_cast<std::size_t>(dh));
  MatrixD sq(dh, dh);  // [d_h, d_h]
  for (int j = 0; j < dh; ++j) {
    cols[static_cast<std::size_t>(j)] = qr.colsPermutation().indices()(j);
    sq.col(j) = blk.col(cols[static_cast<std::size_t>(j)]);
  }
  const Eigen::FullPivLU<MatrixD> lu(sq);
  if (!lu.isInvertible()) {
    throw NumericError(fmt::format("{}: per-head junction of head {} is singular (expected rank {}, got {})", context, h,
                                   dh, lu.rank()));
  }
  MatrixD nb = lu.solve(blk);
  for (int j = 0; j < dh; ++j) {  // exact identity block, no rounding residue
    nb.col(cols[static_cast<std::size_t>(j)]) = VectorD::Unit(dh, j);
  }
  side.B.middleRows(r0, dh) = nb;
  if (side.bias.size() > 0) side.bias.segment(r0, dh) = lu.solve(VectorD(side.bias.segment(r0, dh)));
  const MatrixD st = sq.transpose();
  for (int j : others) {
    const Eigen::Index o0 = static_cast<Eigen::Index>(j) * dh;
    other.B.middleRows(o0, dh) = st * other.B.middleRows(o0, dh);
    if (other.bias.size() > 0) other.bias.segment(o0, dh) = st * other.bias.segment(o0, dh);
  }
  return cols;
}

inline QkJunctionResult apply_qk_junction(const QkFactors& f, const model::AttentionInfo& s, QkJunction side, std::string_view context) {
  s.validate(context);
  QkJunctionResult out{f, {}};
  if (side == QkJunction::None) return out;
  if (s.rope) {
    throw ConfigError(fmt::format("{}: per-head junction is invalid with RoPE (the rotation does not commute with J)", context));
  }
  const int dh = s.head_dim;
  if (side == QkJunction::Query) {
    if (s.num_heads != s.num_kv_heads) {
      throw ConfigError(fmt::format("{}: query-side junction needs MHA (expected H_kv = H = {}, got {})", context,
                                    s.num_heads, s.num_kv_heads));
    }
    if (f.q.rank() < dh) throw ConfigError(fmt::format("{}: query junction needs r_q ≥ d_h (expected ≥ {}, got {})", context, dh, f.q.rank()));
    for (int i = 0; i < s.num_heads; ++i) out.identity_cols.push_back(junction_block(out.f.q, i, out.f.k, {i}, dh, context));
  } else {
    if (f.k.rank() < dh) throw ConfigError(fmt::format("{}: key junction needs r_k ≥ d_h (expected ≥ {}, got {})", context, dh, f.k.rank()));
    const int group = s.num_heads / s.num_kv_heads;
    for (int g = 0; g < s.num_kv_heads; ++g) {
      std::vector<int> heads;
      for (int j = 0; j < group; ++j) heads.push_back(g * group + j);
      out.identity_cols.push_back(junction_block(out.f.k, g, out.f.q, heads, dh, context));
    }
  }
  return out;
}

inline std::int64_t qk_params(const model::AttentionInfo& s, int r_q, int r_k, QkJunction j) {
  const std::int64_t d = s.hidden, dh = s.head_dim;
  std::int64_t p = d * (r_q + r_k) + s.num_heads * dh * r_q + s.num_kv_heads * dh * r_k;
  if (j == QkJunction::Query && r_q >= dh) p -= s.num_heads * dh * dh;
  if (j == QkJunction::Key && r_k >= dh) p -= s.num_kv_heads * dh * dh;
  return p;
}

inline std::int64_t qk_dense_params(const model::AttentionInfo& s) {
  return static_cast<std::int64_t>(s.hidden) * (s.num_heads + s.num_kv_heads) * s.head_dim;
}

inline QkRankPlan plan_qk_ranks(const model::AttentionInfo& s, double ratio, QkJunction j) {
  s.validate("plan_qk_ranks");
  if (!(ratio > 0.0 && ratio < 1.0)) {
    throw ConfigError(fmt::format("plan_qk_ranks: ratio out of range (expected 0 < R < 1, got {})", ratio));
  }
  if (s.rope && j != QkJunction::None) {
    throw ConfigError("plan_qk_ranks: per-head junction is invalid with RoPE (expected junction None)");
  }
  if (j == QkJunction::Query && s.num_heads != s.num_kv_heads) {
    throw ConfigError(fmt::format("plan_qk_ranks: query-side junction needs MHA (expected H_kv = {}, got {})", s.num_heads,
                                  s.num_kv_heads));
  }
  QkRankPlan plan;
  plan.dense_params = qk_dense_params(s);
  const double budget = (1.0 - ratio) * static_cast<double>(plan.dense_params);
  const int rq_max = std::min(s.hidden, s.num_heads * s.head_dim);
  const int rk_max = std::min(s.hidden, s.num_kv_heads * s.head_dim);
  for (int r = std::max(rq_max, rk_max); r >= 1; --r) {
    const int rq = std::min(r, rq_max), rk = std::min(r, rk_max);
    const std::int64_t p = qk_params(s, rq, rk, j);
    if (static_cast<double>(p) <= budget) {
      plan.r_q = rq;
      plan.r_k = rk;
      plan.params = p;
      const bool applies = (j == QkJunction::Query && rq >= s.head_dim) || (j == QkJunction::Key && rk >= s.head_dim);
      plan.junction = applies ? j : QkJunction::None;
      return plan;
    }
  }
  throw ConfigError(fmt::format("plan_qk_ranks: no rank fits the budget (ratio {}, dense {} parameters)", ratio,
                                plan.dense_params));
}

}  // namespace latentllm::compress
