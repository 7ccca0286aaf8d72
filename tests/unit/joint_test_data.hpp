// Random test data for the joint compressor tests: Gaussian weights and correlated inputs X = Z·Lᵀ + μ.
#pragma once

#include <cmath>
#include <random>

#include "latentllm/tensor.hpp"

namespace latentllm::test {

// These tests use small matrices, where Eigen's OpenMP GEMM threads only add spin-wait overhead
// (seconds per test on a loaded 2-core machine).
inline const int kEigenSingleThread = (Eigen::setNbThreads(1), 1);

inline MatrixD gaussian(std::mt19937_64& rng, Eigen::Index rows, Eigen::Index cols, double scale = 1.0) {
  std::normal_distribution<double> nd(0.0, scale);
  MatrixD m(rows, cols);
  for (Eigen::Index j = 0; j < cols; ++j)
    for (Eigen::Index i = 0; i < rows; ++i) m(i, j) = nd(rng);
  return m;
}

inline VectorD gaussian_vec(std::mt19937_64& rng, Eigen::Index n, double scale = 1.0) {
  return gaussian(rng, n, 1, scale).col(0);
}

// x: [n, d] rows are tokens, correlated through a mixing matrix with a decaying spectrum (the
// condition of real activations), plus a mean of size mean_scale.
inline MatrixD correlated_inputs(std::mt19937_64& rng, Eigen::Index n, Eigen::Index d, double mean_scale = 0.0) {
  MatrixD mix = gaussian(rng, d, d);
  for (Eigen::Index j = 0; j < d; ++j) mix.col(j) *= std::pow(0.9, static_cast<double>(j));
  MatrixD x = gaussian(rng, n, d) * mix.transpose();
  if (mean_scale != 0.0) x.rowwise() += gaussian_vec(rng, d, mean_scale).transpose();
  return x;
}

}  // namespace latentllm::test
