#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/gemm.hpp"
#include "core/mapped_file.hpp"
#include "core/parallel.hpp"
#include "core/sha256.hpp"
#include "latentllm/threads.hpp"
#include "model/ops.hpp"
#include "latentllm/error.hpp"
#include "latentllm/tensor.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

// FIPS 180-4's examples, a message across the 56-byte padding boundary, and a file read in chunks.
TEST(Sha256, KnownDigests) {
  auto digest = [](std::string_view s) {
    core::Sha256 h;
    h.update(s);
    return h.hex();
  };
  EXPECT_EQ(digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  core::Sha256 split;  // the same message in pieces
  split.update("abcdbcdecdefdefgefghfghighij");
  split.update("hijkijkljklmklmnlmnomnopnopq");
  EXPECT_EQ(split.hex(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(digest(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const auto file = test::make_temp_dir("sha") / "a.bin";
  { std::ofstream(file, std::ios::binary) << million; }
  EXPECT_EQ(core::file_sha256(file), digest(million));
}

TEST(DType, HalfRoundTripsEveryFiniteValue) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    const float f = f16_to_f32(x);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), x) << "half bits " << h;
  }
}

TEST(DType, HalfKnownValuesAndRounding) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even gives 1.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_f16(70000.0f), 0x7c00);
}

TEST(DType, BFloat16) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, ParseRejectsUnknown) {
  EXPECT_EQ(parse_dtype("BF16"), DType::BF16);
  EXPECT_THROW(parse_dtype("I8"), FormatError);
}

TEST(Error, ContextIsPrependedAndTypeKept) {
  try {
    with_context("model.layers.3.mlp", [] { throw NumericError("non-finite weight"); });
    FAIL();
  } catch (const NumericError& e) {
    EXPECT_STREQ(e.what(), "model.layers.3.mlp: non-finite weight");
  }
}

TEST(Gemm, MatmulMatchesEigen) {
  MatrixF x = MatrixF::Random(37, 19), w = MatrixF::Random(11, 19), y;
  core::matmul_xwt(x, w, y);
  MatrixF ref = x * w.transpose();
  EXPECT_LT((y - ref).cwiseAbs().maxCoeff(), 1e-5f);
}

// Column blocks of the upper triangle, added in any order, then mirrored: the Gram matrix.
TEST(Gemm, SyrkUpperAddColumnsThenMirrorIsTheGram) {
  MatrixD x = MatrixD::Random(37, 13);  // [n, d] column-major; the row-major copy is xᵀ's storage
  const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> xr = x;
  MatrixD c = MatrixD::Identity(13, 13);
  for (const auto& [j0, j1] : {std::pair{8, 13}, std::pair{0, 3}, std::pair{3, 8}, std::pair{5, 5}}) {
    core::syrk_upper_add_columns(xr.data(), 37, 13, j0, j1, c);
  }
  EXPECT_EQ(c(5, 2), 0.0);  // the strict lower triangle is untouched
  EXPECT_THROW(core::syrk_upper_add_columns(xr.data(), 37, 13, 4, 14, c), Error);
  core::mirror_upper(c);
  const MatrixD ref = MatrixD::Identity(13, 13) + x.transpose() * x;
  EXPECT_LT((c - ref).cwiseAbs().maxCoeff(), 1e-12 * ref.cwiseAbs().maxCoeff());
  EXPECT_EQ(c, c.transpose());
}

// Tiled mirroring (64 × 64 tiles, a partial last one): the upper triangle copied below, itself unchanged.
TEST(Gemm, MirrorUpperCopiesTheUpperTriangleAcrossTiles) {
  const MatrixD a = MatrixD::Random(150, 150);
  MatrixD c = a;
  core::mirror_upper(c);
  EXPECT_EQ(MatrixD(c.triangularView<Eigen::Upper>()), MatrixD(a.triangularView<Eigen::Upper>()));
  EXPECT_EQ(c, c.transpose());
  EXPECT_EQ(c(149, 0), a(0, 149));
}

// The work threshold: a decode-sized product (one row through a 64 × 64 weight) is never split, a
// large one is whether or not a worker is awake, and one thread never splits.
TEST(Parallel, WorthSplittingOnlyAboveTheWorkThreshold) {
  core::set_num_threads(2);
  EXPECT_FALSE(core::worth_splitting(core::gemm_work(1, 64, 64)));
  EXPECT_FALSE(core::worth_splitting({}));
  EXPECT_TRUE(core::worth_splitting(core::gemm_work(512, 2048, 2048)));
  EXPECT_GT(core::estimated_seconds(core::gemm_work(2, 64, 64)), core::estimated_seconds(core::gemm_work(1, 64, 64)));
  core::set_num_threads(1);
  EXPECT_FALSE(core::worth_splitting(core::gemm_work(512, 2048, 2048)));
  core::set_num_threads(0);
}

// Below the threshold every chunk runs on the calling thread, the same chunks in the same order;
// above it all chunks still run exactly once, and an exception in a chunk reaches the caller.
TEST(Parallel, SmallWorkRunsTheSameChunksOnTheCaller) {
  core::set_num_threads(2);
  const auto caller = std::this_thread::get_id();
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
  bool elsewhere = false;
  core::parallel_for(10, 3, core::gemm_work(1, 8, 8), [&](std::int64_t b, std::int64_t e) {
    elsewhere = elsewhere || std::this_thread::get_id() != caller;
    chunks.emplace_back(b, e);
  });
  EXPECT_FALSE(elsewhere);
  EXPECT_EQ(chunks, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 3}, {3, 6}, {6, 9}, {9, 10}}));

  std::vector<std::atomic<int>> runs(1000);
  const core::Work big = core::gemm_work(1024, 1024, 1024);
  for (int rep = 0; rep < 200; ++rep) {
    core::parallel_for(1000, 7, big, [&](std::int64_t b, std::int64_t e) {
      for (auto i = b; i < e; ++i) runs[static_cast<std::size_t>(i)]++;
    });
  }
  for (const auto& r : runs) EXPECT_EQ(r.load(), 200);
  EXPECT_THROW(core::parallel_for(100, 1, big, [](std::int64_t b, std::int64_t) {
    if (b == 57) throw std::runtime_error("chunk 57");
  }), std::runtime_error);
  core::set_num_threads(0);
}

// The weights' finiteness check: any NaN or ±Inf anywhere (a vector tail included), never a finite value
// however large; the row-major matrix check names the first one.
// The copy holds the same bytes from a 2 MiB boundary (where transparent huge pages can back it),
// for sizes below, at and above a huge page, and an empty one.
TEST(MappedFile, CopyToHugePagesSameBytesAligned) {
  for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{2} << 20, (std::size_t{2} << 20) + 3}) {
    std::vector<unsigned char> src(n);
    for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
    const auto copy = core::copy_to_huge_pages(src.data(), n);
    ASSERT_NE(copy, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(copy.get()) % (std::uintptr_t{2} << 20), 0u) << n;
    EXPECT_EQ(n == 0 ? 0 : std::memcmp(copy.get(), src.data(), n), 0) << n;
  }
}

TEST(Ops, AllFiniteFindsEveryNonFiniteValue) {
  std::vector<float> v(1003, 1.0f);
  v[17] = std::numeric_limits<float>::max();
  v[18] = -std::numeric_limits<float>::max();
  EXPECT_TRUE(model::all_finite(v.data(), static_cast<std::int64_t>(v.size())));
  EXPECT_TRUE(model::all_finite(v.data(), 0));
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    for (const std::size_t at : {std::size_t{0}, std::size_t{500}, v.size() - 1}) {
      std::vector<float> w = v;
      w[at] = bad;
      EXPECT_FALSE(model::all_finite(w.data(), static_cast<std::int64_t>(w.size()))) << bad << " at " << at;
    }
  }
  MatrixF m = MatrixF::Ones(70, 33);
  m(41, 7) = std::numeric_limits<float>::infinity();
  m(52, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(test::error_of<NumericError>([&] { model::check_finite(m, "w"); }),
            "w: non-finite value at [41, 7] (expected finite, got inf)");
}

TEST(Support, Sha256KnownVector) {
  EXPECT_EQ(test::sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace latentllm
