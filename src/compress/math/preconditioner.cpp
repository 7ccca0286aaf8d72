#include "core/enum_names.hpp"
#include "compress/math/preconditioner.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "latentllm/error.hpp"
#include "compress/stages/notes.hpp"
#include "compress/math/whitening.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {

namespace {

// Named as the baseline methods that use them alone (paper Table 1).
constexpr auto kPreconditionerNames = core::enum_names<Preconditioner>(
    core::Named<Preconditioner>{Preconditioner::Identity, "plain-svd"},
    core::Named<Preconditioner>{Preconditioner::DiagHessian, "asvd-hessian"},
    core::Named<Preconditioner>{Preconditioner::DiagL1, "asvd-l1"},
    core::Named<Preconditioner>{Preconditioner::DiagL2, "asvd-l2"},
    core::Named<Preconditioner>{Preconditioner::Covariance, "asvd-cov"},
    core::Named<Preconditioner>{Preconditioner::RootCovariance, "asvd-rootcov"});
constexpr auto kPreconditioners = kPreconditionerNames.values();

// The kept part of a spectrum (or of a diagonal): values ≤ floor_rel · max (and negative round-off)
// count as zero. Returns the kept mask and how many were dropped.
struct Kept {
  std::vector<bool> keep;
  int dropped = 0;
};
Kept keep_above_floor(const VectorD& v, double floor_rel) {
  const double vmax = v.size() > 0 ? std::max(v.maxCoeff(), 0.0) : 0.0;
  Kept k;
  k.keep.resize(static_cast<std::size_t>(v.size()));
  for (Eigen::Index i = 0; i < v.size(); ++i) {
    k.keep[static_cast<std::size_t>(i)] = v(i) > floor_rel * vmax && v(i) > 0.0;
    if (!k.keep[static_cast<std::size_t>(i)]) ++k.dropped;
  }
  return k;
}

void check_options(const LocalOptions& opt, std::string_view context) {
  if (!(opt.lambda_rel >= 0.0 && std::isfinite(opt.lambda_rel))) {
    throw ConfigError(fmt::format("{}: lambda_rel must be finite and ≥ 0 (got {})", context, opt.lambda_rel));
  }
  if (!(opt.alpha > 0.0 && std::isfinite(opt.alpha))) {
    throw ConfigError(fmt::format("{}: alpha must be finite and > 0 (got {})", context, opt.alpha));
  }
  if (!(opt.pinv_floor_rel >= 0.0 && opt.pinv_floor_rel < 1.0)) {
    throw ConfigError(fmt::format("{}: pinv_floor_rel must be in [0, 1) (got {})", context, opt.pinv_floor_rel));
  }
}

// No calibration signal reaches the module (all its inputs zero, or all equal for a centered
// covariance): every factorization has zero activation loss, so P = I (the plain SVD of W) is as good
// as any and well defined.
void set_identity(PreconditionerMatrix& out, Eigen::Index d) {
  out.diag = VectorD::Ones(d);
  out.diag_pinv = VectorD::Ones(d);
  out.dense.resize(0, 0);
  out.dense_pinv.resize(0, 0);
  out.dropped = 0;
}

void note_zero(PreconditionerMatrix& out, Eigen::Index d, std::string_view context, std::string_view what) {
  set_identity(out, d);
  out.zero_fallback = true;
  record_note(context, "zero-covariance", zero_covariance_detail(what));
}

void note_dropped(int dropped, Eigen::Index d, double floor_rel, std::string_view context, std::string_view what) {
  if (dropped == 0) return;
  record_note(context, "pinv-drop",
              fmt::format("{} of {} {} at or below {:g} x the largest (never excited by the calibration data): "
                          "dropped from P and its pseudo-inverse, B·A does not act on them", dropped, d, what,
                          floor_rel));
}

// P = diag(p) with p_i = f(q_i) for the kept q_i (q in "C units"), 0 for the dropped ones.
template <typename Fn>
void set_diagonal(PreconditionerMatrix& out, const VectorD& q, double floor_rel, Fn&& f, std::string_view context,
                  std::string_view what) {
  const Kept k = keep_above_floor(q, floor_rel);
  if (k.dropped == q.size()) return note_zero(out, q.size(), context, what);
  note_dropped(k.dropped, q.size(), floor_rel, context, fmt::format("entries of the {}", what));
  out.diag = VectorD::Zero(q.size());
  out.diag_pinv = VectorD::Zero(q.size());
  for (Eigen::Index i = 0; i < q.size(); ++i) {
    if (!k.keep[static_cast<std::size_t>(i)]) continue;
    out.diag(i) = f(q(i));
    out.diag_pinv(i) = 1.0 / out.diag(i);
  }
  out.dropped = k.dropped;
}

// The damped spectrum of C (whitening.hpp, which records the notes) into `out`; P = I when it is zero.
DampedSpectrum spectrum(PreconditionerMatrix& out, const MatrixD& c, const LocalOptions& opt, std::string_view context) {
  DampedSpectrum e = damped_spectrum(c, opt.lambda_rel, opt.pinv_floor_rel, context);
  out.lambda = e.lambda;
  out.dropped = e.dropped;
  if (e.zero) {
    set_identity(out, c.rows());
    out.zero_fallback = true;
  }
  return e;
}

// diag[(C + λI)⁺]^{-1/2}: h_i = Σ_j V_ij² / w_j over the kept eigenpairs.
void set_diag_hessian(PreconditionerMatrix& out, const MatrixD& c, const LocalOptions& opt, std::string_view context) {
  const DampedSpectrum e = spectrum(out, c, opt, context);
  if (e.zero) return;
  const auto d = c.rows();
  VectorD inv_w = VectorD::Zero(d);
  for (Eigen::Index j = 0; j < d; ++j) {
    if (e.keep[static_cast<std::size_t>(j)]) inv_w(j) = 1.0 / e.eig.values(j);
  }
  const VectorD h = e.eig.vectors.array().square().matrix() * inv_w;  // [d]
  out.diag = VectorD::Zero(d);
  out.diag_pinv = VectorD::Zero(d);
  for (Eigen::Index i = 0; i < d; ++i) {
    if (h(i) <= 0.0) continue;  // feature entirely in the dropped null space
    out.diag_pinv(i) = std::sqrt(h(i));
    out.diag(i) = 1.0 / out.diag_pinv(i);
  }
}

}  // namespace

std::string_view preconditioner_name(Preconditioner p) { return kPreconditionerNames.name(p); }

std::span<const Preconditioner> all_preconditioners() { return kPreconditioners; }

MatrixD PreconditionerMatrix::right_multiply(const MatrixD& w) const {
  if (root.f.size() > 0) return root.times(w);
  return diagonal() ? MatrixD(w * diag.asDiagonal()) : MatrixD(w * dense);
}

MatrixD PreconditionerMatrix::right_multiply_pinv(const MatrixD& m) const {
  if (root.f.size() > 0) return root.times_pinv(m);
  return diagonal() ? MatrixD(m * diag_pinv.asDiagonal()) : MatrixD(m * dense_pinv);
}

MatrixD PreconditionerMatrix::matrix() const {
  if (root.f.size() > 0) return root.f;
  return diagonal() ? MatrixD(diag.asDiagonal()) : dense;
}

MatrixD PreconditionerMatrix::pinv_matrix() const {
  if (root.f.size() > 0) return root.pinv_matrix();
  return diagonal() ? MatrixD(diag_pinv.asDiagonal()) : dense_pinv;
}

PreconditionerMatrix make_preconditioner(Preconditioner kind, const MatrixD& c, const VectorD& abs_mean,
                                         const LocalOptions& opt, std::string_view context) {
  check_options(opt, context);
  const auto d = c.rows();
  if (d < 1 || c.cols() != d) {
    throw ConfigError(fmt::format("{}: input covariance must be square and non-empty (got [{}, {}])", context, d,
                                  c.cols()));
  }
  linalg::check_finite(c, context, "input covariance");
  PreconditionerMatrix out;
  out.kind = kind;
  out.dim = static_cast<int>(d);
  switch (kind) {
    case Preconditioner::Identity:
      out.diag = VectorD::Ones(d);
      out.diag_pinv = VectorD::Ones(d);
      break;
    case Preconditioner::DiagL2:
      set_diagonal(out, c.diagonal(), opt.pinv_floor_rel, [](double q) { return std::sqrt(q); }, context,
                   "input covariance diagonal");
      break;
    case Preconditioner::DiagL1: {
      if (abs_mean.size() != d) {
        throw ConfigError(fmt::format("{}: asvd-l1 needs the mean absolute activation per input feature (expected "
                                      "[{}], got [{}])", context, d, abs_mean.size()));
      }
      linalg::check_finite(abs_mean, context, "mean absolute activation");
      // The floor is in C units (squared activations), so it applies to m² ~ diag C.
      const VectorD m2 = abs_mean.array().square().matrix();
      set_diagonal(out, m2, opt.pinv_floor_rel, [&](double q) { return std::pow(q, 0.5 * opt.alpha); }, context,
                   "mean absolute activation");
      break;
    }
    case Preconditioner::DiagHessian: set_diag_hessian(out, c, opt, context); break;
    case Preconditioner::Covariance: {
      const DampedSpectrum e = spectrum(out, c, opt, context);
      if (e.zero) break;
      out.dense = spectral(e, [](double w) { return w; });
      out.dense_pinv = spectral(e, [](double w) { return 1.0 / w; });
      break;
    }
    case Preconditioner::RootCovariance: {
      Whitening w = whiten(c, opt.lambda_rel, context, opt.pinv_floor_rel);
      out.lambda = w.lambda;
      out.dropped = w.dropped;
      if (w.zero) {
        set_identity(out, d);
        out.zero_fallback = true;
        break;
      }
      out.root = std::move(w);
      break;
    }
  }
  return out;
}

}  // namespace latentllm::compress
