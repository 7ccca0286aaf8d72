// Junction matrices (paper "junction matrix"): every split B = U·S·J, A = J⁻¹·Vᵀ·P⁺ of one
// factorization, and the block-identity form A = [I_r | A₂]·Πᵀ that saves r² weights and MACs.
#include "core/enum_names.hpp"
#include "compress/math/junction.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include <Eigen/LU>

#include "compress/stages/notes.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {

namespace {

constexpr auto kJunctionNames = core::enum_names<Junction>(
    core::Named<Junction>{Junction::Identity, "identity"}, core::Named<Junction>{Junction::SInv, "s-inv"},
    core::Named<Junction>{Junction::SqrtSInv, "sqrt-s-inv"},
    core::Named<Junction>{Junction::BlockIdentity, "block-identity"});
constexpr auto kJunctions = kJunctionNames.values();

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
LowRank reduced_to_block_identity(const MatrixD& b, const MatrixD& a, const linalg::PivotedQr& qr,
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

std::string_view junction_name(Junction j) { return kJunctionNames.name(j); }

std::span<const Junction> all_junctions() { return kJunctions; }

Junction parse_junction(std::string_view name) {
  return kJunctionNames.parse(name, "junction: unknown junction (expected one of {}, got '{}')", ", ");
}

LowRank to_block_identity(const MatrixD& b, const MatrixD& a, std::string_view context) {
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
  LowRank out;
  out.A = solve_junction(j, gather_columns(a, perm, rr, n));  // [r, d − r]
  out.B = b * j;                                              // [d', r]
  out.perm = std::move(perm);
  linalg::check_finite(out.A, context, "block-identity factor");
  return out;
}

LowRank apply_junction(const MatrixD& u, const VectorD& s, const MatrixD& m, Junction j,
                       std::string_view context) {
  const auto r = s.size();
  if (u.cols() != r || m.rows() != r) {
    throw ConfigError(fmt::format("{}: factor shapes disagree (expected U [d', {}], M [{}, d], got U [{}, {}], M [{}, "
                                  "{}])", context, r, r, u.rows(), u.cols(), m.rows(), m.cols()));
  }
  if (j == Junction::BlockIdentity) return to_block_identity(u * s.asDiagonal(), m, context);
  LowRank out;
  // B = U·S·J, A = J⁻¹·M with J = I, S⁻¹, S^{-1/2}; written so that B·A = U·S·M even for s_i = 0.
  const double k = j == Junction::Identity ? 0.0 : (j == Junction::SInv ? 1.0 : 0.5);
  const VectorD s_a = s.unaryExpr([k](double x) { return std::pow(x, k); });  // [r] the part of S moved into A
  const VectorD s_b = s.unaryExpr([k](double x) { return std::pow(x, 1.0 - k); });  // [r] the part left in B
  out.B = u * s_b.asDiagonal();  // [d', r]
  out.A = s_a.asDiagonal() * m;  // [r, d]
  return out;
}


LowRank with_junction(LowRank f, Junction j, std::string_view context) {
  if (j != Junction::BlockIdentity || f.block_identity()) return f;
  LowRank out = to_block_identity(f.B, f.A, context);
  out.bias = std::move(f.bias);
  return out;
}

}  // namespace latentllm::compress
