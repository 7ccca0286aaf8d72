#include "linalg/linalg.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>

#include "latentllm/error.hpp"

namespace latentllm::linalg {

void check_finite(const MatrixD& m, std::string_view context, std::string_view what) {
  if (!m.allFinite()) throw NumericError(fmt::format("{}: {} contains a non-finite value", context, what));
}

SymEig sym_eig(const MatrixD& s, std::string_view context) {
  const auto d = s.rows();
  if (s.cols() != d) {
    throw NumericError(fmt::format("{}: sym_eig needs a square matrix (got [{}, {}])", context, d, s.cols()));
  }
  check_finite(s, context, "symmetric matrix");
  SymEig out;
  out.vectors = s;
  VectorD w(d);
  if (d > 0) {
    const lapack_int info = LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'L', static_cast<lapack_int>(d),
                                           out.vectors.data(), static_cast<lapack_int>(d), w.data());
    if (info != 0) {
      throw NumericError(fmt::format("{}: eigendecomposition failed (LAPACK dsyevd info {})", context, info));
    }
  }
  out.values = w.reverse();
  out.vectors = out.vectors.rowwise().reverse().eval();
  return out;
}

VectorD sym_eigvals(const MatrixD& s, std::string_view context) {
  const auto d = s.rows();
  if (s.cols() != d) {
    throw NumericError(fmt::format("{}: sym_eigvals needs a square matrix (got [{}, {}])", context, d, s.cols()));
  }
  check_finite(s, context, "symmetric matrix");
  MatrixD a = s;
  VectorD w(d);
  if (d > 0) {
    const lapack_int info = LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'N', 'L', static_cast<lapack_int>(d), a.data(),
                                           static_cast<lapack_int>(d), w.data());
    if (info != 0) {
      throw NumericError(fmt::format("{}: eigenvalues failed (LAPACK dsyevd info {})", context, info));
    }
  }
  return w.reverse();
}

Svd svd(const MatrixD& m, std::string_view context) {
  check_finite(m, context, "matrix");
  const auto rows = m.rows(), cols = m.cols();
  const auto k = std::min(rows, cols);
  Svd out;
  out.u.resize(rows, k);
  out.s.resize(k);
  MatrixD vt(k, cols);
  if (k > 0) {
    MatrixD a = m;
    const lapack_int info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'S', static_cast<lapack_int>(rows),
                                           static_cast<lapack_int>(cols), a.data(), static_cast<lapack_int>(rows),
                                           out.s.data(), out.u.data(), static_cast<lapack_int>(rows), vt.data(),
                                           static_cast<lapack_int>(k));
    if (info != 0) throw NumericError(fmt::format("{}: SVD failed (LAPACK dgesdd info {})", context, info));
  }
  out.v = vt.transpose();
  return out;
}

Svd svd_leading(const MatrixD& m, int r, std::string_view context) {
  check_finite(m, context, "matrix");
  const auto rows = m.rows(), cols = m.cols();
  if (r < 0 || r > std::min(rows, cols)) {
    throw NumericError(fmt::format("{}: leading SVD rank (expected 0..{}, got {})", context, std::min(rows, cols), r));
  }
  const bool wide = rows <= cols;
  const SymEig e = sym_eig(wide ? gram_rows(m) : gram_rows(m.transpose()), context);  // [k, k]
  Svd out;
  out.s = e.values.head(r).cwiseMax(0.0).cwiseSqrt();
  MatrixD near = e.vectors.leftCols(r);                 // U_r (wide) or V_r
  MatrixD far = wide ? MatrixD(m.transpose() * near) : MatrixD(m * near);  // M^T·U_r or M·V_r
  for (int i = 0; i < r; ++i) {
    if (out.s(i) > 0) far.col(i) /= out.s(i);
    else far.col(i).setZero();
  }
  out.u = wide ? std::move(near) : std::move(far);
  out.v = wide ? std::move(far) : std::move(near);
  return out;
}

PivotedQr pivoted_qr(const MatrixD& m, std::string_view context) {
  check_finite(m, context, "matrix");
  const auto rows = m.rows(), cols = m.cols();
  const auto k = std::min(rows, cols);
  PivotedQr out;
  MatrixD a = m;
  std::vector<lapack_int> jpvt(static_cast<std::size_t>(cols), 0);  // 0 = free column
  VectorD tau(k);
  if (k > 0) {
    const lapack_int info = LAPACKE_dgeqp3(LAPACK_COL_MAJOR, static_cast<lapack_int>(rows),
                                           static_cast<lapack_int>(cols), a.data(), static_cast<lapack_int>(rows),
                                           jpvt.data(), tau.data());
    if (info != 0) throw NumericError(fmt::format("{}: pivoted QR failed (LAPACK dgeqp3 info {})", context, info));
  } else {
    for (Eigen::Index j = 0; j < cols; ++j) jpvt[static_cast<std::size_t>(j)] = static_cast<lapack_int>(j + 1);
  }
  out.r = a.topRows(k).triangularView<Eigen::Upper>();
  out.perm.resize(static_cast<std::size_t>(cols));
  for (std::size_t j = 0; j < jpvt.size(); ++j) out.perm[j] = static_cast<int>(jpvt[j] - 1);  // LAPACK is 1-based
  return out;
}

std::optional<MatrixD> cholesky(const MatrixD& s, std::string_view context) {
  const auto d = s.rows();
  if (s.cols() != d) {
    throw NumericError(fmt::format("{}: cholesky needs a square matrix (got [{}, {}])", context, d, s.cols()));
  }
  check_finite(s, context, "symmetric matrix");
  MatrixD l = s;
  if (d > 0) {
    const lapack_int info =
        LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', static_cast<lapack_int>(d), l.data(), static_cast<lapack_int>(d));
    if (info < 0) {
      throw NumericError(fmt::format("{}: Cholesky factorization failed (LAPACK dpotrf info {})", context, info));
    }
    if (info > 0) return std::nullopt;  // the leading minor of order info is not positive
  }
  l.triangularView<Eigen::StrictlyUpper>().setZero();
  return l;
}

std::optional<MatrixD> inverse_cholesky_upper(MatrixD s, std::string_view context) {
  const auto d = s.rows();
  if (s.cols() != d) {
    throw NumericError(fmt::format("{}: cholesky needs a square matrix (got [{}, {}])", context, d, s.cols()));
  }
  MatrixD u = std::move(s);  // [d, d] factored in place; only its upper triangle is read
  u.triangularView<Eigen::StrictlyLower>().setZero();
  check_finite(u, context, "symmetric matrix");
  if (d == 0) return u;
  const auto n = static_cast<lapack_int>(d);
  lapack_int info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', n, u.data(), n);
  if (info < 0) {
    throw NumericError(fmt::format("{}: Cholesky factorization failed (LAPACK dpotrf info {})", context, info));
  }
  if (info > 0) return std::nullopt;  // the leading minor of order info is not positive
  info = LAPACKE_dpotri(LAPACK_COL_MAJOR, 'U', n, u.data(), n);
  if (info != 0) {
    throw NumericError(
        fmt::format("{}: inverse from the Cholesky factor failed (LAPACK dpotri info {})", context, info));
  }
  info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', n, u.data(), n);
  if (info != 0) {
    throw NumericError(
        fmt::format("{}: Cholesky factorization of the inverse failed (LAPACK dpotrf info {})", context, info));
  }
  u.triangularView<Eigen::StrictlyLower>().setZero();
  return u;
}

namespace {

void check_lower(const MatrixD& m, const MatrixD& l, std::string_view what) {
  if (l.rows() != l.cols() || m.cols() != l.rows()) {
    throw NumericError(fmt::format("{}: shapes disagree (expected M [k, {}] and L [{}, {}], got M [{}, {}] and L "
                                   "[{}, {}])", what, l.rows(), l.rows(), l.rows(), m.rows(), m.cols(), l.rows(),
                                   l.cols()));
  }
}

}  // namespace

MatrixD times_lower(const MatrixD& m, const MatrixD& l) {
  check_lower(m, l, "times_lower");
  MatrixD out = m;
  if (out.size() == 0) return out;
  cblas_dtrmm(CblasColMajor, CblasRight, CblasLower, CblasNoTrans, CblasNonUnit, static_cast<blasint>(m.rows()),
              static_cast<blasint>(m.cols()), 1.0, l.data(), static_cast<blasint>(l.rows()), out.data(),
              static_cast<blasint>(out.rows()));
  return out;
}

MatrixD solve_lower_right(const MatrixD& m, const MatrixD& l, bool transposed) {
  check_lower(m, l, "solve_lower_right");
  MatrixD out = m;
  if (out.size() == 0) return out;
  cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, transposed ? CblasTrans : CblasNoTrans, CblasNonUnit,
              static_cast<blasint>(m.rows()), static_cast<blasint>(m.cols()), 1.0, l.data(),
              static_cast<blasint>(l.rows()), out.data(), static_cast<blasint>(out.rows()));
  return out;
}

MatrixD sym_power(const MatrixD& s, double power, std::string_view context, double floor_rel) {
  const SymEig e = sym_eig(s, context);
  const double wmax = e.values.size() > 0 ? std::max(e.values(0), 0.0) : 0.0;
  VectorD f(e.values.size());
  for (Eigen::Index i = 0; i < f.size(); ++i) {
    double w = std::max(e.values(i), 0.0);
    if (power < 0) w = std::max(w, floor_rel * wmax);
    f(i) = (w == 0.0) ? 0.0 : std::pow(w, power);
  }
  return e.vectors * f.asDiagonal() * e.vectors.transpose();
}

MatrixD gram_rows(const MatrixD& x) {
  MatrixD g = MatrixD::Zero(x.rows(), x.rows());
  g.selfadjointView<Eigen::Lower>().rankUpdate(x);
  g.triangularView<Eigen::StrictlyUpper>() = g.transpose();
  return g;
}

}  // namespace latentllm::linalg
