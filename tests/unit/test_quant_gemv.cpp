// The quantized GEMV (src/quant/gemv.cpp) on every instruction set this CPU has: equal to the float
// product of the dequantized matrix but for rounding, for q = 4 and 8 (vector kernels) and q = 2, 3 and
// groups not a multiple of 32 (portable code), with a padded last group; the same bits for any number
// of threads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "core/gemm16.hpp"
#include "latentllm/threads.hpp"
#include "quant/gemv.hpp"

namespace latentllm::quant {
namespace {

using core::Isa;

struct IsaGuard {
  Isa saved = core::kernel_isa();
  ~IsaGuard() { core::set_kernel_isa(saved); }
};

struct ThreadsGuard {
  int saved = core::num_threads();
  ~ThreadsGuard() { core::set_num_threads(saved); }
};

std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::Generic, Isa::F16c, Isa::Avx512}) {
    if (i <= core::best_isa()) out.push_back(i);
  }
  return out;
}

PackedMatrix random_packed(std::int64_t rows, std::int64_t cols, const QuantSpec& spec, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 0.05);
  MatrixD w(rows, cols);
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = n(rng);
  return pack(rtn(w, spec, "gemv"));
}

std::vector<float> random_x(std::int64_t cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(cols));
  for (float& v : x) v = n(rng);
  return x;
}

// y against the double product of the dequantized matrix, within a float rounding bound: per group a
// dot of G terms and the zero-point term, then n_g group terms, each error at most (terms)·2^-24 of the
// sum of magnitudes s·(Σ c_j·|x_j| + |z|·Σ|x_j|).
void expect_close(const PackedMatrix& p, const std::vector<float>& x, const std::vector<float>& y) {
  const QuantizedMatrix q = unpack(p);
  const MatrixD wq = dequantize(q);
  const std::int64_t n_g = p.groups();
  for (std::int64_t r = 0; r < p.rows; ++r) {
    double exact = 0.0, magnitude = 0.0;
    for (std::int64_t g = 0; g < n_g; ++g) {
      const GroupGrid grid = q.grid(r, g);
      double cx = 0.0, ax = 0.0;
      for (std::int64_t j = g * p.group; j < std::min(p.cols, (g + 1) * p.group); ++j) {
        exact += wq(r, j) * x[static_cast<std::size_t>(j)];
        cx += q.codes[static_cast<std::size_t>(r * p.cols + j)] * std::fabs(x[static_cast<std::size_t>(j)]);
        ax += std::fabs(x[static_cast<std::size_t>(j)]);
      }
      magnitude += grid.s * (cx + std::fabs(grid.z) * ax);
    }
    const double bound = static_cast<double>(p.group + n_g + 4) * std::ldexp(1.0, -23) * magnitude;
    ASSERT_NEAR(y[static_cast<std::size_t>(r)], exact, bound) << "row " << r;
  }
}

TEST(QuantGemv, MatchesTheDequantizedProductOnEveryIsa) {
  IsaGuard guard;
  // {bits, group, cols}: vector kernels (q = 4, 8 with G a multiple of 32), a padded last group, and
  // the portable code (q = 2, 3, G = 40).
  const std::vector<std::tuple<int, int, int>> shapes = {{4, 128, 512}, {4, 32, 300}, {8, 128, 512}, {8, 64, 200},
                                                         {2, 32, 96},   {3, 64, 160}, {4, 40, 120}};
  for (Isa isa : isas()) {
    core::set_kernel_isa(isa);
    for (const auto& [bits, group, cols] : shapes) {
      SCOPED_TRACE(fmt::format("{} q={} G={} cols={}", core::isa_name(isa), bits, group, cols));
      const PackedMatrix p = random_packed(37, cols, {bits, group, Grid::MinMax}, 11u + bits);
      EXPECT_EQ(gemv_vectorized(p), isa != Isa::Generic && (bits == 4 || bits == 8) && group % 32 == 0);
      const std::vector<float> x = random_x(cols, 3);
      std::vector<float> y(37);
      gemv(p, x, y);
      expect_close(p, x, y);
    }
  }
}

TEST(QuantGemv, SameBitsForAnyThreadCount) {
  IsaGuard isa_guard;
  ThreadsGuard threads_guard;
  const PackedMatrix p = random_packed(1000, 1024, {4, 128, Grid::MinMax}, 5);
  const std::vector<float> x = random_x(1024, 6);
  for (Isa isa : isas()) {
    core::set_kernel_isa(isa);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      core::set_num_threads(threads);
      std::vector<float> y(1000);
      gemv(p, x, y);
      if (first.empty()) first = y;
      EXPECT_EQ(y, first) << core::isa_name(isa) << " threads " << threads;
    }
  }
}

}  // namespace
}  // namespace latentllm::quant
