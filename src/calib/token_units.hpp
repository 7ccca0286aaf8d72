// Calibration tokens spread over the ranks for a solver that passes over them in units (joint up-down,
// src/compress/math/token_passes.hpp): the one place that decides which rank holds which of them.
#pragma once

#include <cstdint>

#include "latentllm/tensor.hpp"

namespace latentllm::calib {

// Every rank's rows x_mine [n_r, d] in rank order, evenly strided to at most max_tokens (0: all), cut
// into units of `unit` tokens: this rank's share of the units (dist::share_of), gathered from the ranks
// that hold them into `owned` and returned (or x_mine itself on one rank without a stride). A
// collective: every rank calls it. `kept` (may be null) receives the strided count and `total` the
// tokens over every rank.
const MatrixF& token_units(const MatrixF& x_mine, std::int64_t max_tokens, std::int64_t unit, MatrixF& owned,
                           std::int64_t* kept, std::int64_t* total);

}  // namespace latentllm::calib
