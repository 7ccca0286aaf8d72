// Streaming passes over calibration tokens for the joint solvers that need the tokens themselves
// (joint up-down): the tokens are visited in chunks of columns, two chunks at a time on the pool's
// threads (each with single-threaded BLAS), and what each chunk contributes to the regression
// statistics is folded into shared accumulators in chunk order, the work split into fixed column and
// row blocks across threads. Sums therefore do not depend on the thread count, and the working set is
// a few [f, c] matrices per thread plus the accumulators — never an [f, n] matrix over all tokens.
//
// Passes run in double or in float (T). In float, each chunk's products are formed by sgemm/ssyrk
// (twice dgemm's rate) and added to the double accumulators, so the rounding of float stays within one
// chunk (an inner dimension of c tokens) and the sums over all tokens are in double, like
// `--covariance f32`.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "compress/regression.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

template <typename T>
using MatrixRow = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixRowD = MatrixRow<double>;
using MatrixRowF = MatrixRow<float>;
template <typename T>
using MatrixX = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;  // column-major

// Σ t·sᵀ (cross [out, in]), Σ s·sᵀ (Gram [in, in], when `gram`), Σ s, Σ t and the token count of pairs
// of chunk matrices s [in, c], t [out, c] (columns = tokens).
class RegressionAccumulator {
 public:
  RegressionAccumulator(Eigen::Index in, Eigen::Index out, bool gram);
  // Adds one chunk; threads split the cross by row blocks and the Gram's upper triangle by column
  // blocks (fixed splits). Call from outside the pool. The float overload forms the chunk's products
  // in float and adds them to the double sums.
  void add(const MatrixX<double>& s, const MatrixX<double>& t);
  void add(const MatrixX<float>& s, const MatrixX<float>& t);
  // The statistics (Gram mirrored; cov left empty without `gram`, the caller supplies it), moved out:
  // the accumulator is empty afterwards (no second [in, in] copy).
  RegressionStats take();

 private:
  template <typename T>
  void add_chunk(const MatrixX<T>& s, const MatrixX<T>& t);
  MatrixD cross_, gram_;  // [out, in], [in, in] upper triangle
  std::vector<float> part_;  // float path: the chunk's products before they are added, [out·in] or [in·in]
  VectorD sum_s_, sum_t_;
  double n_ = 0;
  bool has_gram_;
};

// What one chunk contributes: a (source, target) pair per accumulator, in the accumulators' order
// (an empty source skips that accumulator for the chunk), and scalars summed over chunks in order.
template <typename T>
struct ChunkOut {
  std::vector<std::pair<MatrixX<T>, MatrixX<T>>> pairs;
  std::vector<double> scalars;
};

// Tokens as rows: x [n, d] the inputs, y [n, d'] the targets (dense outputs).
template <typename T>
struct TokenRows {
  const MatrixRow<T>& x;
  const MatrixRow<T>& y;
  Eigen::Index chunk = 1024;  // tokens per chunk
  Eigen::Index size() const { return x.rows(); }
  Eigen::Index chunks() const { return (size() + chunk - 1) / chunk; }
};

// body(k, t0, xt, yt, out): chunk k holds tokens [t0, t0 + c) with xt = their inputs [d, c] and yt
// their targets [d', c]; it fills out.pairs (one per accumulator) and out.scalars. Bodies of different
// chunks run concurrently and may write only their own tokens' rows of shared storage. Returns the
// scalars summed over the chunks in order.
template <typename T>
using ChunkBody = std::function<void(Eigen::Index k, Eigen::Index t0, const Eigen::Ref<const MatrixX<T>>& xt,
                                     const Eigen::Ref<const MatrixX<T>>& yt, ChunkOut<T>& out)>;
template <typename T>
std::vector<double> token_pass(const TokenRows<T>& tokens, const std::vector<RegressionAccumulator*>& accs,
                               const ChunkBody<T>& body);

}  // namespace latentllm::compress
