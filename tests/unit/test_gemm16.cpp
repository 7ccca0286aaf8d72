// Kernels on 16-bit stored weights (core/gemm16.hpp) against the float32 path, on every instruction set
// this CPU has (forced one at a time), and Linear forwards with stored matrices against float32 ones.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/gemm.hpp"
#include "core/gemm16.hpp"
#include "core/parallel.hpp"
#include "latentllm/model.hpp"
#include "latentllm/threads.hpp"
#include "model/linear_fused.hpp"

namespace latentllm::test {
namespace {

using core::Isa;

// Restores the instruction set chosen at start.
struct IsaGuard {
  Isa saved = core::kernel_isa();
  ~IsaGuard() { core::set_kernel_isa(saved); }
};

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::Generic, Isa::F16c, Isa::Avx512})
    if (i <= core::best_isa()) out.push_back(i);
  return out;
}

// A [rows, cols] 16-bit matrix of random values (some subnormal in F16, some negative, some zero), owned.
Matrix16 random16(DType dt, std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto v = std::make_shared<std::vector<std::uint16_t>>(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v->size(); ++i) {
    float f = nd(g);
    if (i % 97 == 0) f *= 1e-6f;  // F16 subnormal range
    if (i % 89 == 0) f = 0.0f;
    (*v)[i] = dt == DType::BF16 ? f32_to_bf16(f) : f32_to_f16(f);
  }
  Matrix16 m;
  m.dtype = dt;
  m.rows = rows;
  m.cols = cols;
  m.data = v->data();
  m.owned = v;
  return m;
}

MatrixF widen_ref(const Matrix16& m) {
  MatrixF out(m.rows, m.cols);
  for (std::int64_t i = 0; i < m.size(); ++i)
    out.data()[i] = m.dtype == DType::BF16 ? bf16_to_f32(m.data[i]) : f16_to_f32(m.data[i]);
  return out;
}

MatrixF random_x(std::int64_t n, std::int64_t k, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  MatrixF x(n, k);
  for (std::int64_t i = 0; i < x.size(); ++i) x.data()[i] = nd(g);
  return x;
}

TEST(Gemm16, WidenRowsIsExactOnEveryIsa) {
  IsaGuard guard;
  for (DType dt : {DType::F16, DType::BF16}) {
    const Matrix16 w = random16(dt, 7, 45, 1);  // 45: vector bodies and scalar tails
    const MatrixF ref = widen_ref(w);
    for (Isa isa : available_isas()) {
      core::set_kernel_isa(isa);
      MatrixF out(5, 45);
      core::widen_rows(w, 1, 6, out.data());
      EXPECT_EQ(0, std::memcmp(out.data(), ref.data() + 45, sizeof(float) * 5 * 45))
          << dtype_name(dt) << " " << core::isa_name(isa);
    }
  }
}

// The GEMV kernel differs from sgemm on the widened matrix by rounding only:
// |Δy_j| <= 2·k·2⁻²⁴·Σ_i |x_i·w_ji|, and each ISA path is within that bound.
TEST(Gemm16, GemvWithinTheRoundingBoundOnEveryIsa) {
  IsaGuard guard;
  core::BlasSingleThreaded single;
  for (DType dt : {DType::F16, DType::BF16}) {
    for (std::int64_t k : {1, 15, 64, 1000, 4099}) {
      const std::int64_t out = 37;
      const Matrix16 w = random16(dt, out, k, static_cast<std::uint32_t>(k));
      const MatrixF wf = widen_ref(w);
      for (int n = 1; n <= core::kGemvRows; ++n) {
        const MatrixF x = random_x(n, k, 7);
        MatrixF ref(n, out);
        core::sgemm_rm(false, true, n, static_cast<int>(out), static_cast<int>(k), 1.0f, x.data(), static_cast<int>(k),
                       wf.data(), static_cast<int>(k), 0.0f, ref.data(), static_cast<int>(out));
        const MatrixF absprod = x.cwiseAbs() * wf.cwiseAbs().transpose();  // [n, out] Σ|x·w|
        for (Isa isa : available_isas()) {
          core::set_kernel_isa(isa);
          MatrixF y = MatrixF::Constant(n, out, 3.0f);
          core::xwt16(x.data(), n, static_cast<int>(k), w, 0, out, 0.0f, y.data(), static_cast<int>(out));
          for (int i = 0; i < n; ++i)
            for (std::int64_t j = 0; j < out; ++j) {
              const double bound = 2.0 * static_cast<double>(k) * std::ldexp(1.0, -24) * absprod(i, j);
              EXPECT_LE(std::abs(static_cast<double>(y(i, j)) - ref(i, j)), bound)
                  << dtype_name(dt) << " " << core::isa_name(isa) << " k=" << k << " n=" << n << " [" << i << ", "
                  << j << "]";
            }
          // beta = 1 adds to what y held.
          MatrixF acc = MatrixF::Constant(n, out, 2.0f);
          core::xwt16(x.data(), n, static_cast<int>(k), w, 0, out, 1.0f, acc.data(), static_cast<int>(out));
          EXPECT_EQ(acc, (y.array() + 2.0f).matrix());
        }
      }
    }
  }
}

// Under RowwiseProducts (a decoding batch) the GEMV takes any number of rows, and each row's result is the
// bits of that row alone (the AVX-512 kernel widens each weight chunk once for up to four rows).
TEST(Gemm16, RowwiseProductsGiveEachRowItsOneRowBits) {
  IsaGuard guard;
  const core::RowwiseProducts rowwise;
  for (DType dt : {DType::F16, DType::BF16}) {
    for (std::int64_t k : {15, 64, 1000}) {
      const std::int64_t out = 37;  // 9 blocks of four rows and a tail
      const Matrix16 w = random16(dt, out, k, static_cast<std::uint32_t>(k) + 1);
      const MatrixF x = random_x(9, k, 5);
      for (Isa isa : available_isas()) {
        core::set_kernel_isa(isa);
        for (int n : {2, 3, 4, 5, 8, 9}) {
          MatrixF y(n, out);
          core::xwt16(x.data(), n, static_cast<int>(k), w, 0, out, 0.0f, y.data(), static_cast<int>(out));
          for (int i = 0; i < n; ++i) {
            MatrixF one(1, out);
            core::xwt16(x.data() + i * k, 1, static_cast<int>(k), w, 0, out, 0.0f, one.data(), static_cast<int>(out));
            EXPECT_EQ(y.row(i), one.row(0)) << dtype_name(dt) << " " << core::isa_name(isa) << " k=" << k << " n=" << n
                                            << " row " << i;
          }
        }
      }
    }
  }
}

// Rows beyond the GEMV's widen the block and call sgemm: bit-identical to sgemm on the widened block.
TEST(Gemm16, PanelPathIsBitIdenticalToSgemm) {
  IsaGuard guard;
  core::BlasSingleThreaded single;
  const std::int64_t k = 300, out = 70;
  const Matrix16 w = random16(DType::BF16, out, k, 3);
  const MatrixF wf = widen_ref(w);
  const int n = 9;
  const MatrixF x = random_x(n, k, 4);
  MatrixF ref(n, 40);
  core::sgemm_rm(false, true, n, 40, static_cast<int>(k), 1.0f, x.data(), static_cast<int>(k), wf.data() + 20 * k,
                 static_cast<int>(k), 0.0f, ref.data(), 40);
  for (Isa isa : available_isas()) {
    core::set_kernel_isa(isa);
    MatrixF y(n, 40);
    core::xwt16(x.data(), n, static_cast<int>(k), w, 20, 60, 0.0f, y.data(), 40);
    EXPECT_EQ(y, ref) << core::isa_name(isa);
  }
}

TEST(Gemm16, FirstNonFinite) {
  Matrix16 w = random16(DType::F16, 3, 5000, 5);
  EXPECT_EQ(core::first_non_finite(w), -1);
  auto v = std::make_shared<std::vector<std::uint16_t>>(w.data, w.data + w.size());
  (*v)[7777] = 0x7c00;  // F16 +Inf
  (*v)[9000] = 0x7e00;  // F16 NaN
  w.data = v->data();
  w.owned = v;
  EXPECT_EQ(core::first_non_finite(w), 7777);
  Matrix16 b = random16(DType::BF16, 2, 10, 6);
  auto vb = std::make_shared<std::vector<std::uint16_t>>(b.data, b.data + b.size());
  (*vb)[13] = 0xff80;  // BF16 −Inf
  b.data = vb->data();
  b.owned = vb;
  EXPECT_EQ(core::first_non_finite(b), 13);
}

// A Linear with stored matrices against the same module widened: bit-identical for more rows than the
// GEMV's (column blocks and row blocks), within the GEMV bound for one row; dense and factored with a
// block identity, on every ISA and 1 or 2 threads.
TEST(Gemm16, LinearStoredMatchesFloat32) {
  IsaGuard guard;
  const std::int64_t in = 96, out = 300, r = 40;
  model::Linear dense16, dense32, fact16, fact32;
  dense16.name = dense32.name = "dense";
  dense16.in = dense32.in = fact16.in = fact32.in = in;
  dense16.out = dense32.out = fact16.out = fact32.out = out;
  const Matrix16 w16 = random16(DType::BF16, out, in, 8);
  dense16.weight = w16;
  dense32.weight = widen_ref(w16);
  dense16.bias = dense32.bias = random_x(1, out, 9).row(0).transpose();
  fact16.name = fact32.name = "factored";
  const Matrix16 b16 = random16(DType::F16, out, r, 10), a16 = random16(DType::F16, r, in - r, 11);
  fact16.B = b16;
  fact16.A = a16;
  fact32.B = widen_ref(b16);
  fact32.A = widen_ref(a16);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(in));
  for (std::int64_t j = 0; j < in; ++j) perm[static_cast<std::size_t>(j)] = static_cast<std::int32_t>((j * 37) % in);
  fact16.perm = fact32.perm = perm;
  fact16.block_identity = fact32.block_identity = true;
  EXPECT_TRUE(fact16.factored());
  EXPECT_EQ(fact16.rank(), r);
  EXPECT_EQ(fact16.num_params(), fact32.num_params());
  EXPECT_EQ(fact16.bytes() * 2, fact32.bytes() + 4 * in);  // 16-bit matrices at half; perm counted once each
  EXPECT_EQ(dense16.dense_weight(), dense32.dense_weight());
  EXPECT_EQ(fact16.dense_weight(), fact32.dense_weight());
  for (Isa isa : available_isas()) {
    core::set_kernel_isa(isa);
    for (int threads : {1, 2}) {
      core::set_num_threads(threads);
      for (std::int64_t n : {1, 9, 300}) {
        const MatrixF x = random_x(n, in, static_cast<std::uint32_t>(n));
        for (auto [l16, l32] : {std::pair{&dense16, &dense32}, std::pair{&fact16, &fact32}}) {
          MatrixF y16, y32;
          model::linear_forward(*l16, x, y16);
          model::linear_forward(*l32, x, y32);
          if (n > core::kGemvRows) {
            EXPECT_EQ(y16, y32) << l16->name << " n=" << n << " " << core::isa_name(isa);
          } else {
            EXPECT_LE((y16 - y32).cwiseAbs().maxCoeff(), 1e-3f * (1.0f + y32.cwiseAbs().maxCoeff()))
                << l16->name << " " << core::isa_name(isa);
          }
        }
      }
    }
  }
  core::set_num_threads(0);
}

}  // namespace
}  // namespace latentllm::test
