// compress with the weights kept in their stored dtype (--weights stored, the default) against float32
// weights (--weights f32), on F16 and BF16 copies of the shared float32 checkpoints made here: the
// checkpoints are byte-identical (model.safetensors and config.json) for the methods whose solvers read
// the weights in each way (local ASVD from the inputs and from the outputs, joint Q-K / V-O / up-down,
// the dense stream of --fit compensate, the global allocation's pre-pass, windows of 4 tokens that
// the decoding GEMV would otherwise take); --json says which form ran; the memory plan counts the
// stored bytes. sweep takes the same switch.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "latentllm/compress.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/resources.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
using Weights = model::LoadOptions::Weights;

// The shared checkpoint `model` with every tensor stored as `dt` (the other files copied as they are).
fs::path copy_as(const std::string& model, DType dt) {
  const fs::path src = test::shared_path(model);
  const fs::path out = test::make_temp_dir(fmt::format("stored-compress-{}", dtype_name(dt))) / "model";
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(src))
    if (e.is_regular_file() && e.path().extension() != ".safetensors") fs::copy_file(e.path(), out / e.path().filename());
  const io::TensorStore store = io::TensorStore::open(src);
  std::vector<std::vector<float>> values;
  std::vector<io::TensorToWrite> tensors;
  for (const auto& name : store.names()) values.push_back(store.get(name).to_f32());
  std::size_t k = 0;
  for (const auto& name : store.names()) tensors.push_back({name, dt, store.get(name).shape, values[k++]});
  io::write_safetensors(out / "model.safetensors", tensors, store.metadata());
  return out;
}

struct Copies {
  fs::path llama_f16, llama_bf16, opt_bf16;
};

const Copies& copies() {
  static const Copies c = [] {
    set_log_callback([](LogLevel, std::string_view) {});
    return Copies{copy_as("models/stories260K/hf", DType::F16), copy_as("models/stories260K/hf", DType::BF16),
                  copy_as("models/opt-tiny", DType::BF16)};
  }();
  return c;
}

struct Run {
  std::string safetensors, config;
  nlohmann::json report;
};

// `latentllm compress --json` of `model` into a fresh directory with `args` (which give --seqlen).
Run compress(const fs::path& model, const std::string& args) {
  const fs::path out = test::make_temp_dir("stored-compress-out") / "ckpt";
  const std::string cmd = fmt::format(
      "{{ {} compress --model '{}' --out '{}' --calib text --calib-data '{}' --nsamples 6 --seed 1 --dtype f32 --json {} "
      "2>/dev/null; }}",
      test::cli_path().string(), model.string(), out.string(),
      test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt").string(), args);
  std::string output;
  EXPECT_EQ(test::run_command(cmd, output), 0) << cmd << "\n" << output;
  Run r{test::read_bytes(out / "model.safetensors"), test::read_bytes(out / "config.json"), {}};
  r.report = nlohmann::json::parse(output, nullptr, /*allow_exceptions=*/false);
  return r;
}

// The same bytes with --weights f32 and stored (the default, so also without the option).
void expect_same_checkpoint(const fs::path& model, const std::string& args) {
  const Run f32 = compress(model, args + " --weights f32");
  const Run stored = compress(model, args);
  ASSERT_FALSE(f32.safetensors.empty()) << args;
  EXPECT_TRUE(f32.safetensors == stored.safetensors) << model << " " << args;
  EXPECT_EQ(f32.config, stored.config) << model << " " << args;
  ASSERT_TRUE(f32.report.is_object() && stored.report.is_object()) << args;
  EXPECT_EQ(f32.report.value("weights", ""), "f32");
  EXPECT_EQ(stored.report.value("weights", ""), "stored");
  // The stored run plans (and holds) the 16-bit layers, not their float32 copies.
  EXPECT_LT(stored.report.at("planned_peak_bytes").get<std::int64_t>(),
            f32.report.at("planned_peak_bytes").get<std::int64_t>());
}

TEST(StoredCompress, LlamaF16LocalAndJoint) {
  expect_same_checkpoint(copies().llama_f16, "--method asvd-rootcov --ratio 0.3 --seqlen 32");
  expect_same_checkpoint(copies().llama_f16, "--method latentllm --ratio 0.3 --joint qk,vo,ud --seqlen 32");
}

TEST(StoredCompress, LlamaBf16CompensateGlobalAndTinyWindows) {
  expect_same_checkpoint(copies().llama_bf16, "--method asvd-rootcov --ratio 0.3 --fit compensate --seqlen 32");
  expect_same_checkpoint(copies().llama_bf16, "--method latentllm --ratio 0.3 --rank-alloc global --seqlen 32");
  // Windows of 4 tokens, one a batch, through the dense layers (one pass taps every site): products of
  // 4 rows with the 16-bit matrices, which decoding's GEMV would take.
  expect_same_checkpoint(copies().llama_bf16, "--method asvd-rootcov --ratio 0.3 --no-intra-layer --seqlen 4 --batch 1");
}

TEST(StoredCompress, OptBf16LocalAndJoint) {
  expect_same_checkpoint(copies().opt_bf16, "--method asvd-rootcov --ratio 0.3 --seqlen 32");
  expect_same_checkpoint(copies().opt_bf16, "--method latentllm --ratio 0.3 --fit compensate --seqlen 32");
  expect_same_checkpoint(copies().opt_bf16, "--method asvd-rootcov --ratio 0.3 --no-intra-layer --seqlen 4 --batch 1");
}

// The plan of a 16-bit checkpoint counts its layers at their stored bytes, and the module a product
// widens; float32 weights count the layer widened, twice (with its factors).
TEST(StoredCompress, MemoryPlanCountsStoredBytes) {
  const auto f32 = model::Model::load(copies().opt_bf16, {.lazy = true});
  const auto stored = model::Model::load(copies().opt_bf16, {.lazy = true, .weights = Weights::Stored});
  compress::CompressOptions opt;
  opt.method = compress::parse_method("asvd-rootcov");
  opt.ratio = 0.3;
  const auto a = compress::plan_compress_memory(*f32, 6 * 32, 32, opt, std::int64_t{1} << 40);
  const auto b = compress::plan_compress_memory(*stored, 6 * 32, 32, opt, std::int64_t{1} << 40);
  auto item = [](const core::MemoryPlan& p, const std::string& name) -> std::int64_t {
    for (const auto& i : p.items)
      if (i.name == name) return i.bytes;
    ADD_FAILURE() << "no item " << name << " in\n" << p.describe();
    return -1;
  };
  const std::int64_t layer16 = stored->footprint().largest_layer();
  EXPECT_EQ(item(b, "one layer as stored (mapped)"), layer16);
  EXPECT_EQ(item(b, "widened module (float32)"), stored->footprint().largest_widened);
  EXPECT_GT(stored->footprint().largest_widened, 0);
  EXPECT_EQ(item(a, "one layer and its factors (float32)"), 2 * f32->footprint().largest_layer());
  // Every matrix of opt-tiny's layers is 16-bit here: the stored layer is about half the float32 one.
  EXPECT_LT(layer16, f32->footprint().largest_layer() * 6 / 10);
  EXPECT_LT(b.total(), a.total());
}

// `latentllm sweep --json` of `model` (one method, one ratio, perplexity on 4 windows) with `args`: its
// results document.
nlohmann::json sweep(const fs::path& model, const std::string& args) {
  const fs::path out = test::make_temp_dir("stored-sweep") / "grid";
  const std::string text = test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt").string();
  const std::string cmd = fmt::format(
      "{{ {} sweep --model '{}' --out '{}' --methods latentllm --ratios 0.3 --calib text --calib-data '{}' "
      "--nsamples 6 --seqlen 32 --seed 1 --datasets text='{}' --eval-seqlen 32 --max-windows 4 --json {} 2>/dev/null; }}",
      test::cli_path().string(), model.string(), out.string(), text, text, args);
  std::string output;
  EXPECT_EQ(test::run_command(cmd, output), 0) << cmd << "\n" << output;
  return nlohmann::json::parse(output, nullptr, /*allow_exceptions=*/false);
}

// sweep takes --weights like compress: the same compressions and perplexities either way (the dense row
// and the compressed one), the choice recorded in its settings; a bad value refused like compress's.
TEST(StoredCompress, SweepWeightsSwitch) {
  const nlohmann::json f32 = sweep(copies().llama_f16, "--weights f32");
  const nlohmann::json stored = sweep(copies().llama_f16, "");
  ASSERT_TRUE(f32.is_object() && stored.is_object());
  EXPECT_EQ(f32.at("settings").at("weights"), "f32");
  EXPECT_EQ(stored.at("settings").at("weights"), "stored");
  ASSERT_EQ(f32.at("runs").size(), 2u);  // dense + latentllm at 0.3
  ASSERT_EQ(stored.at("runs").size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const nlohmann::json& a = f32.at("runs")[i];
    const nlohmann::json& b = stored.at("runs")[i];
    EXPECT_EQ(a.at("ppl").at("text").get<double>(), b.at("ppl").at("text").get<double>()) << a.at("method");
    EXPECT_EQ(a.at("params"), b.at("params")) << a.at("method");
    EXPECT_EQ(a.at("mean_relative_output_error"), b.at("mean_relative_output_error")) << a.at("method");
  }
  std::string output;
  EXPECT_NE(test::run_command(fmt::format("{} sweep --model '{}' --out '{}' --weights f8 2>&1", test::cli_path().string(),
                                          copies().llama_f16.string(),
                                          (test::make_temp_dir("stored-sweep-bad") / "grid").string()),
                              output),
            0);
  EXPECT_NE(output.find("--weights (expected f32 or stored, got f8)"), std::string::npos) << output;
}

}  // namespace
}  // namespace latentllm
