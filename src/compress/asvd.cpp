#include "compress/asvd.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include <Eigen/LU>

#include "compress/notes.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {

namespace {

constexpr std::array<Junction, 4> kJunctions = {Junction::Identity, Junction::SInv, Junction::SqrtSInv,
                                                Junction::BlockIdentity};

// Maxvol stops when no entry of A₂ exceeds this magnitude (each swap grows |det J| by at least this).
constexpr double kMaxvolTol = 1.05;
// |R(r−1, r−1)| / |R(0, 0)| of the pivoted QR below which A counts as rank-deficient.
constexpr double kRankTol = 1e-13;

// m[:, cols[begin..end)]: [rows, end − begin].
MatrixD gather_columns(const MatrixD& m, const std::vector<int>& cols, std::size_t begin, std::size_t end) {
  MatrixD out(m.rows(), static_cast<Eigen::Index>(end - begin));
  for (std::size_t j = begin; j < end; ++j) out.col(static_cast<Eigen::Index>(j - begin)) = m.col(cols[j]);
  return out;
}

// Greedy maxvol (Goreinov et al.): with a = J·[I | F] in the perm order, swapping identity column i for
// column k multiplies |det J| by |F(i, k)|; do so while some |F(i, k)| > kMaxvolTol. The update is the
// Sherman–Morrison form of F' = G⁻¹·F with G = I + (f_k − e_i)·e_iᵀ. F is recomputed exactly afterwards.
void maxvol_refine(MatrixD& f, std::vector<int>& perm, int r) {
  const int max_swaps = 4 * r + 64;  // termination is guaranteed anyway (det grows ≥ 5 % per swap)
  for (int swap = 0; swap < max_swaps && f.size() > 0; ++swap) {
    Eigen::Index i = 0, k = 0;
    if (f.cwiseAbs().maxCoeff(&i, &k) <= kMaxvolTol) break;
    VectorD col = f.col(k);                      // [r] f_k
    const double pivot = col(i);
    const Eigen::RowVectorXd row = f.row(i);     // [d − r]
    col(i) -= 1.0;                               // f_k − e_i
    f.noalias() -= col * (row / pivot);
    f.col(k) = -col / pivot;                     // the old identity column i: G⁻¹·e_i
    f(i, k) += 1.0;
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(r + k)]);
  }
}

void check_rank(int rank, Eigen::Index out, Eigen::Index in, std::string_view context) {
  const auto k = std::min(out, in);
  if (rank < 1 || rank > k) {
    throw ConfigError(fmt::format("{}: rank out of range (expected 1..{} for a [{}, {}] module, got {})", context, k,
                                  out, in, rank));
  }
}

void check_inputs(const MatrixD& w, const VectorD& bias, const InputStats& st, const LocalOptions& opt,
                  std::string_view context) {
  if (st.xtx == nullptr) throw ConfigError(fmt::format("{}: input statistics missing (expected C, got none)", context));
  const MatrixD& c = *st.xtx;
  if (c.rows() != w.cols() || c.cols() != w.cols()) {
    throw ConfigError(fmt::format("{}: input covariance does not match the weight (expected [{}, {}], got [{}, {}])",
                                  context, w.cols(), w.cols(), c.rows(), c.cols()));
  }
  if (bias.size() != 0 && bias.size() != w.rows()) {
    throw ConfigError(fmt::format("{}: bias length (expected {}, got {})", context, w.rows(), bias.size()));
  }
  if (bias.size() != 0 && opt.update_bias && (st.mean.size() != w.cols() || !(st.n > 0))) {
    throw ConfigError(fmt::format("{}: the bias update needs the input mean and token count (expected μ [{}] and "
                                  "n > 0, got [{}] and {})", context, w.cols(), st.mean.size(), st.n));
  }
  linalg::check_finite(w, context, "weight");
  if (bias.size() != 0) linalg::check_finite(bias, context, "bias");
  if (st.mean.size() != 0) linalg::check_finite(st.mean, context, "input mean");
}

// J⁻¹·F for the junction J [r, r] and F [r, d − r]. At full rank (r = d) F is empty, and Eigen's
// BLAS-backed solve would take &F(0, 0) of it (undefined behaviour, UBSan): the answer is [r, 0].
MatrixD solve_junction(const MatrixD& j, const MatrixD& f) {
  if (f.cols() == 0) return MatrixD(j.rows(), 0);
  return Eigen::PartialPivLU<MatrixD>(j).solve(f);
}

// A: [r, d] of numerical rank k < r (A·Π = Q·R with |R(j, j)| ≤ kRankTol·|R(0, 0)| for j ≥ k). Then
// A ≈ Q_k·R_k·Πᵀ with Q_k = A·Π[:, :k]·R₁₁⁻¹ (R₁₁ = R[:k, :k]), so B·A = (B·Q_k)·(R_k·Πᵀ) with a rank-k
// compression factor that has an identity block. The rows dropped carry nothing (their part of R is
// below the tolerance): B·A is unchanged and (r − k)·(d' + d) − (r² − k²) weights are saved.
LowRankFactors reduced_to_block_identity(const MatrixD& b, const MatrixD& a, const linalg::PivotedQr& qr,
                                         Eigen::Index k, std::string_view context) {
  const auto r = a.rows(), d = a.cols();
  const MatrixD r11 = qr.r.topLeftCorner(k, k);                                    // [k, k] upper
  const MatrixD apk = gather_columns(a, qr.perm, 0, static_cast<std::size_t>(k));  // [r, k]
  // Q_k·R₁₁ = A·Π[:, :k]  ⇔  R₁₁ᵀ·Q_kᵀ = (A·Π[:, :k])ᵀ
  const MatrixD qk = r11.transpose().triangularView<Eigen::Lower>().solve(apk.transpose()).transpose();  // [r, k]
  MatrixD ak(k, d);  // [k, d]  R_k·Πᵀ
  for (Eigen::Index j = 0; j < d; ++j) ak.col(qr.perm[static_cast<std::size_t>(j)]) = qr.r.block(0, j, k, 1);
  record_note(context, "rank-reduced",
              fmt::format("rank {} instead of {}: the compression factor A has only {} independent rows "
                          "(pivoted QR, |R(j, j)| > {:g}·|R(0, 0)|), as the weight times the pre-conditioner has "
                          "rank {} on the calibration data; B·A is unchanged, with fewer weights", k, r, k,
                          kRankTol, k));
  return to_block_identity(b * qk, ak, context);
}

}  // namespace

std::string_view junction_name(Junction j) {
  switch (j) {
    case Junction::Identity: return "identity";
    case Junction::SInv: return "s-inv";
    case Junction::SqrtSInv: return "sqrt-s-inv";
    case Junction::BlockIdentity: return "block-identity";
  }
  return "?";
}

std::span<const Junction> all_junctions() { return kJunctions; }

Junction parse_junction(std::string_view name) {
  std::string valid;
  for (Junction j : kJunctions) {
    if (junction_name(j) == name) return j;
    valid += valid.empty() ? "" : ", ";
    valid += junction_name(j);
  }
  throw ConfigError(fmt::format("junction: unknown junction (expected one of {}, got '{}')", valid, name));
}

int LowRankFactors::in_features() const {
  return junction == Junction::BlockIdentity ? static_cast<int>(perm.size()) : static_cast<int>(A.cols());
}

MatrixD LowRankFactors::dense_a() const {
  if (junction != Junction::BlockIdentity) return A;
  MatrixD a = MatrixD::Zero(rank, in_features());  // [r, d]
  for (int j = 0; j < rank; ++j) a(j, perm[static_cast<std::size_t>(j)]) = 1.0;
  for (Eigen::Index k = 0; k < A.cols(); ++k) a.col(perm[static_cast<std::size_t>(rank + k)]) = A.col(k);
  return a;
}

MatrixD LowRankFactors::product() const { return B * dense_a(); }

LowRankFactors to_block_identity(const MatrixD& b, const MatrixD& a, std::string_view context) {
  const auto r = a.rows(), d = a.cols();
  if (r < 1 || r > d || b.cols() != r) {
    throw ConfigError(fmt::format("{}: block identity needs B [d', r], A [r, d] with 1 ≤ r ≤ d (got B [{}, {}], "
                                  "A [{}, {}])", context, b.rows(), b.cols(), r, d));
  }
  linalg::PivotedQr qr = linalg::pivoted_qr(a, context);
  const double r00 = std::abs(qr.r(0, 0));
  Eigen::Index k = 0;  // numerical rank of A
  while (k < r && std::abs(qr.r(k, k)) > kRankTol * r00) ++k;
  if (k == 0) {
    throw NumericError(fmt::format("{}: compression factor is zero, no identity block exists (expected rank >= 1, "
                                   "got 0)", context));
  }
  if (k < r) return reduced_to_block_identity(b, a, qr, k, context);
  std::vector<int> perm = std::move(qr.perm);
  const auto n = static_cast<std::size_t>(d), rr = static_cast<std::size_t>(r);
  {
    const MatrixD j = gather_columns(a, perm, 0, rr);  // [r, r]
    MatrixD f = solve_junction(j, gather_columns(a, perm, rr, n));  // [r, d − r]
    maxvol_refine(f, perm, static_cast<int>(r));
  }
  const MatrixD j = gather_columns(a, perm, 0, rr);  // [r, r] the junction J
  LowRankFactors out;
  out.A = solve_junction(j, gather_columns(a, perm, rr, n));  // [r, d − r]
  out.B = b * j;                                              // [d', r]
  out.perm = std::move(perm);
  out.junction = Junction::BlockIdentity;
  out.rank = static_cast<int>(r);
  linalg::check_finite(out.A, context, "block-identity factor");
  return out;
}

LowRankFactors apply_junction(const MatrixD& u, const VectorD& s, const MatrixD& m, Junction j,
                              std::string_view context) {
  const auto r = s.size();
  if (u.cols() != r || m.rows() != r) {
    throw ConfigError(fmt::format("{}: factor shapes disagree (expected U [d', {}], M [{}, d], got U [{}, {}], M [{}, "
                                  "{}])", context, r, r, u.rows(), u.cols(), m.rows(), m.cols()));
  }
  if (j == Junction::BlockIdentity) return to_block_identity(u * s.asDiagonal(), m, context);
  LowRankFactors out;
  out.junction = j;
  out.rank = static_cast<int>(r);
  // B = U·S·J, A = J⁻¹·M with J = I, S⁻¹, S^{-1/2}; written so that B·A = U·S·M even for s_i = 0.
  const double k = j == Junction::Identity ? 0.0 : (j == Junction::SInv ? 1.0 : 0.5);
  const VectorD s_a = s.unaryExpr([k](double x) { return std::pow(x, k); });  // [r] the part of S moved into A
  const VectorD s_b = s.unaryExpr([k](double x) { return std::pow(x, 1.0 - k); });  // [r] the part left in B
  out.B = u * s_b.asDiagonal();  // [d', r]
  out.A = s_a.asDiagonal() * m;  // [r, d]
  return out;
}

LowRankFactors asvd_with(const MatrixD& w, const PreconditionerMatrix& p, int rank, Junction j,
                         std::string_view context) {
  check_rank(rank, w.rows(), w.cols(), context);
  if (p.dim != w.cols()) {
    throw ConfigError(fmt::format("{}: pre-conditioner size (expected {}, got {})", context, w.cols(), p.dim));
  }
  const linalg::Svd svd = linalg::svd(p.right_multiply(w), context);  // W·P = U·S·Vᵀ
  const MatrixD m = p.right_multiply_pinv(svd.v.leftCols(rank).transpose());  // [r, d]  Vᵀ·P⁺
  return apply_junction(svd.u.leftCols(rank), svd.s.head(rank), m, j, context);
}

LowRankFactors asvd(const MatrixD& w, const VectorD& bias, const InputStats& stats, int rank,
                    const LocalOptions& opt, std::string_view context) {
  check_inputs(w, bias, stats, opt, context);
  check_rank(rank, w.rows(), w.cols(), context);
  const bool centered = bias.size() != 0 && opt.update_bias;
  MatrixD c_centered;  // [d, d] only for bias modules
  if (centered) c_centered = centered_covariance(*stats.xtx, stats.mean, stats.n);
  const MatrixD& c = centered ? c_centered : *stats.xtx;
  const PreconditionerMatrix p = make_preconditioner(opt.preconditioner, c, stats.abs_mean, opt, context);
  LowRankFactors f = asvd_with(w, p, rank, opt.junction, context);
  const MatrixD e = w - f.product();  // [d', d]
  if (centered) f.bias = updated_bias(w, f.product(), bias, stats.mean);
  else f.bias = bias;
  // With the optimal bias the output error is exactly the centered activation loss (no cancellation).
  f.loss = activation_loss(e, c);
  if (!std::isfinite(f.loss)) throw NumericError(fmt::format("{}: activation loss is not finite", context));
  return f;
}

VectorD updated_bias(const MatrixD& w, const MatrixD& product, const VectorD& bias, const VectorD& mean) {
  return bias + (w - product) * mean;
}

double activation_loss(const MatrixD& e, const MatrixD& c) { return (e * c).cwiseProduct(e).sum(); }

double output_error(const MatrixD& e, const VectorD& delta, const MatrixD& c, const VectorD& mean, double n) {
  double loss = activation_loss(e, c);
  if (delta.size() != 0) loss += 2.0 * n * delta.dot(e * mean) + n * delta.squaredNorm();
  return loss;
}

}  // namespace latentllm::compress
