#include "compress/math/bias.hpp"

namespace latentllm::compress {

VectorD updated_bias(const MatrixD& w, const MatrixD& product, const VectorD& bias, const VectorD& mean) {
  return bias + (w - product) * mean;
}

MatrixD with_bias_column(const MatrixD& w, const VectorD& b) {
  MatrixD a(w.rows(), w.cols() + 1);
  a.leftCols(w.cols()) = w;
  a.col(w.cols()) = b.size() > 0 ? b : VectorD::Zero(w.rows());
  return a;
}

MatrixD augmented_dense(const LowRank& f) { return with_bias_column(f.dense(), f.bias); }

void split_latent_bias(LowRank& f, const MatrixD& a_aug) {
  const auto d = a_aug.cols() - 1;
  f.A = a_aug.leftCols(d);
  f.bias = f.B * a_aug.col(d);
}

}  // namespace latentllm::compress
