#include "quant/factors.hpp"

#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::quant {

namespace {

QuantizedMatrix quantize(const MatrixD& w, const MatrixD& h, const FactorOptions& opt, std::string_view context) {
  if (opt.quantizer == Quantizer::Rtn) return rtn(w, opt.spec, context);
  return gptq(w, h, opt.spec, opt.gptq, context).q;
}

// B̃ = (B·A·C·A'ᵀ + λ·B)·(H_B + λI)⁻¹: the least-squares B for inputs A'·x and targets B·A·x (the normal
// equations B̃·H_B = B·A·C·A'ᵀ), damped toward B itself (not toward 0, which would shrink it), through
// the Cholesky factor of H_B + λI. [d', r].
MatrixD refit(const MatrixD& b, const MatrixD& a, const MatrixD& a_hat, const MatrixD& c, const MatrixD& h_b,
              double percdamp, std::string_view context) {
  MatrixD g = h_b;  // [r, r]
  const double lambda = g.rows() > 0 ? percdamp * g.diagonal().mean() : 0.0;
  g.diagonal().array() += lambda;
  const auto l = linalg::cholesky(g, context);
  if (!l) {
    throw NumericError(fmt::format("{}: refit of B: A'·C·A'ᵀ + damping·I is not positive definite (expected a "
                                   "larger percdamp than {}, got damping {})", context, percdamp, lambda));
  }
  const MatrixD rhs = b * (a * c * a_hat.transpose()) + lambda * b;  // [d', r]
  return linalg::solve_lower_right(linalg::solve_lower_right(rhs, *l, true), *l, false);
}

}  // namespace

std::string_view quantizer_name(Quantizer q) { return q == Quantizer::Rtn ? "rtn" : "gptq"; }

QuantizedFactors quantize_factors(const MatrixD& b, const MatrixD& a, const MatrixD& c, const FactorOptions& opt,
                                  std::string_view context, std::span<const int> perm) {
  const Eigen::Index r = a.rows(), d = perm.empty() ? a.cols() : static_cast<Eigen::Index>(perm.size());
  if (b.cols() != r || c.rows() != d || c.cols() != d || (!perm.empty() && a.cols() != d - r)) {
    throw ConfigError(fmt::format("{}: factor shapes (expected B [d', r], A [r, d] (or [r, d − r] with a "
                                  "permutation of d) and C [d, d], got B [{}, {}], A [{}, {}] and C [{}, {}])",
                                  context, b.rows(), b.cols(), a.rows(), a.cols(), c.rows(), c.cols()));
  }
  QuantizedFactors out;
  // The dense form [r, d] of a stored block s ([r, d − r] with perm, else [r, d]).
  auto dense = [&](const MatrixD& s) -> MatrixD {
    if (perm.empty()) return s;
    MatrixD m = MatrixD::Zero(r, d);
    for (Eigen::Index j = 0; j < r; ++j) m(j, perm[static_cast<std::size_t>(j)]) = 1.0;
    for (Eigen::Index k = 0; k < d - r; ++k) m.col(perm[static_cast<std::size_t>(r + k)]) = s.col(k);
    return m;
  };
  MatrixD c_a;  // the stored block's input second moment: C, or C[perm[r:], perm[r:]] [d − r, d − r]
  if (perm.empty()) {
    c_a = c;
  } else {
    c_a.resize(d - r, d - r);
    for (Eigen::Index i = 0; i < d - r; ++i)
      for (Eigen::Index j = 0; j < d - r; ++j)
        c_a(i, j) = c(perm[static_cast<std::size_t>(r + i)], perm[static_cast<std::size_t>(r + j)]);
  }
  out.a = quantize(a, c_a, opt, fmt::format("{}.A", context));
  const MatrixD a_dense = dense(a);                   // [r, d]
  const MatrixD a_hat = dense(dequantize(out.a));     // [r, d]
  const MatrixD h_b = a_hat * c * a_hat.transpose();  // [r, r] B's input second moment
  const MatrixD b_target = opt.refit_b ? refit(b, a_dense, a_hat, c, h_b, opt.gptq.percdamp, context) : b;  // [d', r]
  out.b = quantize(b_target, h_b, opt, fmt::format("{}.B", context));
  out.error = output_error(b * a_dense, dequantize(out.b) * a_hat, c);
  return out;
}

}  // namespace latentllm::quant
