#include "calib/token_units.hpp"

#include <algorithm>

#include "dist/comm.hpp"

namespace latentllm::calib {

const MatrixF& token_units(const MatrixF& x_mine, std::int64_t max_tokens, std::int64_t unit, MatrixF& owned,
                           std::int64_t* kept, std::int64_t* total) {
  const std::int64_t n = dist::sum_of(x_mine.rows());
  const std::int64_t stride = max_tokens > 0 && n > max_tokens ? (n + max_tokens - 1) / max_tokens : 1;
  const std::int64_t n_sub = (n + stride - 1) / stride, units = (n_sub + unit - 1) / unit;
  if (kept != nullptr) *kept = n_sub;
  if (total != nullptr) *total = n;
  if (dist::size() == 1 && stride == 1) return x_mine;
  const dist::Share mine = dist::my_share(units);
  dist::redistribute_rows(x_mine.data(), x_mine.rows(), x_mine.cols(), stride,
                          {mine.begin * unit, std::min(mine.end * unit, n_sub)}, owned);
  return owned;
}

}  // namespace latentllm::calib
