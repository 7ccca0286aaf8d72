// `latentllm export --format onnx` of 4-bit checkpoints (compress --bits 4, --method gptq): each quantized
// matrix is a com.microsoft::MatMulNBits node whose initializers are the checkpoint's codes, scales and
// zero points; read by MatMulNBits' rule they are exactly the matrices latentllm dequantizes; libonnx's
// checker and strict shape inference accept the graph (they pass over a domain they do not know); the
// quantized matrices take no more bytes than in the checkpoint and the export is a fraction of the 16-bit
// latent model's; a group size MatMulNBits does not take falls back
// to float with a note on stderr. ONNX Runtime runs these exports in test_onnx_runtime.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "latentllm/export.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "onnx_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kUint8 = 2, kFloat16 = 10;
constexpr double kMaxLatentRatio = 0.45, kMaxGptqRatio = 0.40;

fs::path graph(const fs::path& dir) { return dir / "onnx" / "model.onnx"; }

std::uintmax_t export_bytes(const fs::path& dir) {
  std::uintmax_t n = fs::file_size(graph(dir));
  if (fs::exists(dir / "onnx" / "model.onnx_data")) n += fs::file_size(dir / "onnx" / "model.onnx_data");
  return n;
}

// Every initializer of an export written with all of them external: name -> (description, bytes).
std::map<std::string, std::pair<json, std::string>> external_initializers(const fs::path& dir) {
  const json d = format::describe_onnx_model(graph(dir));
  const std::string data = read_bytes(dir / "onnx" / "model.onnx_data");
  std::map<std::string, std::pair<json, std::string>> out;
  for (const auto& t : d.at("initializers")) {
    EXPECT_TRUE(t.at("external").get<bool>()) << t.at("name");
    out[t.at("name")] = {t, data.substr(t.at("offset").get<std::size_t>(), t.at("length").get<std::size_t>())};
  }
  return out;
}

unsigned bits_at(const std::string& bytes, std::int64_t byte0, std::int64_t bit, int bits) {
  return (static_cast<unsigned char>(bytes[static_cast<std::size_t>(byte0 + bit / 8)]) >> (bit % 8)) & ((1u << bits) - 1u);
}

template <class T>
T value_at(const std::string& bytes, std::int64_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// The [rows, cols] matrix the graph multiplies by, from the initializers …qweight, …scales, …qzeros:
// MatMulNBits' (code − zero)·scale with uint8 zero points, or (code − 2^(q−1))·scale less the F16 zero
// points' per-group term (src/format/onnx_nbits.hpp), rounded once to float as latentllm's dequantization.
MatrixF matmul_nbits_weight(const std::map<std::string, std::pair<json, std::string>>& init, const std::string& codes,
                            const std::string& scales, const std::string& zeros, std::int64_t cols, int bits) {
  const auto& [bd, b] = init.at(codes);
  const auto& [sd, s] = init.at(scales);
  const auto& [zd, z] = init.at(zeros);
  EXPECT_EQ(bd.at("type"), kUint8);
  EXPECT_EQ(sd.at("type"), kFloat16);
  const std::int64_t rows = bd.at("dims")[0], n_blocks = bd.at("dims")[1], blob = bd.at("dims")[2];
  const int block = static_cast<int>(blob * 8 / bits);
  const std::int64_t zp_row = (n_blocks * bits + 7) / 8;
  MatrixF w(rows, cols);
  for (std::int64_t n = 0; n < rows; ++n) {
    for (std::int64_t k = 0; k < cols; ++k) {
      const std::int64_t blk = k / block, g = n * n_blocks + blk;
      const double code = bits_at(b, n * n_blocks * blob, k * bits, bits);
      const double scale = f16_to_f32(value_at<std::uint16_t>(s, g)), z0 = 1 << (bits - 1);
      const double v = zd.at("type") == kUint8
                           ? (code - bits_at(z, n * zp_row, blk * bits, bits)) * scale
                           : (code - z0) * scale - (f16_to_f32(value_at<std::uint16_t>(z, g)) - z0) * scale;
      w(n, k) = static_cast<float>(v);
    }
  }
  return w;
}

// Each quantized matrix of the checkpoint `lat` read back from its export's MatMulNBits initializers.
void expect_initializers_are_the_dequantized_matrices(const fs::path& lat) {
  const fs::path out = make_temp_dir("onnx-nbits-ext") / "onnx";
  format::ExportOptions opt;
  opt.format = "onnx";
  opt.onnx_external_data_above = 0;
  format::export_checkpoint(lat, out, opt);
  const auto init = external_initializers(out);
  const auto m = model::Model::load(lat);
  int matrices = 0;
  for (int i = 0; i < m->num_layers(); ++i) {
    for (const model::Linear& l : m->layer(i).linears) {
      const std::string n = m->stored_name(l.name);
      const std::vector<std::pair<const model::Weight*, std::string>> parts = {{&l.weight, ""}, {&l.B, ".B"}, {&l.A, ".A"}};
      for (const auto& [w, part] : parts) {
        if (w->packed() == nullptr) continue;
        if (!init.count(n + part + ".qweight")) {
          EXPECT_EQ(part, ".B") << n << ": only a latent past's B is written as float";
          continue;
        }
        const MatrixF got = matmul_nbits_weight(init, n + part + ".qweight", n + part + ".scales", n + part + ".qzeros",
                                                w->cols(), w->bits());
        EXPECT_TRUE(got == w->to_f32()) << n << part;
        ++matrices;
      }
    }
  }
  EXPECT_GT(matrices, 0);
  ::testing::Test::RecordProperty("matmul_nbits_matrices", matrices);
}

TEST(ExportOnnxNBits, QuantizedLatentPassesTheCheckerAndHoldsTheCheckpointsCodes) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path lat = quantized_fixture("stories260K/hf", kQuantLatent);
  const fs::path out = onnx_export(lat);
  format::check_onnx_model(graph(out), /*full=*/true);
  const json d = format::describe_onnx_model(graph(out));
  EXPECT_EQ(d.at("domains"), json({{"com.microsoft", 1}}));
  EXPECT_GT(d.at("domain_ops").size(), 0u);
  expect_initializers_are_the_dequantized_matrices(lat);
}

// opt-tiny: latent keys and values, whose B the attention absorbs (written dequantized), the other factors
// MatMulNBits.
TEST(ExportOnnxNBits, LatentPastFactorsRoundTrip) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path lat = quantized_fixture("opt-tiny", kQuantOptTiny);
  format::check_onnx_model(graph(onnx_export(lat)), /*full=*/true);
  expect_initializers_are_the_dequantized_matrices(lat);
}

TEST(ExportOnnxNBits, MinMaxZeroPointsAndGptqDenseWeightsRoundTrip) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  expect_initializers_are_the_dequantized_matrices(quantized_fixture("stories260K/hf", kQuantLatentMinMax));
  const fs::path gptq = quantized_fixture("stories260K/hf", kQuantGptq);
  format::check_onnx_model(graph(onnx_export(gptq)), /*full=*/true);
  expect_initializers_are_the_dequantized_matrices(gptq);
}

// Bytes of the export's initializers named as quantized parts (…qweight, …scales, …qzeros) and the
// checkpoint's bytes of the same tensors.
std::pair<std::int64_t, std::int64_t> quantized_part_bytes(const fs::path& lat, const fs::path& out) {
  const io::TensorStore store = io::TensorStore::open(lat);
  std::int64_t onnx = 0, checkpoint = 0;
  const json d = format::describe_onnx_model(graph(out));
  for (const auto& t : d.at("initializers")) {
    const std::string name = t.at("name");
    if (!name.ends_with(".qweight") && !name.ends_with(".scales") && !name.ends_with(".qzeros")) continue;
    std::int64_t n = t.at("type") == kUint8 ? 1 : 2;
    for (const auto& d : t.at("dims")) n *= d.get<std::int64_t>();
    onnx += n;
    checkpoint += store.get(name).numel() * (name.ends_with(".qweight") ? 1 : 2);
  }
  return {onnx, checkpoint};
}

std::int64_t inspect_params(const fs::path& lat) {
  const std::string log = run_cli_ok("inspect --model " + shq(lat) + " --json");
  return json::parse(log.substr(log.find('{'))).at("model_params").get<std::int64_t>();
}

double size_ratio(const fs::path& a, const fs::path& b) {
  return static_cast<double>(export_bytes(a)) / static_cast<double>(export_bytes(b));
}

// The 4-bit exports against the 16-bit latent model's (the same ranks), both in the export's default
// float32 weights: the quantized matrices take no more bytes than the checkpoint stores for them, and
// the files at most kMaxLatentRatio / kMaxGptqRatio of the 16-bit one (on stories260K the tied float
// embedding and the graph's nodes are a large share of every export). The --dtype f16 ratios are
// recorded beside them.
TEST(ExportOnnxNBits, FourBitExportsAreAFractionOfTheSixteenBitOne) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path q4_lat = quantized_fixture("stories260K/hf", kQuantLatent);
  const fs::path gptq_lat = quantized_fixture("stories260K/hf", kQuantGptq);
  const fs::path lat16 = quantized_fixture("stories260K/hf", kLatent16);
  for (const fs::path& lat : {q4_lat, gptq_lat}) {
    const auto [onnx, checkpoint] = quantized_part_bytes(lat, onnx_export(lat));
    EXPECT_GT(onnx, 0) << lat;
    EXPECT_LE(onnx, checkpoint) << lat;
  }
  const double latent = size_ratio(onnx_export(q4_lat), onnx_export(lat16));
  const double gptq = size_ratio(onnx_export(gptq_lat), onnx_export(lat16));
  EXPECT_LE(latent, kMaxLatentRatio);
  EXPECT_LE(gptq, kMaxGptqRatio);
  const double latent16 = size_ratio(onnx_export(q4_lat, "--dtype f16"), onnx_export(lat16, "--dtype f16"));
  const double gptq16 = size_ratio(onnx_export(gptq_lat, "--dtype f16"), onnx_export(lat16, "--dtype f16"));
  ::testing::Test::RecordProperty("latent_4bit_over_16bit_f32", fmt::format("{:.3f}", latent));
  ::testing::Test::RecordProperty("gptq_4bit_over_16bit_f32", fmt::format("{:.3f}", gptq));
  ::testing::Test::RecordProperty("latent_4bit_over_16bit_f16", fmt::format("{:.3f}", latent16));
  ::testing::Test::RecordProperty("gptq_4bit_over_16bit_f16", fmt::format("{:.3f}", gptq16));
}

// The external-data threshold weighs a MatMulNBits matrix by its packed bytes, not as float: an export
// whose initializers fit stays one file even when its parameters as float32 would not.
TEST(ExportOnnxNBits, ExternalDataThresholdCountsPackedBytes) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path lat = quantized_fixture("stories260K/hf", kQuantLatent);
  const std::uintmax_t inline_bytes = export_bytes(onnx_export(lat));
  const std::int64_t as_float = 4 * inspect_params(lat);
  ASSERT_LT(static_cast<std::int64_t>(inline_bytes), as_float);
  format::ExportOptions opt;
  opt.format = "onnx";
  opt.onnx_external_data_above = static_cast<std::int64_t>(inline_bytes);  // above the initializers' bytes
  const fs::path out = make_temp_dir("onnx-nbits-threshold") / "onnx";
  format::export_checkpoint(lat, out, opt);
  EXPECT_FALSE(fs::exists(out / "onnx" / "model.onnx_data"));
  EXPECT_EQ(read_bytes(graph(out)), read_bytes(graph(onnx_export(lat))));
}

// compress --bits 4 --format onnx writes the graph `export` writes of the f32 quantized checkpoint, byte
// for byte (the packed matrices reach the writer as they are, not dequantized).
TEST(ExportOnnxNBits, CompressFormatOnnxIsTheExportOfTheQuantizedCheckpoint) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path tmp = make_temp_dir("onnx-nbits-direct");
  const std::string common = "compress --model " + shq(shared_path("models/stories260K/hf")) + " " + kQuantLatent +
                             " --calib text --calib-data " + shq(tinystories_text()) + " --nsamples 4 --seqlen 64 -q";
  run_cli_ok(common + " --dtype f32 --out " + shq(tmp / "latent"));
  run_cli_ok(common + " --format onnx --out " + shq(tmp / "direct"));
  const fs::path exported = onnx_export(tmp / "latent");
  EXPECT_GT(format::describe_onnx_model(graph(exported)).at("domain_ops").size(), 0u);
  EXPECT_EQ(read_bytes(graph(tmp / "direct")), read_bytes(graph(exported)));
}

// Groups of 24 (MatMulNBits takes powers of two from 16 to 256): float MatMuls, and stderr says so.
TEST(ExportOnnxNBits, UnsupportedGroupFallsBackToFloatWithANote) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path lat = quantized_fixture("stories260K/hf", "--method latentllm --ratio 0.3 --bits 4 --group 24");
  const fs::path out = make_temp_dir("onnx-g24") / "onnx";
  const std::string log = run_cli_ok("export --model " + shq(lat) + " --out " + shq(out) + " --format onnx");
  EXPECT_NE(log.find("written dequantized to float32: groups of 24"), std::string::npos) << log;
  format::check_onnx_model(graph(out), /*full=*/true);
  const json d = format::describe_onnx_model(graph(out));
  EXPECT_TRUE(d.at("domain_ops").empty());
  EXPECT_TRUE(d.at("domains").empty());
}

}  // namespace
}  // namespace latentllm::test
