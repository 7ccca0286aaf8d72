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
                                  std::string_view context) {
  if (b.cols() != a.rows() || c.rows() != a.cols() || c.cols() != a.cols()) {
    throw ConfigError(fmt::format("{}: factor shapes (expected B [d', r], A [r, d] and C [d, d], got B [{}, {}], "
                                  "A [{}, {}] and C [{}, {}])", context, b.rows(), b.cols(), a.rows(), a.cols(),
                                  c.rows(), c.cols()));
  }
  QuantizedFactors out;
  out.a = quantize(a, c, opt, fmt::format("{}.A", context));
  const MatrixD a_hat = dequantize(out.a);            // [r, d]
  const MatrixD h_b = a_hat * c * a_hat.transpose();  // [r, r] B's input second moment
  const MatrixD b_target = opt.refit_b ? refit(b, a, a_hat, c, h_b, opt.gptq.percdamp, context) : b;  // [d', r]
  out.b = quantize(b_target, h_b, opt, fmt::format("{}.B", context));
  out.error = output_error(b * a, dequantize(out.b) * a_hat, c);
  return out;
}

}  // namespace latentllm::quant
