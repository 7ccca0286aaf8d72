// ONNX Runtime end to end (ctest label ort; a golden test): the TinyStories-656K and opt-tiny latent
// checkpoints exported with `--format onnx` run in onnxruntime-node (tests/ort/check_export.js, CPU),
// against latentllm's own outputs written here: logits within 1e-4 at every position (one call, and
// prefill then one position per call through past_key_values / present), and greedy decoding with the
// KV cache token-identical to `latentllm generate --temperature 0`; the same for random-weight Qwen3 and
// Llama-3 presets of tools/synth (q/k norms, llama3 RoPE scaling). Skipped when node or
// onnxruntime-node is missing, unless LATENTLLM_REQUIRE_ORT is set (CI sets it: there it must run).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "latentllm/model.hpp"
#include "latentllm/export.hpp"
#include "onnx_support.hpp"
#include "synth.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr float kTolerance = 1e-4f;

fs::path ort_dir() { return fs::path(LATENTLLM_TEST_DATA_DIR).parent_path() / "ort"; }

// Why ONNX Runtime cannot run here, or "" when it can.
std::string ort_missing() {
  std::string out;
  if (run_command("node --version 2>&1", out) != 0) return "node is not installed";
  if (!fs::exists(ort_dir() / "node_modules" / "onnxruntime-node" / "package.json")) {
    return "onnxruntime-node is not installed in tests/ort (scripts/setup runs npm ci --ignore-scripts there)";
  }
  return "";
}

#define REQUIRE_ORT()                                                                                 \
  LATENTLLM_REQUIRE_ONNX_MODULE();                                                                    \
  if (const std::string why = ort_missing(); !why.empty()) {                                          \
    if (std::getenv("LATENTLLM_REQUIRE_ORT") != nullptr) FAIL() << why << " (LATENTLLM_REQUIRE_ORT is set)"; \
    GTEST_SKIP() << "ONNX Runtime test skipped: " << why;                                             \
  }

// latentllm generate's greedy continuation of `prompt`: (prompt ids, new tokens).
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> greedy(const fs::path& lat, const std::string& prompt,
                                                                       int n) {
  const std::string log = run_cli_ok(fmt::format("generate --model {} --prompt '{}' --max-new-tokens {} --temperature 0 "
                                                 "--json -q", shq(lat), prompt, n));
  const json j = json::parse(log.substr(log.find('{')));
  return {j.at("prompt_tokens").get<std::vector<std::int32_t>>(), j.at("tokens").get<std::vector<std::int32_t>>()};
}

// latentllm's logits [n, V] of ids, one forward from position 0 (Model::embed, every layer, the head).
void write_logits(const fs::path& lat, const std::vector<std::int32_t>& ids, const fs::path& file) {
  const auto m = model::Model::load(lat);
  const int T = static_cast<int>(ids.size());
  MatrixF h, logits;  // [T, d], [T, V]
  m->embed(ids, T, h);
  for (int i = 0; i < m->num_layers(); ++i) m->layer_forward(i, h, T);
  m->head(h, logits);
  std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(logits.data()),
                                              static_cast<std::streamsize>(logits.size() * 4));
}

// Runs tests/ort/check_export.js on the export `dir` of `lat`; returns its JSON report.
json check_with_ort(const fs::path& lat, const fs::path& dir, float tolerance) {
  const fs::path tmp = make_temp_dir("onnx-ort");
  const auto [prompt, tokens] = greedy(lat, "Once upon a time there was a little", 24);
  std::vector<std::int32_t> ids = prompt;
  ids.insert(ids.end(), tokens.begin(), tokens.end());
  write_logits(lat, ids, tmp / "logits.f32");
  const json spec = {{"dir", dir.string()}, {"ids", ids}, {"logits", (tmp / "logits.f32").string()},
                     {"prefill", prompt.size()}, {"prompt", prompt}, {"greedy", tokens}, {"tolerance", tolerance}};
  std::ofstream(tmp / "case.json") << spec.dump();
  std::string out;
  const int rc = run_command("node " + shq(ort_dir() / "check_export.js") + " " + shq(tmp / "case.json") + " 2>&1", out);
  EXPECT_EQ(rc, 0) << out;
  const auto brace = out.find('{');
  if (brace == std::string::npos) {
    ADD_FAILURE() << "no report from check_export.js: " << out;
    return {};
  }
  const json report = json::parse(out.substr(brace), nullptr, false);
  EXPECT_TRUE(report.is_object()) << out;
  return report;
}

void expect_ort_agrees(const std::string& model) {
  const fs::path lat = latent_fixture(model);
  const json r = check_with_ort(lat, onnx_export(lat), kTolerance);
  if (!r.is_object()) return;
  EXPECT_TRUE(r.at("failures").empty()) << r.dump();
  EXPECT_GT(r.at("greedy_tokens").get<int>(), 0);
  ::testing::Test::RecordProperty("one_call_max_diff", fmt::format("{:.3g}", r.at("one_call_max_diff").get<double>()));
  ::testing::Test::RecordProperty("cached_max_diff", fmt::format("{:.3g}", r.at("cached_max_diff").get<double>()));
}

TEST(OnnxRuntime, TinyStoriesLatentMatchesLatentllm) {
  REQUIRE_ORT();
  expect_ort_agrees("TinyStories-656K");
}

TEST(OnnxRuntime, OptTinyLatentMatchesLatentllm) {
  REQUIRE_ORT();
  expect_ort_agrees("opt-tiny");
}

// A quantized latent checkpoint (4-bit factors, compress --bits 4): the export's logits and greedy tokens
// are latentllm's on the same quantized model.
TEST(OnnxRuntime, QuantizedLatentMatchesLatentllm) {
  REQUIRE_ORT();
  const fs::path lat = make_temp_dir("onnx-quant") / "latent";
  run_cli_ok("compress --model " + shq(shared_path("models/TinyStories-656K")) + " --method latentllm --ratio 0.3 " +
             "--calib text --calib-data " + shq(tinystories_text()) + " --nsamples 4 --seqlen 64 --dtype f32 " +
             "--bits 4 --group 32 -q --out " + shq(lat));
  const json r = check_with_ort(lat, onnx_export(lat), kTolerance);
  if (!r.is_object()) return;
  EXPECT_TRUE(r.at("failures").empty()) << r.dump();
  EXPECT_GT(r.at("greedy_tokens").get<int>(), 0);
}

// A dense checkpoint's export: the same logits and greedy tokens as latentllm on the dense model.
TEST(OnnxRuntime, DenseCheckpointMatchesLatentllm) {
  REQUIRE_ORT();
  const fs::path dense = shared_path("models/TinyStories-656K");
  const json r = check_with_ort(dense, onnx_export(dense), kTolerance);
  if (r.is_object()) {
    EXPECT_TRUE(r.at("failures").empty()) << r.dump();
  }
}

// --kv-cache dense: every past dense (Optimum's and transformers.js's layout), the same outputs.
TEST(OnnxRuntime, OptTinyDensePastMatchesLatentllm) {
  REQUIRE_ORT();
  const fs::path lat = latent_fixture("opt-tiny");
  const fs::path out = onnx_export(lat, "--kv-cache dense");
  const json cfg = json::parse(std::ifstream(out / "config.json"));
  for (const auto& l : cfg.at("latentllm_export").at("past_key_values")) {
    EXPECT_EQ(l.at("key").at("form"), "dense");
    EXPECT_EQ(l.at("value").at("form"), "dense");
  }
  const json r = check_with_ort(lat, out, kTolerance);
  if (r.is_object()) {
    EXPECT_TRUE(r.at("failures").empty()) << r.dump();
  }
}

// A random-weight checkpoint of the synthetic preset compressed as the fixtures are (speed presets of
// tools/synth: the architectures the fixtures do not cover).
fs::path synth_latent(const std::string& preset) {
  const synth::SynthSpec s = synth::preset(preset);
  synth::WriteOptions o;
  o.seed = 1;
  o.tokenizers_dir = shared_path("data/tokenizers");
  const fs::path dir = make_temp_dir("onnx-synth") / s.name;
  synth::write_checkpoint(s, dir, o);
  const fs::path out = dir.parent_path() / "latent";
  run_cli_ok("compress --model " + shq(dir) + " --method latentllm --ratio 0.3 --calib text --calib-data " +
             shq(tinystories_text()) + " --nsamples 4 --seqlen 64 --dtype f32 -q --out " + shq(out));
  return out;
}

void expect_ort_agrees_on(const fs::path& lat) {
  const json r = check_with_ort(lat, onnx_export(lat), kTolerance);
  if (r.is_object()) {
    EXPECT_TRUE(r.at("failures").empty()) << r.dump();
  }
}

// Qwen3: q/k RMSNorm per head before RoPE, head_dim independent of hidden_size, GQA.
TEST(OnnxRuntime, Qwen3SynthLatentMatchesLatentllm) {
  REQUIRE_ORT();
  expect_ort_agrees_on(synth_latent("qwen3-tiny"));
}

// Llama-3: rope_scaling llama3, GQA.
TEST(OnnxRuntime, Llama3SynthLatentMatchesLatentllm) {
  REQUIRE_ORT();
  expect_ort_agrees_on(synth_latent("llama3-tiny"));
}

// ORT reads the weights from onnx/model.onnx_data when the export writes them there.
TEST(OnnxRuntime, ExternalDataExportMatchesLatentllm) {
  REQUIRE_ORT();
  const fs::path lat = latent_fixture("opt-tiny");
  const fs::path out = make_temp_dir("onnx-ext") / "onnx";
  format::ExportOptions opt;
  opt.format = "onnx";
  opt.onnx_external_data_above = 1 << 20;
  format::export_checkpoint(lat, out, opt);
  ASSERT_TRUE(fs::exists(out / "onnx" / "model.onnx_data"));
  const json r = check_with_ort(lat, out, kTolerance);
  if (r.is_object()) {
    EXPECT_TRUE(r.at("failures").empty()) << r.dump();
  }
}

}  // namespace
}  // namespace latentllm::test
