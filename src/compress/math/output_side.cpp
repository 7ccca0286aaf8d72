#include "compress/math/output_side.hpp"

#include <algorithm>
#include <cmath>

#include "compress/math/asvd.hpp"
#include "compress/math/bias.hpp"
#include "compress/math/junction.hpp"
#include "compress/stages/notes.hpp"
#include "compress/math/whitening.hpp"
#include "core/gemm.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {

bool output_side_cheaper(std::int64_t out, std::int64_t in) {
  return static_cast<double>(out) < (std::sqrt(2.0) - 1.0) * static_cast<double>(in);
}

bool local_output_side(const CompressOptions& o, std::int64_t out, std::int64_t in) {
  return o.output_side && preconditioner_of(o.method) == Preconditioner::RootCovariance && o.local.lambda_rel > 0 &&
         o.pipeline.covariance_f32 && output_side_cheaper(out, in);
}

double OutputStats::add(const MatrixF& w, const MatrixF& x, std::int64_t first_token) {
  const Eigen::Index d = w.cols(), dout = w.rows(), n = x.rows();
  if (x.cols() != d || (in_ > 0 && in_ != d)) {
    throw Error(fmt::format("output statistics: input width (expected {}, got {})", in_ > 0 ? in_ : d, x.cols()));
  }
  if (in_ == 0) {
    in_ = d;
    y_.reset(static_cast<int>(dout));
    x_sum_ = VectorD::Zero(d);
    x_exact_.resize(static_cast<std::size_t>(d) + 1);
  }
  VectorD x_sum = VectorD::Zero(d);  // [d] this batch's Σ x, added exactly below
  double x_sq = 0;
  constexpr Eigen::Index kRows = 1024;  // tokens per block: a [1024, d'] float output at a time
  MatrixF y(std::min(kRows, n), dout);  // [rows, d'] row-major
  for (Eigen::Index r0 = 0; r0 < n; r0 += kRows) {
    const Eigen::Index rows = std::min(kRows, n - r0);
    if (rows != y.rows()) y.resize(rows, dout);
    core::sgemm_rm(false, true, static_cast<int>(rows), static_cast<int>(dout), static_cast<int>(d), 1.0f,
                   x.data() + r0 * d, static_cast<int>(d), w.data(), static_cast<int>(d), 0.0f, y.data(),
                   static_cast<int>(dout));
    y_.add_upper(y, first_token + r0, /*f32_products=*/true);
    const auto xb = x.middleRows(r0, rows);  // [rows, d]
    x_sum += xb.colwise().sum().transpose().cast<double>();
    x_sq += static_cast<double>(xb.squaredNorm());
  }
  x_exact_.add(std::span<const double>(x_sum.data(), static_cast<std::size_t>(d)), 0, "output statistics");
  x_exact_.add(std::span<const double>(&x_sq, 1), static_cast<std::size_t>(d), "output statistics");
  const double rows = static_cast<double>(n);
  return 2.0 * rows * static_cast<double>(d) * static_cast<double>(dout) +
         rows * static_cast<double>(dout) * static_cast<double>(dout + 1);
}

void OutputStats::finish() {
  y_.symmetrize();
  if (x_exact_.size() == 0) return;
  x_exact_.read(std::span<double>(x_sum_.data(), static_cast<std::size_t>(in_)), 0);
  x_exact_.read(std::span<double>(&x_sq_, 1), static_cast<std::size_t>(in_));
}

void OutputStats::finish_ranks() {
  x_exact_.sum_ranks();
  y_.combine_ranks();
  finish();
}

double OutputStats::input_trace(bool centered) const {
  if (!centered || y_.n == 0) return x_sq_;
  return std::max(0.0, x_sq_ - x_sum_.squaredNorm() / static_cast<double>(y_.n));
}

double OutputStats::damping(bool centered, double lambda_rel) const {
  return in_ > 0 ? lambda_rel * input_trace(centered) / static_cast<double>(in_) : 0.0;
}

MatrixD OutputStats::output_gram(bool centered) const { return centered ? y_.centered() : y_.xtx; }

const OutputStats& LayerOutputs::finished(const std::string& name) {
  const auto it = modules_.find(name);
  if (it == modules_.end()) throw Error(fmt::format("{}: no outputs gathered for the output-side fit", name));
  it->second.finish_ranks();
  return it->second;
}

MatrixD damped_output_gram(const OutputStats& s, const MatrixF& w, bool centered, double lambda_rel) {
  MatrixD g = s.output_gram(centered);  // [d', d']
  const double lambda = s.damping(centered, lambda_rel);
  if (lambda > 0) {
    calib::SiteStats ws;  // W·Wᵀ = Σ over W's columns: the rows of Wᵀ
    ws.reset(static_cast<int>(w.rows()));
    ws.add_upper(MatrixF(w.transpose()), 0, true);
    ws.symmetrize();
    g += lambda * ws.xtx;
  }
  return g;
}

namespace {

// Σ ‖W·x + b‖² = tr(W·C·Wᵀ) + 2·bᵀ·W·Σx + n·‖b‖² (uncentered C).
double output_energy(const OutputStats& s, const VectorD& bias) {
  const calib::SiteStats& y = s.outputs();
  double e = y.xtx.trace();
  if (bias.size() > 0) e += 2.0 * bias.dot(y.sum) + static_cast<double>(y.n) * bias.squaredNorm();
  return e;
}

}  // namespace

OutputSideFit output_side_asvd(const MatrixD& w, const MatrixF& w_f32, const VectorD& bias, const OutputStats& s,
                               int rank, const LocalOptions& opt, std::string_view context) {
  check_rank(rank, w.rows(), w.cols(), context);
  if (w_f32.rows() != w.rows() || w_f32.cols() != w.cols() || s.outputs().width() != w.rows()) {
    throw Error(fmt::format("{}: output-side fit (expected a [{}, {}] weight and its outputs' statistics, got [{}, {}] "
                            "and width {})", context, w.rows(), w.cols(), w_f32.rows(), w_f32.cols(),
                            s.outputs().width()));
  }
  linalg::check_finite(w, context, "weight");
  const bool centered = bias.size() != 0 && opt.update_bias;
  const double trace = s.input_trace(centered);
  OutputSideFit out;
  out.energy = output_energy(s, bias);
  if (!(trace > 0)) {
    // No input energy: as the input side's spectral route (P = I, whitening.hpp), the plain SVD of W;
    // every factorization has zero loss.
    record_note(context, "zero-covariance", zero_covariance_detail("C + λI"));
    const linalg::Svd svd = linalg::svd_leading(w, rank, context);
    out.f = apply_junction(svd.u, svd.s, svd.v.transpose(), opt.junction, context);
    out.f.bias = bias;
    return out;
  }
  const double lambda = s.damping(centered, opt.lambda_rel);
  if (!(lambda > kPinvFloorRel * (trace + lambda * static_cast<double>(w.cols())))) {
    throw Error(fmt::format("{}: output-side fit without damping (expected lambda > 0, got {}): the input side "
                            "decides which directions to drop", context, lambda));
  }
  const linalg::SymEig e = linalg::sym_eig(damped_output_gram(s, w_f32, centered, opt.lambda_rel), context);
  const MatrixD u = e.vectors.leftCols(rank);                       // [d', r]  U_r
  const VectorD sv = e.values.head(rank).cwiseMax(0.0).cwiseSqrt();  // [r]      S_r
  MatrixD m = u.transpose() * w;                                     // [r, d]   S_r·V_rᵀ·F⁻¹ = U_rᵀ·W
  for (int i = 0; i < rank; ++i) {
    if (sv(i) > 0) m.row(i) /= sv(i);
    else m.row(i).setZero();  // W has rank < r: as svd_leading, a zero triplet
  }
  out.f = apply_junction(u, sv, m, opt.junction, context);
  const MatrixD g0 = s.output_gram(centered);  // [d', d']
  out.loss = std::max(0.0, g0.trace() - (u.transpose() * g0 * u).trace());
  if (centered) {
    const VectorD wm = s.output_mean();  // W·μ
    out.f.bias = bias + wm - u * (u.transpose() * wm);
  } else {
    out.f.bias = bias;
  }
  linalg::check_finite(out.f.B, context, "decompression factor");
  return out;
}

}  // namespace latentllm::compress
