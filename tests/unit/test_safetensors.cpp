// safetensors reader, writer and sharded store: one corrupted file per failure mode (each asserting
// the exception type and that the message names the file, the tensor and the expected/got values),
// exact round trips, the reference serializer's byte layout, and the real models in ../shared.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "latentllm/error.hpp"
#include "latentllm/io.hpp"
#include "test_support.hpp"

namespace latentllm::io {
namespace {

namespace fs = std::filesystem;

// ---- helpers --------------------------------------------------------------------------------

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file with the given header text, `data_bytes` data bytes (0, 1, 2, ...) and a header
// length field that is header.size() unless `declared` overrides it.
fs::path make_file(const std::string& tag, const std::string& header, std::size_t data_bytes,
                   std::optional<std::uint64_t> declared = std::nullopt) {
  const fs::path p = test::make_temp_dir("st") / (tag + ".safetensors");
  std::string data(data_bytes, '\0');
  for (std::size_t i = 0; i < data_bytes; ++i) data[i] = static_cast<char>(i & 0xff);
  write_bytes(p, le64(declared.value_or(header.size())) + header + data);
  return p;
}

// The valid base case: "a" F32 [2, 3] at [0, 24), "b" F16 [4] at [24, 32).
const char* const kGoodHeader =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("b":{"dtype":"F16","shape":[4],"data_offsets":[24,32]}})";



// Opens a corrupted file, expects a FormatError naming the file and containing every part.
void expect_format_error(const fs::path& p, std::initializer_list<std::string> parts) {
  const std::string msg = test::error_of<FormatError>([&] { SafetensorsFile f(p); });
  test::expect_contains(msg, {p.string() + ": "});
  test::expect_contains(msg, parts);
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, std::uint64_t begin,
                  std::uint64_t end) {
  return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":[{},{}]}})", name, dtype, shape, begin, end);
}

// ---- valid files ----------------------------------------------------------------------------

TEST(Safetensors, ReadsValidFile) {
  const auto p = make_file("good", kGoodHeader, 32);
  SafetensorsFile f(p);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "a");
  EXPECT_EQ(f.tensors()[1].name, "b");
  const TensorView* a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::F32);
  EXPECT_EQ(a->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(std::to_integer<int>(a->data[5]), 5);  // data bytes were 0, 1, 2, ...
  const TensorView* b = f.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::F16);
  EXPECT_EQ(std::to_integer<int>(b->data[0]), 24);
  EXPECT_EQ(f.find("c"), nullptr);
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST(Safetensors, FileOrderIsOffsetOrderAndEmptyFilesAreValid) {
  // "z" sorts last by name but is stored first; zero-size tensors and scalars are legal.
  const std::string h = "{" + entry("z", "F32", "[1]", 0, 4) + "," + entry("e", "BF16", "[0,5]", 4, 4) + "," +
                        entry("s", "F32", "[]", 4, 8) + "}";
  SafetensorsFile f(make_file("order", h, 8));
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensors()[0].name, "z");
  EXPECT_EQ(f.tensors()[1].name, "e");
  EXPECT_EQ(f.tensors()[1].numel(), 0);
  EXPECT_EQ(f.tensors()[2].numel(), 1);
  SafetensorsFile empty(make_file("empty", "{}      ", 0));
  EXPECT_TRUE(empty.tensors().empty());
}

// ---- one corrupted file per failure mode ------------------------------------------------------

TEST(SafetensorsCorrupt, FileShorterThanHeaderLength) {
  const auto p = test::make_temp_dir("st") / "short.safetensors";
  write_bytes(p, "abc");
  expect_format_error(p, {"expected at least 8 bytes", "got 3"});
}

TEST(SafetensorsCorrupt, HeaderLengthBeyondFile) {
  const std::string h = kGoodHeader;
  const auto p = make_file("beyond", h, 32, 1000);
  expect_format_error(p, {"header length beyond the end of the file",
                          fmt::format("expected <= {}, got 1000", h.size() + 32)});
}

TEST(SafetensorsCorrupt, HeaderTooLarge) {
  const auto p = make_file("huge", kGoodHeader, 32, 100'000'001);
  expect_format_error(p, {"header length too large", "expected <= 100000000, got 100000001"});
}

TEST(SafetensorsCorrupt, InvalidJson) {
  expect_format_error(make_file("badjson", R"({"a":{"dtype":"F32",)", 0), {"header is not valid JSON"});
  // Invalid UTF-8 inside a string is invalid JSON too (the reference requires a UTF-8 header).
  expect_format_error(make_file("badutf8", "{\"\xff\":1}", 0), {"header is not valid JSON"});
}

TEST(SafetensorsCorrupt, HeaderNotAnObject) {
  expect_format_error(make_file("array", "[1,2,3]", 0), {"header (expected a JSON object, got array)"});
}

TEST(SafetensorsCorrupt, UnknownAndUnsupportedDtypes) {
  expect_format_error(make_file("f17", "{" + entry("w", "F17", "[2]", 0, 8) + "}", 8),
                      {"tensor w: unknown dtype (expected F32, F16, BF16 or U8, got F17)"});
  for (const char* dtype : {"I8", "F64", "BOOL", "I64"}) {
    expect_format_error(make_file(dtype, "{" + entry("model.w", dtype, "[8]", 0, 8) + "}", 8),
                        {fmt::format("tensor model.w: unsupported dtype (expected F32, F16, BF16 or U8, got {})", dtype)});
  }
  expect_format_error(make_file("dtypenum", R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
                      {"tensor w: dtype (expected a string, got 4)"});
}

TEST(SafetensorsCorrupt, ShapeTimesDtypeIsNotByteLength) {
  const std::string name = "model.decoder.embed_tokens.weight";
  expect_format_error(make_file("bytelen", "{" + entry(name, "F16", "[50272,256]", 0, 100) + "}", 100),
                      {"tensor " + name + ": byte length (expected 25739264, got 100)"});
}

TEST(SafetensorsCorrupt, ShapeProductOverflows) {
  expect_format_error(make_file("overflow", "{" + entry("w", "F32", "[4294967296,4294967296,2]", 0, 0) + "}", 0),
                      {"tensor w: byte length of shape [4294967296, 4294967296, 2]", "overflows"});
}

TEST(SafetensorsCorrupt, OffsetsOutOfRange) {
  const std::string h = "{" + entry("a", "F32", "[2,3]", 0, 24) + "," + entry("b", "F16", "[4]", 24, 32) + "}";
  expect_format_error(make_file("range", h, 28), {"tensor b: data_offsets [24, 32] beyond the data region",
                                                  "expected end <= 28, got 32"});
}

TEST(SafetensorsCorrupt, BeginAfterEnd) {
  expect_format_error(make_file("backwards", "{" + entry("w", "F32", "[0]", 8, 4) + "}", 8),
                      {"tensor w: data_offsets (expected begin <= end, got [8, 4])"});
}

TEST(SafetensorsCorrupt, OverlappingOffsets) {
  const std::string h = "{" + entry("a", "F32", "[2,3]", 0, 24) + "," + entry("b", "F16", "[4]", 16, 24) + "}";
  expect_format_error(make_file("overlap", h, 24),
                      {"tensor b: data_offsets [16, 24] overlap tensor a (expected begin 24, got 16)"});
}

TEST(SafetensorsCorrupt, GapBetweenTensors) {
  const std::string h = "{" + entry("a", "F32", "[2,3]", 0, 24) + "," + entry("b", "F16", "[4]", 28, 36) + "}";
  expect_format_error(make_file("gap", h, 36),
                      {"tensor b: data_offsets [28, 36] leave a gap of 4 bytes (expected begin 24, got 28)"});
  // A gap before the first tensor.
  expect_format_error(make_file("gap0", "{" + entry("a", "F32", "[1]", 4, 8) + "}", 8),
                      {"tensor a: data_offsets [4, 8] leave a gap of 4 bytes (expected begin 0, got 4)"});
}

TEST(SafetensorsCorrupt, TrailingBytes) {
  expect_format_error(make_file("trailing", kGoodHeader, 40),
                      {"data region size (expected 32 bytes", "got 40", "8 trailing bytes"});
}

TEST(SafetensorsCorrupt, BadShapes) {
  expect_format_error(make_file("negshape", "{" + entry("w", "F32", "[2,-3]", 0, 24) + "}", 24),
                      {"tensor w: shape (expected an array of non-negative integers, got [2,-3])"});
  expect_format_error(make_file("floatshape", "{" + entry("w", "F32", "[2.5,3]", 0, 24) + "}", 24),
                      {"tensor w: shape (expected an array of non-negative integers, got [2.5,3])"});
  expect_format_error(make_file("strshape", "{" + entry("w", "F32", R"(["2",3])", 0, 24) + "}", 24),
                      {"tensor w: shape (expected an array of non-negative integers"});
  expect_format_error(make_file("deepshape", "{" + entry("w", "F32", "[[2],3]", 0, 24) + "}", 24),
                      {"header nesting"});
}

TEST(SafetensorsCorrupt, MalformedEntries) {
  expect_format_error(make_file("nodtype", R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4),
                      {"tensor w: missing key dtype"});
  expect_format_error(make_file("notobj", R"({"w":[1,2]})", 0),
                      {"tensor w (expected an object with dtype, shape and data_offsets, got [1,2])"});
  expect_format_error(make_file("offs3", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4),
                      {"tensor w: data_offsets (expected [begin, end] as non-negative integers, got [0,4,8])"});
  expect_format_error(make_file("meta", R"({"__metadata__":{"k":1}})", 0),
                      {"__metadata__.k (expected a string, got 1)"});
  // The reference keeps one of two equal keys silently; we refuse the ambiguity.
  const std::string dup = "{" + entry("w", "F32", "[1]", 0, 4) + "," + entry("w", "F32", "[1]", 4, 8) + "}";
  expect_format_error(make_file("dupkey", dup, 8), {R"(duplicate key "w")"});
}

TEST(SafetensorsCorrupt, MissingFileIsIoError) {
  const fs::path p = test::make_temp_dir("st") / "absent.safetensors";
  test::expect_contains(test::error_of<IoError>([&] { SafetensorsFile f(p); }), {p.string(), "cannot open"});
}

// ---- writer -----------------------------------------------------------------------------------

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(SafetensorsWriter, RoundTripsF32F16Bf16) {
  const auto w = random_values(6 * 5, 1), b = random_values(7, 2), h = random_values(3 * 4, 3);
  const std::vector<TensorToWrite> ts = {{"layer.w", DType::F32, {6, 5}, w},
                                         {"layer.b", DType::F16, {7}, b},
                                         {"layer.h", DType::BF16, {3, 4}, h}};
  const fs::path p = test::make_temp_dir("stw") / "rt.safetensors";
  write_safetensors(p, ts, {{"format", "pt"}, {"note", "round trip"}});

  SafetensorsFile f(p);
  ASSERT_EQ(f.tensors().size(), 3u);
  for (std::size_t i = 0; i < ts.size(); ++i) {  // the caller's order is the file order
    const TensorView& v = f.tensors()[i];
    EXPECT_EQ(v.name, ts[i].name);
    EXPECT_EQ(v.dtype, ts[i].dtype);
    EXPECT_EQ(v.shape, ts[i].shape);
    const auto got = v.to_f32();
    ASSERT_EQ(got.size(), ts[i].data.size());
    for (std::size_t j = 0; j < got.size(); ++j) {
      const float x = ts[i].data[j];
      const float want = ts[i].dtype == DType::F32   ? x
                         : ts[i].dtype == DType::F16 ? f16_to_f32(f32_to_f16(x))
                                                     : bf16_to_f32(f32_to_bf16(x));
      EXPECT_EQ(got[j], want) << v.name << "[" << j << "]";
    }
  }
  EXPECT_EQ(f.metadata().at("note"), "round trip");
  // Values exactly representable in the narrow types come back unchanged.
  const std::vector<float> exact = {0.0f, -1.0f, 0.5f, 1024.0f, -0.375f, 3.0f};
  const std::vector<TensorToWrite> ex = {{"h", DType::F16, {6}, exact}, {"bf", DType::BF16, {2, 3}, exact}};
  write_safetensors(p, ex);  // overwrite in place
  SafetensorsFile g(p);
  EXPECT_EQ(g.find("h")->to_f32(), exact);
  EXPECT_EQ(g.find("bf")->to_f32(), exact);
  EXPECT_TRUE(g.metadata().empty());
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The byte layouts the reference serializer's own tests assert (safetensors tensor.rs
// test_serialization, test_serialization_forced_alignement, test_empty).
TEST(SafetensorsWriter, MatchesReferenceSerializerBytes) {
  const std::vector<float> v = {0, 1, 2, 3, 4, 5};
  const fs::path dir = test::make_temp_dir("stw");
  std::string data(24, '\0');
  std::memcpy(data.data(), v.data(), 24);

  const std::vector<TensorToWrite> a = {{"attn.0", DType::F32, {1, 2, 3}, v}};
  write_safetensors(dir / "a.safetensors", a);
  EXPECT_EQ(file_bytes(dir / "a.safetensors"),
            le64(64) + R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + data);

  const std::vector<TensorToWrite> b = {{"attn0", DType::F32, {1, 1, 2, 3}, v}};
  write_safetensors(dir / "b.safetensors", b);
  EXPECT_EQ(file_bytes(dir / "b.safetensors"),
            le64(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + "       " + data);

  write_safetensors(dir / "c.safetensors", {});
  EXPECT_EQ(file_bytes(dir / "c.safetensors"), le64(8) + "{}      ");
  write_safetensors(dir / "d.safetensors", {}, {{"framework", "pt"}});
  EXPECT_EQ(file_bytes(dir / "d.safetensors"), le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(SafetensorsWriter, RejectsInvalidInput) {
  const fs::path p = test::make_temp_dir("stw") / "bad.safetensors";
  const std::vector<float> v(6, 1.0f);
  const std::vector<TensorToWrite> dup = {{"w", DType::F32, {6}, v}, {"w", DType::F16, {2, 3}, v}};
  test::expect_contains(test::error_of<FormatError>([&] { write_safetensors(p, dup); }), {p.string(), R"("w")", "unique"});
  const std::vector<TensorToWrite> size = {{"w", DType::F32, {2, 4}, v}};
  test::expect_contains(test::error_of<FormatError>([&] { write_safetensors(p, size); }),
                  {p.string(), "tensor w: value count for shape [2, 4] (expected 8, got 6)"});
  const std::vector<TensorToWrite> meta = {{"__metadata__", DType::F32, {6}, v}};
  EXPECT_THROW(write_safetensors(p, meta), FormatError);
  const std::vector<TensorToWrite> neg = {{"w", DType::F32, {-2, -3}, v}};
  EXPECT_THROW(write_safetensors(p, neg), FormatError);
  const std::vector<TensorToWrite> utf8 = {{"w\xff", DType::F32, {6}, v}};
  test::expect_contains(test::error_of<FormatError>([&] { write_safetensors(p, utf8); }),
                  {p.string(), "header cannot be encoded"});
  EXPECT_FALSE(fs::exists(p));  // nothing written
  const fs::path nodir = p.parent_path() / "no-such-dir" / "x.safetensors";
  const std::vector<TensorToWrite> ok = {{"w", DType::F32, {6}, v}};
  test::expect_contains(test::error_of<IoError>([&] { write_safetensors(nodir, ok); }), {"no-such-dir"});
}

// ---- TensorStore: single file and shards ------------------------------------------------------

TEST(TensorStore, SingleFileGetAndShapeCheck) {
  const fs::path dir = test::make_temp_dir("store");
  const auto v = random_values(6, 4);
  const std::vector<TensorToWrite> ts = {{"m.w", DType::F32, {2, 3}, v}};
  write_safetensors(dir / "model.safetensors", ts);
  TensorStore s = TensorStore::open(dir);
  EXPECT_TRUE(s.has("m.w"));
  EXPECT_FALSE(s.has("m.b"));
  const TensorView* view = &s.get("m.w");
  const std::vector<std::int64_t> good = {2, 3}, bad = {3, 2};
  EXPECT_EQ(&s.get("m.w", good), view);
  test::expect_contains(test::error_of<FormatError>([&] { s.get("m.w", bad); }),
                  {(dir / "model.safetensors").string(), "tensor m.w: shape (expected [3, 2], got [2, 3])"});
  test::expect_contains(test::error_of<FormatError>([&] { s.get("m.b"); }), {dir.string(), "missing tensor m.b"});
  TensorStore moved = std::move(s);  // views stay valid across moves
  EXPECT_EQ(&moved.get("m.w"), view);
  EXPECT_EQ(moved.get("m.w").to_f32(), v);
}

// Writes two shards and an index; `weight_map` overrides the default mapping.
fs::path make_sharded(const std::string& weight_map_json = "") {
  const fs::path dir = test::make_temp_dir("shard");
  static const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  const std::vector<TensorToWrite> s1 = {{"x", DType::F32, {2, 3}, v}, {"y", DType::F16, {6}, v}};
  const std::vector<TensorToWrite> s2 = {{"z", DType::BF16, {3, 2}, v}};
  write_safetensors(dir / "model-00001-of-00002.safetensors", s1, {{"format", "pt"}});
  write_safetensors(dir / "model-00002-of-00002.safetensors", s2, {{"format", "pt"}, {"shard", "2"}});
  const std::string wm = weight_map_json.empty()
                             ? R"({"x":"model-00001-of-00002.safetensors","y":"model-00001-of-00002.safetensors",)"
                               R"("z":"model-00002-of-00002.safetensors"})"
                             : weight_map_json;
  write_bytes(dir / "model.safetensors.index.json", R"({"metadata":{"total_size":36},"weight_map":)" + wm + "}");
  return dir;
}

TEST(TensorStore, LoadsShardedIndex) {
  const fs::path dir = make_sharded();
  TensorStore s = TensorStore::open(dir);
  EXPECT_EQ(s.names(), (std::vector<std::string>{"x", "y", "z"}));
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(s.get("x").to_f32(), v);
  EXPECT_EQ(s.get("y").to_f32(), v);
  EXPECT_EQ(s.get("z").to_f32(), v);
  EXPECT_EQ(s.get("z").dtype, DType::BF16);
  EXPECT_EQ(s.metadata().at("format"), "pt");
  EXPECT_EQ(s.metadata().at("shard"), "2");
  EXPECT_EQ(s.dir(), dir);
}

TEST(TensorStore, DuplicateTensorAcrossShards) {
  const fs::path dir = make_sharded();
  const std::vector<float> v = {7};
  const std::vector<TensorToWrite> s2 = {{"z", DType::F32, {1}, v}, {"x", DType::F32, {1}, v}};
  write_safetensors(dir / "model-00002-of-00002.safetensors", s2);
  test::expect_contains(test::error_of<FormatError>([&] { TensorStore::open(dir); }),
                  {dir.string(), "tensor x stored twice", "model-00001-of-00002.safetensors",
                   "model-00002-of-00002.safetensors"});
}

TEST(TensorStore, MissingShardFile) {
  const fs::path dir = make_sharded(R"({"x":"model-00001-of-00002.safetensors","q":"model-00003.safetensors"})");
  test::expect_contains(test::error_of<IoError>([&] { TensorStore::open(dir); }),
                  {"model.safetensors.index.json", (dir / "model-00003.safetensors").string(), "tensor q",
                   "does not exist"});
}

TEST(TensorStore, WeightMapNamesMissingTensor) {
  const fs::path dir = make_sharded(R"({"x":"model-00001-of-00002.safetensors","w":"model-00002-of-00002.safetensors"})");
  test::expect_contains(test::error_of<FormatError>([&] { TensorStore::open(dir); }),
                  {(dir / "model.safetensors.index.json").string(), "tensor w listed in weight_map is missing",
                   (dir / "model-00002-of-00002.safetensors").string()});
}

TEST(TensorStore, BadIndexAndMissingFiles) {
  const fs::path dir = make_sharded(R"({"x":"../model-00001-of-00002.safetensors"})");
  test::expect_contains(test::error_of<FormatError>([&] { TensorStore::open(dir); }),
                  {"weight_map.x (expected a shard file name in the same directory"});
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": )");
  test::expect_contains(test::error_of<FormatError>([&] { TensorStore::open(dir); }),
                  {(dir / "model.safetensors.index.json").string(), "not valid JSON"});
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": []})");
  EXPECT_THROW(TensorStore::open(dir), FormatError);
  const fs::path empty = test::make_temp_dir("store");
  test::expect_contains(test::error_of<IoError>([&] { TensorStore::open(empty); }),
                  {empty.string(), "no model.safetensors or model.safetensors.index.json"});
}

TEST(TensorStore, CorruptShardNamesTheShard) {
  const fs::path dir = make_sharded();
  write_bytes(dir / "model-00002-of-00002.safetensors", le64(5000) + "{}");
  test::expect_contains(test::error_of<FormatError>([&] { TensorStore::open(dir); }),
                  {(dir / "model-00002-of-00002.safetensors").string(), "header length beyond the end of the file"});
}

// ---- the real models in ../shared -------------------------------------------------------------

TEST(SharedModels, OptTinyF16) {
  const fs::path dir = test::shared_path("models/opt-tiny");
  TensorStore s = TensorStore::open(dir);
  EXPECT_EQ(s.names().size(), 100u);  // 2 embeddings + final norm (2) + 6 layers × 16
  EXPECT_EQ(s.names().front(), "model.decoder.embed_positions.weight");
  const std::vector<std::int64_t> emb = {50272, 256}, pos = {514, 256}, fc2 = {256, 1024}, fc1 = {1024, 256};
  EXPECT_EQ(s.get("model.decoder.embed_tokens.weight", emb).dtype, DType::F16);
  EXPECT_EQ(s.get("model.decoder.embed_positions.weight", pos).nbytes, 514u * 256 * 2);
  s.get("model.decoder.layers.5.fc2.weight", fc2);
  s.get("model.decoder.layers.0.fc1.weight", fc1);
  for (const auto& n : s.names()) EXPECT_EQ(s.get(n).dtype, DType::F16) << n;
  EXPECT_EQ(s.metadata().at("format"), "pt");
  const auto w = s.get("model.decoder.final_layer_norm.weight").to_f32();
  ASSERT_EQ(w.size(), 256u);
  for (float x : w) ASSERT_TRUE(std::isfinite(x));
}

TEST(SharedModels, TinyStoriesTiedHeadMetadata) {
  TensorStore s = TensorStore::open(test::shared_path("models/TinyStories-656K"));
  EXPECT_EQ(s.names().size(), 20u);  // 2 layers × 9 + norm + head
  EXPECT_EQ(s.metadata().at("model.embed_tokens.weight"), "lm_head.weight");
  EXPECT_FALSE(s.has("model.embed_tokens.weight"));
  const std::vector<std::int64_t> head = {2048, 128}, k = {64, 128};
  EXPECT_EQ(s.get("lm_head.weight", head).dtype, DType::F32);
  s.get("model.layers.1.self_attn.k_proj.weight", k);
}

TEST(SharedModels, LlamaC2HfConversionsOpen) {
  for (const char* m : {"models/stories260K/hf", "models/aidreams260K/hf"}) {
    TensorStore s = TensorStore::open(test::shared_path(m));
    const std::vector<std::int64_t> emb = {512, 64};
    EXPECT_EQ(s.get("model.embed_tokens.weight", emb).dtype, DType::F32) << m;
  }
}

}  // namespace
}  // namespace latentllm::io
