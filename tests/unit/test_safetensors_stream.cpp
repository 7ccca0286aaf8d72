// io::SafetensorsWriter (streaming): byte identity with write_safetensors (whole tensors, chunked
// appends, buffer flushes, empty tensors and files), every error message (docs/ERRORS.md section
// "Streaming safetensors writer", checked row by row), the temporary removed when not finished, and
// a refused append leaving the writer usable.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "errors_doc.hpp"
#include "io/safetensors_header.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"

namespace latentllm::io {
namespace {

namespace fs = std::filesystem;

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Owned tensors for both writers.
struct Fixture {
  std::vector<std::vector<float>> data;
  std::vector<TensorSpec> specs;

  void add(std::string name, DType dtype, std::vector<std::int64_t> shape, unsigned seed) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    data.push_back(random_values(n, seed));
    specs.push_back({std::move(name), dtype, std::move(shape)});
  }
  std::vector<TensorToWrite> to_write() const {
    std::vector<TensorToWrite> out;
    for (std::size_t i = 0; i < specs.size(); ++i) out.push_back({specs[i].name, specs[i].dtype, specs[i].shape, data[i]});
    return out;
  }
};

// Streams every tensor in appends of at most `chunk` values (0: one append per tensor).
void stream(const fs::path& p, const Fixture& f, std::size_t chunk, const std::map<std::string, std::string>& meta) {
  fs::remove(p);
  SafetensorsWriter w(p, f.specs, meta);
  for (std::size_t i = 0; i < f.specs.size(); ++i) {
    if (!f.data[i].empty()) {
      EXPECT_EQ(w.current_tensor(), i);  // empty tensors are skipped
    }
    const std::span<const float> all(f.data[i]);
    const std::size_t step = chunk == 0 ? std::max<std::size_t>(all.size(), 1) : chunk;
    for (std::size_t off = 0; off < all.size(); off += step) w.append(all.subspan(off, std::min(step, all.size() - off)));
  }
  EXPECT_EQ(w.current_tensor(), f.specs.size());
  EXPECT_FALSE(fs::exists(p));  // appears only at finish()
  w.finish();
  EXPECT_EQ(w.bytes_written(), w.file_bytes());
  EXPECT_EQ(fs::file_size(p), w.file_bytes());
}

Fixture mixed() {
  Fixture f;
  f.add("model.embed_tokens.weight", DType::BF16, {37, 16}, 1);
  f.add("empty", DType::F32, {0, 5}, 2);
  f.add("model.layers.0.self_attn.q_proj.bias", DType::F16, {7}, 3);  // odd byte count before an F32
  f.add("scalar", DType::F32, {}, 4);
  f.add("cube", DType::F32, {3, 4, 5}, 5);
  f.add("h", DType::F16, {11, 3}, 6);
  return f;
}

TEST(SafetensorsStream, ByteIdenticalToWriteSafetensors) {
  const fs::path dir = test::make_temp_dir("sts");
  const Fixture f = mixed();
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "stream"}};
  write_safetensors(dir / "ref.safetensors", f.to_write(), meta);
  const std::string ref = file_bytes(dir / "ref.safetensors");
  for (std::size_t chunk : {0, 1, 7, 64}) {
    SCOPED_TRACE(chunk);
    stream(dir / "s.safetensors", f, chunk, meta);
    EXPECT_EQ(file_bytes(dir / "s.safetensors"), ref);
  }
  // No tensors, with and without metadata.
  for (const auto& m : {std::map<std::string, std::string>{}, meta}) {
    write_safetensors(dir / "ref0.safetensors", {}, m);
    SafetensorsWriter w(dir / "s0.safetensors", {}, m);
    w.finish();
    EXPECT_EQ(file_bytes(dir / "s0.safetensors"), file_bytes(dir / "ref0.safetensors"));
  }
}

// More than the 8 MiB buffer, with chunk sizes that do not divide it.
TEST(SafetensorsStream, LargeTensorsAcrossBufferFlushes) {
  const fs::path dir = test::make_temp_dir("sts");
  Fixture f;
  f.add("a", DType::F32, {1500, 1500}, 7);  // 9 MB
  f.add("b", DType::BF16, {3, 1000, 1001}, 8);
  f.add("c", DType::F16, {2999999}, 9);
  write_safetensors(dir / "ref.safetensors", f.to_write());
  stream(dir / "s.safetensors", f, 1'000'003, {});
  EXPECT_EQ(file_bytes(dir / "s.safetensors"), file_bytes(dir / "ref.safetensors"));
  SafetensorsFile back(dir / "s.safetensors");
  EXPECT_EQ(back.find("b")->shape, (std::vector<std::int64_t>{3, 1000, 1001}));
}

TEST(SafetensorsStream, TemporaryRemovedWhenNotFinished) {
  const fs::path dir = test::make_temp_dir("sts");
  const Fixture f = mixed();
  {
    SafetensorsWriter w(dir / "x.safetensors", f.specs);
    w.append(std::span<const float>(f.data[0]).first(5));
    EXPECT_TRUE(fs::exists(fs::path(dir / "x.safetensors").string() + ".tmp." + std::to_string(::getpid())));
  }
  EXPECT_TRUE(fs::is_empty(dir));
  {
    SafetensorsWriter w(dir / "x.safetensors", f.specs);
    EXPECT_THROW(w.finish(), FormatError);  // incomplete: nothing renamed into place
  }
  EXPECT_TRUE(fs::is_empty(dir));
  {  // moved, then destroyed: one temporary, removed once
    SafetensorsWriter a(dir / "x.safetensors", f.specs);
    SafetensorsWriter b(std::move(a));
    b = SafetensorsWriter(dir / "y.safetensors", f.specs);  // x's temporary removed here
    EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
  }
  EXPECT_TRUE(fs::is_empty(dir));
}

// A refused append (overrun, overflow) writes nothing: the writer goes on and the file is exact.
TEST(SafetensorsStream, RefusedAppendLeavesWriterUsable) {
  const fs::path dir = test::make_temp_dir("sts");
  Fixture f;
  f.add("w", DType::F16, {2, 4}, 1);
  f.data[0][5] = 65519.0f;  // rounds down to 65504: representable, accepted
  write_safetensors(dir / "ref.safetensors", f.to_write());
  SafetensorsWriter w(dir / "s.safetensors", f.specs);
  const std::vector<float> too_many(9, 1.0f), overflow = {1.0f, 70000.0f};
  EXPECT_THROW(w.append(too_many), FormatError);
  EXPECT_THROW(w.append(overflow), NumericError);
  const std::vector<float> special = {std::numeric_limits<float>::infinity(), std::nanf("")};
  SafetensorsWriter s(dir / "special.safetensors", {{"s", DType::F16, {2}}});
  s.append(special);  // non-finite values are stored, not refused (as checkpoint::save)
  s.finish();
  w.append(std::span<const float>(f.data[0]).first(3));
  w.append(std::span<const float>(f.data[0]).subspan(3));
  w.finish();
  EXPECT_EQ(file_bytes(dir / "s.safetensors"), file_bytes(dir / "ref.safetensors"));
}

// encode_values runs the conversions inline, where the compiler vectorizes them: the same bits as the
// out-of-line f32_to_f16 / f32_to_bf16 on a sample of every float and on every pattern near the
// rounding boundaries (F16 subnormals and overflow, BF16 overflow, signs, NaN and Inf).
TEST(SafetensorsStream, VectorizedEncodingMatchesTheScalarConversions) {
  std::vector<std::uint32_t> bits;
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 97) bits.push_back(static_cast<std::uint32_t>(b));
  for (const std::uint32_t center : {0x38800000u, 0x33000000u, 0x477ff000u, 0x7f7f8000u, 0x7f800000u, 0u}) {
    for (std::uint32_t d = 0; d < 0x4000; ++d) {
      for (const std::uint32_t sign : {0u, 0x80000000u}) {
        bits.push_back(sign | (center + d));
        bits.push_back(sign | (center - d));
      }
    }
  }
  std::vector<float> values(bits.size());
  std::memcpy(values.data(), bits.data(), bits.size() * 4);
  std::vector<std::uint16_t> got(values.size());
  for (DType dt : {DType::F16, DType::BF16}) {
    detail::encode_values(dt, values, reinterpret_cast<std::byte*>(got.data()));
    std::size_t bad = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::uint16_t want = dt == DType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      if (got[i] != want && bad++ < 5) ADD_FAILURE() << dtype_name(dt) << " of bits " << std::hex << bits[i];
    }
    EXPECT_EQ(bad, 0u) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace latentllm::io

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;

const std::vector<float> kOnes(16, 1.0f);

// A writer for `specs` at a fresh path, fed `appends` value counts (of kOnes), then finished if asked.
CaseFn stream_case(std::vector<io::TensorSpec> specs, std::vector<std::size_t> appends, bool finish = false,
                   std::map<std::string, std::string> meta = {}) {
  return lib([=] {
    io::SafetensorsWriter w(make_temp_dir("err-stream") / "x.safetensors", specs, meta);
    for (std::size_t n : appends) w.append(std::span<const float>(kOnes).first(n));
    if (finish) w.finish();
  });
}

CaseFn overflow_case(DType dtype, float x) {
  return lib([=] {
    io::SafetensorsWriter w(make_temp_dir("err-stream") / "x.safetensors", {{"w", dtype, {2, 3}}});
    const std::vector<float> v = {0, 0, 0, 0, 0, x};
    w.append(v);
  });
}

TEST(ErrorsDoc, StreamingSafetensors) {
  using S = std::vector<io::TensorSpec>;
  check_section(
      "Streaming safetensors writer (`io::SafetensorsWriter`)",
      {
          {"stream-name", {stream_case(S{{"a", DType::F32, {2}}, {"a", DType::F16, {2}}}, {}),
                           stream_case(S{{"", DType::F32, {2}}}, {}), stream_case(S{{"__metadata__", DType::F32, {2}}}, {})}},
          {"stream-shape", {stream_case(S{{"a", DType::F32, {-2, -3}}}, {}),
                            stream_case(S{{"a", DType::F32, {std::int64_t{1} << 62, 4}}}, {}),
                            stream_case(S{{"a", DType::F32, {std::int64_t{1} << 61}}, {"b", DType::F32, {std::int64_t{1} << 61}}}, {})}},
          {"stream-utf8", {stream_case(S{{"\xff", DType::F32, {2}}}, {}), stream_case(S{}, {}, false, {{"k", "\xfe"}})}},
          {"stream-create", {lib([] { io::SafetensorsWriter w("/nonexistent-dir/x.safetensors", {}); })}},
          {"stream-overrun", {stream_case(S{{"a", DType::F32, {2, 4}}, {"b", DType::F32, {2}}}, {6, 4})}},
          {"stream-after-last", {stream_case(S{{"a", DType::F32, {2}}, {"b", DType::F32, {1}}}, {2, 1, 3})}},
          {"stream-short", {stream_case(S{{"a", DType::F32, {2, 4}}}, {6}, true),
                            stream_case(S{{"b", DType::F32, {1}}, {"a", DType::F32, {2, 4}}}, {1, 6}, true)}},
          {"stream-overflow", {overflow_case(DType::F16, 70000.0f), overflow_case(DType::F16, -65520.0f),
                               overflow_case(DType::BF16, std::numeric_limits<float>::max())}},
          {"stream-write", {lib([] {  // the temporary is a link to /dev/full: every write fails (ENOSPC)
                              const fs::path p = make_temp_dir("err-stream") / "x.safetensors";
                              fs::create_symlink("/dev/full", p.string() + ".tmp." + std::to_string(::getpid()));
                              io::SafetensorsWriter w(p, {{"a", DType::F32, {2}}});
                              w.append(std::span<const float>(kOnes).first(2));
                              w.finish();
                            }),
                            lib([] {  // the destination is a non-empty directory
                              const fs::path p = make_temp_dir("err-stream") / "x.safetensors";
                              fs::create_directories(p / "sub");
                              io::SafetensorsWriter w(p, {});
                              w.finish();
                            })}},
          {"stream-closed", {lib([] {
                               io::SafetensorsWriter w(make_temp_dir("err-stream") / "x.safetensors", {});
                               w.finish();
                               w.finish();
                             }),
                             lib([] {
                               const fs::path p = make_temp_dir("err-stream") / "x.safetensors";
                               fs::create_directories(p / "sub");
                               io::SafetensorsWriter w(p, {});
                               try {
                                 w.finish();
                               } catch (const IoError&) {
                               }
                               w.append(std::span<const float>(kOnes).first(1));
                             })}},
      });
}

}  // namespace
}  // namespace latentllm::test
