// Portable random integers (calibration sampling, ScienceQA's calibration draw): the same sequence on every
// platform.
#pragma once

#include <cstdint>
#include <limits>
#include <random>

namespace latentllm::core {

// Uniform integer in [0, n) from a 64-bit engine, by rejection (std::uniform_int_distribution's
// algorithm is implementation-defined).
inline std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % n;
  std::uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % n;
}

}  // namespace latentllm::core
