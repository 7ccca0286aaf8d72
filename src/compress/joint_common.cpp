#include "compress/joint_common.hpp"

#include <algorithm>
#include <cmath>

#include "compress/notes.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {

VectorD InputMoments::mean() const { return n > 0 ? VectorD(sum / n) : VectorD::Zero(sum.size()); }

MatrixD InputMoments::centered() const {
  if (n <= 0) return xtx;
  return xtx - (sum * sum.transpose()) / n;
}

MatrixD InputMoments::augmented() const {
  const auto d = xtx.rows();
  MatrixD c(d + 1, d + 1);  // [d+1, d+1]
  c.topLeftCorner(d, d) = xtx;
  c.topRightCorner(d, 1) = sum;
  c.bottomLeftCorner(1, d) = sum.transpose();
  c(d, d) = n;
  return c;
}

InputMoments moments_of(const MatrixD& x) {
  InputMoments m;
  m.xtx = linalg::gram_rows(x.transpose());  // [d, d]
  m.sum = x.colwise().sum().transpose();
  m.n = static_cast<double>(x.rows());
  return m;
}

double damping(const MatrixD& c, double lambda_rel) {
  if (c.rows() == 0) return 0.0;
  return lambda_rel * c.diagonal().mean();
}

RootCov root_cov(const MatrixD& c, double lambda_rel, std::string_view context) {
  const auto d = c.rows();
  MatrixD s = c;
  s.diagonal().array() += damping(c, lambda_rel);
  const linalg::SymEig e = linalg::sym_eig(s, context);
  const double wmax = d > 0 ? std::max(e.values(0), 0.0) : 0.0;
  RootCov out;
  if (d > 0 && wmax <= 0.0) {
    // No signal: every map has zero loss on these inputs; P = I keeps the solvers well defined.
    record_note(context, "zero-covariance", zero_covariance_detail("input covariance"));
    out.p = out.p_inv = MatrixD::Identity(d, d);
    return out;
  }
  constexpr double kFloorRel = 1e-12;  // as linalg::sym_power's pseudo-inverse floor
  VectorD half(d), inv_half(d);
  int clamped = 0;
  for (Eigen::Index i = 0; i < d; ++i) {
    // P keeps the (non-negative part of the) spectrum; P⁻¹ clamps eigenvalues below the floor to it,
    // so it stays finite on directions the calibration never excited.
    const double w = std::max(e.values(i), 0.0);
    half(i) = std::sqrt(w);
    if (w < kFloorRel * wmax) ++clamped;
    inv_half(i) = 1.0 / std::sqrt(std::max(w, kFloorRel * wmax));
  }
  if (clamped > 0) {
    record_note(context, "eigenvalue-clamp",
                fmt::format("{} of {} eigenvalues of C + λI below {:g} x the largest (never excited by the "
                            "calibration data) clamped to that floor in P⁻¹", clamped, d, kFloorRel));
  }
  out.p = e.vectors * half.asDiagonal() * e.vectors.transpose();
  out.p_inv = e.vectors * inv_half.asDiagonal() * e.vectors.transpose();
  return out;
}

MatrixD with_bias_column(const MatrixD& w, const VectorD& b) {
  MatrixD a(w.rows(), w.cols() + 1);
  a.leftCols(w.cols()) = w;
  a.col(w.cols()) = b.size() > 0 ? b : VectorD::Zero(w.rows());
  return a;
}

MatrixD augmented_dense(const LowRank& f) { return with_bias_column(f.dense(), f.bias); }

namespace {

void check_rank(int r, Eigen::Index rows, Eigen::Index cols, std::string_view context) {
  const auto k = std::min(rows, cols);
  if (r < 1 || r > k) {
    throw ConfigError(fmt::format("{}: rank out of range (expected 1..{}, got {})", context, k, r));
  }
}

}  // namespace

LowRank local_rootcov(const MatrixD& w, const VectorD& bias, const InputMoments& m, int r, double lambda_rel,
                      std::string_view context) {
  check_rank(r, w.rows(), w.cols(), context);
  const bool has_bias = bias.size() > 0;
  const RootCov pc = root_cov(has_bias ? m.centered() : m.xtx, lambda_rel, context);
  const linalg::Svd s = linalg::svd(w * pc.p, context);  // W·P = U·S·Vᵀ
  LowRank out;
  out.b = s.u.leftCols(r) * s.s.head(r).asDiagonal();   // [out, r]
  out.a = s.v.leftCols(r).transpose() * pc.p_inv;        // [r, in]
  if (has_bias) out.bias = bias + (w - out.b * out.a) * m.mean();
  return out;
}

RegressionStats regression_stats(const MatrixD& s, const MatrixD& t) {
  RegressionStats st;
  st.cross = t * s.transpose();  // [out, in]
  st.cov = linalg::gram_rows(s);  // [in, in]
  st.sum_s = s.rowwise().sum();
  st.sum_t = t.rowwise().sum();
  st.n = static_cast<double>(s.cols());
  return st;
}

LowRank reduced_rank_regression(const RegressionStats& st, int r, bool fit_bias, double lambda_rel,
                                std::string_view context) {
  check_rank(r, st.cross.rows(), st.cross.cols(), context);
  MatrixD cov = st.cov, cross = st.cross;
  VectorD mu_s, mu_t;
  if (fit_bias) {
    mu_s = st.sum_s / st.n;
    mu_t = st.sum_t / st.n;
    cov -= st.n * mu_s * mu_s.transpose();
    cross -= st.n * mu_t * mu_s.transpose();
  }
  const RootCov pc = root_cov(cov, lambda_rel, context);
  const linalg::Svd s = linalg::svd(cross * pc.p_inv, context);
  LowRank out;
  out.b = s.u.leftCols(r) * s.s.head(r).asDiagonal();  // [out, r]
  out.a = s.v.leftCols(r).transpose() * pc.p_inv;       // [r, in]
  if (fit_bias) out.bias = mu_t - out.b * (out.a * mu_s);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Paired-subspace solver.

namespace {

// mid·x, with an empty mid meaning the identity.
MatrixD apply_mid(const MatrixD& mid, const MatrixD& x) { return mid.size() == 0 ? x : MatrixD(mid * x); }
MatrixD apply_mid_t(const MatrixD& mid, const MatrixD& x) {
  return mid.size() == 0 ? x : MatrixD(mid.transpose() * x);
}

// Σ over groups of F[j]ᵀ·inner[j]·F[j] where inner[j] = Σ_{terms of j} w·M·Mᵀ.
MatrixD grouped_gram(const std::vector<MatrixD>& factors, const std::vector<MatrixD>& inner, Eigen::Index dim) {
  MatrixD s = MatrixD::Zero(dim, dim);
  for (std::size_t j = 0; j < factors.size(); ++j) {
    if (inner[j].size() == 0) continue;
    const MatrixD t = inner[j] * factors[j];  // [k, dim]
    s.noalias() += factors[j].transpose() * t;
  }
  return s;
}

Eigen::Index left_dim(const PairProblem& p) { return p.left.empty() ? 0 : p.left[0].cols(); }
Eigen::Index right_dim(const PairProblem& p) { return p.right.empty() ? 0 : p.right[0].cols(); }

}  // namespace

double pair_total(const PairProblem& p) {
  std::vector<MatrixD> lg(p.left.size()), rg(p.right.size());
  for (std::size_t i = 0; i < p.left.size(); ++i) lg[i] = p.left[i] * p.left[i].transpose();     // [k, k]
  for (std::size_t g = 0; g < p.right.size(); ++g) rg[g] = p.right[g] * p.right[g].transpose();  // [k, k]
  double total = p.total_offset;
  for (const PairTerm& t : p.terms) {
    // ‖Lᵀ·mid·R‖² = tr(L Lᵀ · mid R Rᵀ midᵀ)
    const MatrixD m = apply_mid(t.mid, apply_mid(t.mid, rg[t.right]).transpose());  // mid·R Rᵀ·midᵀ
    total += t.weight * (lg[t.left].cwiseProduct(m)).sum();
  }
  return total;
}

double pair_objective(const PairProblem& p, const MatrixD& u_l, const MatrixD& u_r) {
  std::vector<MatrixD> nl(p.left.size()), nr(p.right.size());
  for (std::size_t i = 0; i < p.left.size(); ++i) nl[i] = p.left[i] * u_l;    // [k, r_l]
  for (std::size_t g = 0; g < p.right.size(); ++g) nr[g] = p.right[g] * u_r;  // [k, r_r]
  double j = 0;
  for (const PairTerm& t : p.terms) j += t.weight * (nl[t.left].transpose() * apply_mid(t.mid, nr[t.right])).squaredNorm();
  if (p.left_offset.size() > 0) j += (u_l.transpose() * p.left_offset * u_l).trace();
  return j;
}

MatrixD pair_left_gram(const PairProblem& p, const MatrixD& u_r) {
  std::vector<MatrixD> nr(p.right.size());
  for (std::size_t g = 0; g < p.right.size(); ++g) nr[g] = u_r.size() == 0 ? p.right[g] : MatrixD(p.right[g] * u_r);
  std::vector<MatrixD> inner(p.left.size());
  for (const PairTerm& t : p.terms) {
    const MatrixD m = apply_mid(t.mid, nr[t.right]);  // [k, r_r]
    MatrixD mm = t.weight * (m * m.transpose());      // [k, k]
    if (inner[t.left].size() == 0) inner[t.left] = std::move(mm);
    else inner[t.left] += mm;
  }
  MatrixD s = grouped_gram(p.left, inner, left_dim(p));
  if (p.left_offset.size() > 0) s += p.left_offset;
  return s;
}

MatrixD pair_right_gram(const PairProblem& p, const MatrixD& u_l) {
  std::vector<MatrixD> nl(p.left.size());
  for (std::size_t i = 0; i < p.left.size(); ++i) nl[i] = u_l.size() == 0 ? p.left[i] : MatrixD(p.left[i] * u_l);
  std::vector<MatrixD> inner(p.right.size());
  for (const PairTerm& t : p.terms) {
    const MatrixD m = apply_mid_t(t.mid, nl[t.left]);  // [k, r_l]
    MatrixD mm = t.weight * (m * m.transpose());       // [k, k]
    if (inner[t.right].size() == 0) inner[t.right] = std::move(mm);
    else inner[t.right] += mm;
  }
  return grouped_gram(p.right, inner, right_dim(p));
}

MatrixD top_eigenvectors(const MatrixD& s, int r, std::string_view context) {
  if (r < 1 || r > s.rows()) {
    throw ConfigError(fmt::format("{}: rank out of range (expected 1..{}, got {})", context, s.rows(), r));
  }
  return linalg::sym_eig(s, context).vectors.leftCols(r);
}

PairSolution refine_pair(const PairProblem& p, MatrixD u_l, MatrixD u_r, int iters, std::string_view context) {
  const double total = pair_total(p);
  PairSolution out;
  out.loss.push_back(total - pair_objective(p, u_l, u_r));
  for (int it = 0; it < iters; ++it) {
    // Each step is the exact maximizer of J over one block (Ky Fan), so J never decreases.
    u_r = top_eigenvectors(pair_right_gram(p, u_l), static_cast<int>(u_r.cols()), context);
    u_l = top_eigenvectors(pair_left_gram(p, u_r), static_cast<int>(u_l.cols()), context);
    out.loss.push_back(total - pair_objective(p, u_l, u_r));
  }
  out.u_l = std::move(u_l);
  out.u_r = std::move(u_r);
  return out;
}

PairSolution solve_pair(const PairProblem& p, int r_l, int r_r, int iters, std::string_view context) {
  // Algorithm 1's initialization: U_l from Σ G Gᵀ, U_r from Σ GᵀG.
  MatrixD u_l = top_eigenvectors(pair_left_gram(p, MatrixD()), r_l, context);
  MatrixD u_r = top_eigenvectors(pair_right_gram(p, MatrixD()), r_r, context);
  return refine_pair(p, std::move(u_l), std::move(u_r), iters, context);
}

}  // namespace latentllm::compress
