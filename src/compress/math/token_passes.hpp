// Streaming passes over calibration tokens for the joint solvers that need the tokens themselves
// (joint up-down): the tokens are visited in chunks of columns, two chunks at a time on the pool's
// threads (each with single-threaded BLAS), and what each chunk contributes to the regression
// statistics is folded into shared accumulators in chunk order, the work split into fixed column and
// row blocks across threads. Sums therefore do not depend on the thread count, and the working set is
// a few [f, c] matrices per thread plus the accumulators — never an [f, n] matrix over all tokens.
//
// Under K ranks (data parallel, docs/SCALE.md) the tokens are one global sequence cut into units of a
// fixed number of tokens, each rank passing the rows of its own units. Chunks never cross a unit; a
// unit's chunks are folded in chunk order in double, and at the unit's end its partial sums are added
// exactly (calib::ExactSums) and zeroed. At the end of a pass every rank's exact sums are added on
// one rank, kStatsOwner (a collective), which alone solves the regressions from them; the scalars
// (losses) are added on every rank. The statistics therefore have the same bits for any K and any
// split of the units.
//
// Passes run in double or in float (T). In float, each chunk's products are formed by sgemm/ssyrk
// (twice dgemm's rate) and added to the double accumulators, so the rounding of float stays within one
// chunk (an inner dimension of c tokens) and the sums over all tokens are in double, like
// `--covariance f32`.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "compress/math/regression.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

template <typename T>
using MatrixRow = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixRowD = MatrixRow<double>;
using MatrixRowF = MatrixRow<float>;
template <typename T>
using MatrixX = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;  // column-major

// The rank the regression statistics of every pass are added on (RegressionAccumulator::combine_ranks).
inline constexpr int kStatsOwner = 0;

// What the exact sums' errors name (after the module, TokenRows::context).
inline constexpr std::string_view kStatsContext = "joint up-down statistics";

// Σ t·sᵀ (cross [out, in]), Σ s·sᵀ (Gram [in, in], when `gram`), Σ s, Σ t and the token count of pairs
// of chunk matrices s [in, c], t [out, c] (columns = tokens): the current unit's in double, the
// finished units' exactly (calib::ExactSums, 16 bytes per entry).
class RegressionAccumulator {
 public:
  RegressionAccumulator(Eigen::Index in, Eigen::Index out, bool gram);
  // Adds one chunk to the current unit; threads split the cross by row blocks and the Gram's upper
  // triangle by column blocks (fixed splits). Call from outside the pool. The float overload forms the
  // chunk's products in float and adds them to the double sums.
  void add(const MatrixX<double>& s, const MatrixX<double>& t);
  void add(const MatrixX<float>& s, const MatrixX<float>& t);
  // Ends the current unit: its sums added exactly, the double sums zeroed. NumericError when a sum is
  // out of the exact range (|v| ≥ 2⁴⁷) or past ExactSums::kMaxAdds units.
  void end_unit(std::string_view context = kStatsContext);
  // Adds another accumulator's finished units (the same shapes): units gathered apart, in one process.
  void merge(const RegressionAccumulator& other);
  // Ends the unit, then adds every rank's finished units on kStatsOwner (a collective: every rank
  // calls it in turn).
  void combine_ranks(std::string_view context = kStatsContext);
  // The statistics of the finished units (Gram mirrored; cov left empty without `gram`, the caller
  // supplies it), after ending the current unit: the accumulator is empty afterwards. After
  // combine_ranks only on kStatsOwner (an Error elsewhere).
  RegressionStats take();

 private:
  template <typename T>
  void add_chunk(const MatrixX<T>& s, const MatrixX<T>& t);
  MatrixD cross_, gram_;  // [out, in], [in, in] upper triangle (the current unit)
  std::vector<float> part_;  // float path: the chunk's products before they are added, [out·in] or [in·in]
  VectorD sum_s_, sum_t_;  // [in], [out]
  double n_ = 0;
  bool has_gram_, open_ = false;  // open_: the current unit has chunks
  bool reduced_ = false;          // combine_ranks added the ranks' sums on kStatsOwner
  bool holds_sums_ = false;       // and this rank is kStatsOwner
  // The finished units: cross (out·in, column-major), the Gram's upper triangle, sum_s, sum_t, n.
  calib::ExactSums exact_;
};

// What one chunk contributes: a (source, target) pair per accumulator, in the accumulators' order
// (an empty source skips that accumulator for the chunk), and scalars summed over chunks in order.
template <typename T>
struct ChunkOut {
  std::vector<std::pair<MatrixX<T>, MatrixX<T>>> pairs;
  std::vector<double> scalars;
};

// Tokens as rows: x [n, d] the inputs, y [n, d'] the targets (dense outputs). The rows are whole units
// of the global sequence (the last one possibly short), each cut into chunks from its start.
template <typename T>
struct TokenRows {
  const MatrixRow<T>& x;
  const MatrixRow<T>& y;
  Eigen::Index chunk = 1024;  // tokens per chunk
  Eigen::Index unit = 4096;   // tokens per unit
  std::string_view context = kStatsContext;  // for errors: "<module>: joint up-down statistics"
  Eigen::Index size() const { return x.rows(); }
};

// body(t0, xt, yt, out): a chunk holds the rows [t0, t0 + c) with xt = their inputs [d, c] and yt
// their targets [d', c]; it fills out.pairs (one per accumulator) and at most `scalars` out.scalars.
// Bodies of different chunks run concurrently and may write only their own tokens' rows of shared
// storage. A collective: every rank passes its own rows (possibly none) with the same accumulators'
// shapes and `scalars`. Returns the scalars summed over every rank's tokens (units as the
// accumulators'); the accumulators hold every rank's sums on kStatsOwner, ready to take() there.
template <typename T>
using ChunkBody = std::function<void(Eigen::Index t0, const Eigen::Ref<const MatrixX<T>>& xt,
                                     const Eigen::Ref<const MatrixX<T>>& yt, ChunkOut<T>& out)>;
template <typename T>
std::vector<double> token_pass(const TokenRows<T>& tokens, const std::vector<RegressionAccumulator*>& accs,
                               std::size_t scalars, const ChunkBody<T>& body);

}  // namespace latentllm::compress
