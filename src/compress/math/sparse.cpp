#include "compress/math/sparse.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "compress/math/asvd.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {
namespace {

void check_inputs(const MatrixD& w, const MatrixD& c, const SparseTarget& t, std::string_view context) {
  linalg::check_finite(w, context, "weight");
  linalg::check_finite(c, context, "input covariance");
  if (c.rows() != w.cols() || c.cols() != w.cols()) {
    throw NumericError(fmt::format("{}: covariance (expected [{}, {}], got [{}, {}])", context, w.cols(), w.cols(),
                                   c.rows(), c.cols()));
  }
  if (t.pattern == SparsePattern::TwoFour && w.cols() % 4 != 0) {
    throw ConfigError(fmt::format("{}: --pattern 2:4 (expected input features a multiple of 4, got {})", context,
                                  w.cols()));
  }
}

// Keeps in each row of `score` ([d', d]) the entries not among its p lowest (ties: the higher column is
// pruned first), or with 2:4 the 2 highest of each group of 4; returns the mask (1 kept).
MatrixD row_mask(const MatrixD& score, const SparseTarget& t) {
  const Eigen::Index rows = score.rows(), cols = score.cols();
  MatrixD mask = MatrixD::Ones(rows, cols);  // [d', d]
  const Eigen::Index group = t.pattern == SparsePattern::TwoFour ? 4 : cols;
  const Eigen::Index prune = t.pattern == SparsePattern::TwoFour ? 2 : pruned_per_row(cols, t);
  std::vector<Eigen::Index> idx(static_cast<std::size_t>(group));
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index g = 0; g < cols; g += group) {
      std::iota(idx.begin(), idx.end(), g);
      // Lowest score first; among equal scores the higher column first.
      std::nth_element(idx.begin(), idx.begin() + prune, idx.end(), [&](Eigen::Index a, Eigen::Index b) {
        return score(i, a) != score(i, b) ? score(i, a) < score(i, b) : a > b;
      });
      for (Eigen::Index k = 0; k < prune; ++k) mask(i, idx[static_cast<std::size_t>(k)]) = 0.0;
    }
  return mask;
}

// The largest eigenvalue of C: the Lipschitz constant of the loss's gradient (up to its factor 2).
double lambda_max(const MatrixD& c, std::string_view context) {
  const VectorD ev = linalg::sym_eigvals(c, context);
  if (ev.size() == 0 || !(ev(0) > 0)) {
    throw NumericError(fmt::format("{}: input covariance (expected a positive largest eigenvalue, got {})", context,
                                   ev.size() ? ev(0) : 0.0));
  }
  return ev(0);
}

// Conjugate gradients on the kept entries of D (mask 1), every row its own quadratic
// (w_i − d_i)ᵀ·C·(w_i − d_i) on its support, all rows advanced together by one [d', d]·[d, d] product a
// step. Starts at D, so the loss never rises; stops after `iters` steps or when every row's residual has
// fallen below 1e-12 of its start.
void refit_on_support(const MatrixD& w, const MatrixD& c, const MatrixD& mask, MatrixD& d, int iters) {
  MatrixD r = (((w - d) * c).array() * mask.array()).matrix();  // [d', d] minus half the gradient, on the support
  MatrixD p = r;                                                 // [d', d] search directions
  VectorD rr = r.rowwise().squaredNorm(), rr0 = rr;              // [d']
  for (int k = 0; k < iters; ++k) {
    if ((rr.array() <= 1e-24 * rr0.array()).all()) break;
    const MatrixD q = ((p * c).array() * mask.array()).matrix();  // [d', d] C·p on the support
    const VectorD pq = p.cwiseProduct(q).rowwise().sum();         // [d']
    for (Eigen::Index i = 0; i < d.rows(); ++i) {
      if (!(pq(i) > 0) || rr(i) <= 1e-24 * rr0(i)) continue;  // converged, or no curvature left on the support
      const double alpha = rr(i) / pq(i);
      d.row(i) += alpha * p.row(i);
      r.row(i) -= alpha * q.row(i);
      const double next = r.row(i).squaredNorm();
      p.row(i) = r.row(i) + (next / rr(i)) * p.row(i);
      rr(i) = next;
    }
  }
}

// Soft shrinkage T_θ[x] = sign(x)·(|x| − θ)₊ (sec:spa).
MatrixD soft_shrink(const MatrixD& v, double theta) {
  return v.unaryExpr([theta](double x) { return std::copysign(std::max(std::abs(x) - theta, 0.0), x); });
}

// FISTA (sec:spa) from D₀ = `start` with threshold θ = λ·step: D_k = T_θ[Y_k − (Y_k − W)·C/L],
// t_{k+1} = (1 + √(1 + 4t_k²))/2, Y_{k+1} = D_k + (t_k − 1)/t_{k+1}·(D_k − D_{k−1}), t_1 = 1. The paper
// writes the step and the momentum weight with one symbol μ_k; the step here is 1/L of the Lipschitz
// constant L = λ_max(C) of (D − W)·C, the usual choice that makes each step a descent step.
MatrixD fista_run(const MatrixD& w, const MatrixD& c, double l, double theta, const MatrixD& start, int iters) {
  MatrixD d = start, y = start;  // [d', d]
  double t = 1.0;
  for (int k = 0; k < iters; ++k) {
    MatrixD next = soft_shrink(y - (y - w) * c / l, theta);  // [d', d]
    const double t_next = 0.5 * (1.0 + std::sqrt(1.0 + 4.0 * t * t));
    y = next + ((t - 1.0) / t_next) * (next - d);
    d = std::move(next);
    t = t_next;
  }
  return d;
}

std::int64_t nonzeros(const MatrixD& d) { return (d.array() != 0.0).count(); }

}  // namespace

std::int64_t pruned_per_row(std::int64_t in, const SparseTarget& t) {
  if (t.pattern == SparsePattern::TwoFour) return in / 2;
  return static_cast<std::int64_t>(std::floor(t.sparsity * static_cast<double>(in)));
}

MatrixD hard_shrink(const MatrixD& v, const SparseTarget& t) {
  if (t.pattern == SparsePattern::TwoFour) return (v.array() * row_mask(v.cwiseAbs(), t).array()).matrix();
  const Eigen::Index rows = v.rows(), cols = v.cols();
  const auto keep = static_cast<std::size_t>(rows * (cols - pruned_per_row(cols, t)));
  std::vector<Eigen::Index> idx(static_cast<std::size_t>(rows * cols));
  std::iota(idx.begin(), idx.end(), Eigen::Index{0});
  // Row-major index i·d + j; largest magnitude first, among equal magnitudes the lower index first.
  auto mag = [&](Eigen::Index k) { return std::abs(v(k / cols, k % cols)); };
  if (keep < idx.size()) {
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(keep), idx.end(),
                     [&](Eigen::Index a, Eigen::Index b) { return mag(a) != mag(b) ? mag(a) > mag(b) : a < b; });
  }
  MatrixD out = MatrixD::Zero(rows, cols);  // [d', d]
  for (std::size_t k = 0; k < std::min(keep, idx.size()); ++k) out(idx[k] / cols, idx[k] % cols) = v(idx[k] / cols, idx[k] % cols);
  return out;
}

MatrixD sparse_hard(const MatrixD& w, const MatrixD& c, const SparseTarget& t, int iters, std::string_view context,
                    const MatrixD* start) {
  // [d', d] a feasible start (Wanda's mask, which also checks the inputs, or the given one): the loss
  // only falls from it
  MatrixD d = wanda(w, c, t, context);
  if (start) {
    if (start->rows() != w.rows() || start->cols() != w.cols()) {
      throw Error(fmt::format("{}: sparse start (expected [{}, {}], got [{}, {}])", context, w.rows(), w.cols(),
                                    start->rows(), start->cols()));
    }
    d = *start;
  }
  const double l = lambda_max(c, context);
  double loss = sparse_loss(w, d, c);
  for (int k = 0; k < iters; ++k) {
    MatrixD next = hard_shrink(d - (d - w) * c / l, t);  // [d', d]
    const double next_loss = sparse_loss(w, next, c);
    // Step 1/L majorises the loss, so it cannot rise but by rounding; stop when it no longer falls.
    if (!(next_loss < loss)) break;
    const bool settled = loss - next_loss <= 1e-12 * loss;
    d = std::move(next);
    loss = next_loss;
    if (settled) break;
  }
  const MatrixD mask = (d.array() != 0.0).cast<double>().matrix();  // [d', d]
  refit_on_support(w, c, mask, d, iters);
  linalg::check_finite(d, context, "sparse weight");
  return d;
}

MatrixD sparse_fista(const MatrixD& w, const MatrixD& c, const SparseTarget& t, int iters, std::string_view context) {
  check_inputs(w, c, t, context);
  if (t.pattern != SparsePattern::Unstructured) {
    throw ConfigError(fmt::format("{}: --solver fista: pattern (expected --pattern unstructured: its threshold sets "
                                  "the sparsity, got --pattern {})", context, sparse_pattern_name(t.pattern)));
  }
  const double l = lambda_max(c, context);
  const auto keep = w.rows() * (w.cols() - pruned_per_row(w.cols(), t));
  // D = 0 is FISTA's fixed point once θ ≥ max|W·C|/L, the size of the first step from 0.
  double hi = (w * c).cwiseAbs().maxCoeff() / l, lo = hi * 1e-9;
  MatrixD best = MatrixD::Zero(w.rows(), w.cols()), start = w;  // [d', d] each
  // Bisection on log θ, each run warm-started from the last: the smallest θ found keeping ≤ κ entries.
  for (int step = 0; step < 40 && hi > 0; ++step) {
    const double theta = std::sqrt(lo * hi);
    MatrixD d = fista_run(w, c, l, theta, start, iters);  // [d', d]
    if (nonzeros(d) <= keep) {
      hi = theta;
      best = d;
      if (nonzeros(d) == keep) break;
    } else {
      lo = theta;
    }
    start = std::move(d);
  }
  linalg::check_finite(best, context, "sparse weight");
  return best;
}

MatrixD wanda(const MatrixD& w, const MatrixD& c, const SparseTarget& t, std::string_view context) {
  check_inputs(w, c, t, context);
  const VectorD norm = c.diagonal().cwiseMax(0.0).cwiseSqrt();  // [d] ‖X_j‖₂
  const MatrixD score = w.cwiseAbs() * norm.asDiagonal();        // [d', d]
  return (w.array() * row_mask(score, t).array()).matrix();
}

MatrixD sparsegpt(const MatrixD& w0, const MatrixD& c, const SparseTarget& t, double lambda_rel,
                  std::string_view context) {
  check_inputs(w0, c, t, context);
  const Eigen::Index rows = w0.rows(), cols = w0.cols(), block = 128;
  MatrixD w = w0, h = c;  // [d', d], [d, d]
  // Dead inputs (never excited): their weights are pruned for free and H stays invertible.
  for (Eigen::Index j = 0; j < cols; ++j)
    if (h(j, j) == 0) {
      h(j, j) = 1;
      w.col(j).setZero();
    }
  h.diagonal().array() += lambda_rel * h.diagonal().mean();
  const std::optional<MatrixD> u = linalg::inverse_cholesky_upper(std::move(h), context);  // [d, d] H⁻¹ = Uᵀ·U
  if (!u) throw NumericError(fmt::format("{}: damped input covariance (expected positive definite, got a failed "
                                         "Cholesky factorisation; raise --lambda)", context));
  MatrixD q = MatrixD::Zero(rows, cols);  // [d', d] the pruned result
  for (Eigen::Index i1 = 0; i1 < cols; i1 += block) {
    const Eigen::Index n = std::min(block, cols - i1);
    MatrixD w1 = w.middleCols(i1, n), err = MatrixD::Zero(rows, n);  // [d', n]
    const MatrixD u1 = u->block(i1, i1, n, n);                       // [n, n]
    MatrixD mask = MatrixD::Ones(rows, n);                           // [d', n] 1 kept
    if (t.pattern == SparsePattern::Unstructured) {
      // The block's k = ⌊sparsity·d'·n⌋ lowest scores w²/U_jj² over all its rows (sparsegpt.py).
      const MatrixD score = w1.cwiseAbs2() * u1.diagonal().cwiseAbs2().cwiseInverse().asDiagonal();
      std::vector<Eigen::Index> idx(static_cast<std::size_t>(rows * n));
      std::iota(idx.begin(), idx.end(), Eigen::Index{0});
      const auto k = static_cast<std::ptrdiff_t>(std::floor(t.sparsity * static_cast<double>(rows * n)));
      auto s = [&](Eigen::Index x) { return score(x / n, x % n); };
      std::nth_element(idx.begin(), idx.begin() + k, idx.end(),
                       [&](Eigen::Index a, Eigen::Index b) { return s(a) != s(b) ? s(a) < s(b) : a > b; });
      for (std::ptrdiff_t x = 0; x < k; ++x) mask(idx[static_cast<std::size_t>(x)] / n, idx[static_cast<std::size_t>(x)] % n) = 0;
    }
    for (Eigen::Index i = 0; i < n; ++i) {
      if (t.pattern == SparsePattern::TwoFour && i % 4 == 0) {
        // The 2 lowest scores of the group of 4 it starts, on the weights as updated so far.
        const MatrixD score = w1.middleCols(i, 4).cwiseAbs2() *
                              u1.diagonal().segment(i, 4).cwiseAbs2().cwiseInverse().asDiagonal();  // [d', 4]
        mask.middleCols(i, 4) = row_mask(score, {0.5, SparsePattern::TwoFour});
      }
      const VectorD col = w1.col(i);                                // [d']
      const VectorD kept = col.cwiseProduct(mask.col(i));          // [d']
      q.col(i1 + i) = kept;
      err.col(i) = (col - kept) / u1(i, i);
      // The pruned weights' error onto this block's later columns (OBS update through row i of U).
      w1.rightCols(n - i) -= err.col(i) * u1.row(i).tail(n - i);
    }
    if (i1 + n < cols) w.rightCols(cols - i1 - n) -= err * u->block(i1, i1 + n, n, cols - i1 - n);
  }
  linalg::check_finite(q, context, "sparse weight");
  return q;
}

double sparse_loss(const MatrixD& w, const MatrixD& d, const MatrixD& c) { return activation_loss(w - d, c); }

}  // namespace latentllm::compress
