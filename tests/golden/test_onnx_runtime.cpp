// ONNX Runtime end to end (ctest label ort; a golden test): the TinyStories-656K and opt-tiny latent
// checkpoints exported with `--format onnx` run in onnxruntime-node (tests/ort/check_export.js, CPU),
// against latentllm's own outputs written here: logits within 1e-4 at every position (one call, and
// prefill then one position per call through past_key_values / present), and greedy decoding with the
// KV cache token-identical to `latentllm generate --temperature 0`; the same for random-weight Qwen3 and
// Llama-3 presets of tools/synth (q/k norms, llama3 RoPE scaling); the quantized checkpoints (4-bit factors
// with GPTQ's integer and the min–max rule's fractional zero points, with latent pasts, 8-bit factors, and
// --method gptq's dense weights), whose matrices the export writes as com.microsoft::MatMulNBits, besides
// with perplexity within 1e-3 relative of `latentllm ppl` on the same windows. Skipped when node or
// onnxruntime-node is missing, unless LATENTLLM_REQUIRE_ORT is set (CI sets it: there it must run).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "latentllm/eval.hpp"
#include "latentllm/export.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "onnx_support.hpp"
#include "synth.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr float kTolerance = 1e-4f;
constexpr double kPplTolerance = 1e-3;  // relative
constexpr float kF16Tolerance = 5e-2f;  // float16 logits, and pasts rounded to float16 between calls
constexpr int kPplSeqlen = 128, kPplWindows = 4;

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

// The perplexity check of check_export.js: `latentllm ppl` on the first windows of the TinyStories text
// and those windows' token ids (the protocol's, eval::eval_ids).
json ppl_case(const fs::path& lat) {
  const std::string log = run_cli_ok(fmt::format("ppl --model {} --dataset text --data {} --seqlen {} --max-windows {} "
                                                 "--json -q", shq(lat), shq(tinystories_text()), kPplSeqlen, kPplWindows));
  const double ppl = json::parse(log.substr(log.find('{'))).at("ppl").get<double>();
  const auto tok = io::load_tokenizer(lat);
  const std::vector<std::int32_t> ids = eval::eval_ids(*tok, io::Dataset::Text, tinystories_text(), kPplSeqlen);
  json windows = json::array();
  for (int w = 0; w < kPplWindows; ++w) {
    windows.push_back(std::vector<std::int32_t>(ids.begin() + w * kPplSeqlen, ids.begin() + (w + 1) * kPplSeqlen));
  }
  return {{"windows", windows}, {"reference", ppl}, {"tolerance", kPplTolerance}};
}

// Runs tests/ort/check_export.js on the export `dir` of `lat` (with_ppl: also the perplexity check);
// returns its JSON report.
json check_with_ort(const fs::path& lat, const fs::path& dir, float tolerance, bool with_ppl = false) {
  const fs::path tmp = make_temp_dir("onnx-ort");
  const auto [prompt, tokens] = greedy(lat, "Once upon a time there was a little", 24);
  std::vector<std::int32_t> ids = prompt;
  ids.insert(ids.end(), tokens.begin(), tokens.end());
  write_logits(lat, ids, tmp / "logits.f32");
  json spec = {{"dir", dir.string()}, {"ids", ids}, {"logits", (tmp / "logits.f32").string()},
                     {"prefill", prompt.size()}, {"prompt", prompt}, {"greedy", tokens}, {"tolerance", tolerance}};
  if (with_ppl) spec["ppl"] = ppl_case(lat);
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

// The export of a 4-bit checkpoint (onnx_support.hpp): ORT's logits, greedy tokens and perplexity are
// latentllm's on the same quantized model, and its modules are MatMulNBits nodes.
void expect_quantized_export_agrees(const fs::path& lat) {
  const fs::path out = onnx_export(lat);
  const json d = format::describe_onnx_model(out / "onnx" / "model.onnx");
  EXPECT_GT(d.at("domain_ops").size(), 0u);
  for (const auto& op : d.at("domain_ops")) EXPECT_EQ(op, "com.microsoft::MatMulNBits");
  const json r = check_with_ort(lat, out, kTolerance, /*with_ppl=*/true);
  if (!r.is_object()) return;
  EXPECT_TRUE(r.at("failures").empty()) << r.dump();
  EXPECT_GT(r.at("greedy_tokens").get<int>(), 0);
  EXPECT_LE(r.at("ppl_rel_diff").get<double>(), kPplTolerance);
  ::testing::Test::RecordProperty("one_call_max_diff", fmt::format("{:.3g}", r.at("one_call_max_diff").get<double>()));
  ::testing::Test::RecordProperty("ppl_ort", fmt::format("{:.6f}", r.at("ppl").get<double>()));
  ::testing::Test::RecordProperty("ppl_latentllm", fmt::format("{:.6f}", r.at("ppl_reference").get<double>()));
  ::testing::Test::RecordProperty("ppl_rel_diff", fmt::format("{:.3g}", r.at("ppl_rel_diff").get<double>()));
}

// 4-bit factors (compress --bits 4, GPTQ: integer zero points, MatMulNBits' uint8 zero points).
TEST(OnnxRuntime, QuantizedLatentMatchesLatentllm) {
  REQUIRE_ORT();
  expect_quantized_export_agrees(quantized_fixture("TinyStories-656K", kQuantLatent));
}

// stories260K: rows whose last group is partial (d = 64 − r columns of a block-identity A, 172 of down_proj).
TEST(OnnxRuntime, QuantizedStories260KMatchesLatentllm) {
  REQUIRE_ORT();
  expect_quantized_export_agrees(quantized_fixture("stories260K/hf", kQuantLatent));
}

// The min–max rule's fractional zero points (--quantizer rtn): float zero points.
TEST(OnnxRuntime, MinMaxQuantizedLatentMatchesLatentllm) {
  REQUIRE_ORT();
  expect_quantized_export_agrees(quantized_fixture("stories260K/hf", kQuantLatentMinMax));
}

// opt-tiny: latent keys and values, whose B the attention absorbs (written dequantized), the other
// factors MatMulNBits in groups of 16.
TEST(OnnxRuntime, OptTinyQuantizedLatentPastMatchesLatentllm) {
  REQUIRE_ORT();
  expect_quantized_export_agrees(quantized_fixture("opt-tiny", kQuantOptTiny));
}

// The same with the min–max rule's fractional zero points.
TEST(OnnxRuntime, OptTinyMinMaxLatentPastMatchesLatentllm) {
  REQUIRE_ORT();
  expect_quantized_export_agrees(quantized_fixture("opt-tiny", kQuantOptTiny + " --quantizer rtn"));
}

// 8-bit factors with GPTQ's integer zero points (MatMulNBits' 8-bit kernel takes uint8 zero points).
TEST(OnnxRuntime, EightBitLatentMatchesLatentllm) {
  REQUIRE_ORT();
  expect_quantized_export_agrees(quantized_fixture("stories260K/hf", "--method latentllm --ratio 0.3 --bits 8 --group 32"));
}

// 8-bit factors on the min–max grid (--quantizer rtn): fractional zero points at 8 bits.
TEST(OnnxRuntime, EightBitMinMaxLatentMatchesLatentllm) {
  REQUIRE_ORT();
  expect_quantized_export_agrees(quantized_fixture("stories260K/hf", kQuantLatentMinMax8));
}

// The quantized LM head (compress --head-bits, min–max grid: fractional zero points): one MatMulNBits
// over the head's codes beside the 4-bit factors; logits, greedy tokens and perplexity as latentllm's.
TEST(OnnxRuntime, EightBitHeadMatchesLatentllm) {
  REQUIRE_ORT();
  expect_quantized_export_agrees(quantized_fixture("stories260K/hf", kQuantLatent + " --head-bits 8"));
}

TEST(OnnxRuntime, FourBitHeadMatchesLatentllm) {
  REQUIRE_ORT();
  expect_quantized_export_agrees(quantized_fixture("stories260K/hf", kQuantLatent + " --head-bits 4"));
}

// --dtype f16 (float16 I/O, embedding and norms; the quantized tensors as in f32): logits within the
// rounding of float16 logits and pasts, the same greedy tokens and perplexity within 1e-3.
TEST(OnnxRuntime, QuantizedF16ExportMatchesLatentllm) {
  REQUIRE_ORT();
  const fs::path lat = quantized_fixture("stories260K/hf", kQuantLatent);
  const json r = check_with_ort(lat, onnx_export(lat, "--dtype f16"), kF16Tolerance, /*with_ppl=*/true);
  if (!r.is_object()) return;
  EXPECT_TRUE(r.at("failures").empty()) << r.dump();
  ::testing::Test::RecordProperty("one_call_max_diff", fmt::format("{:.3g}", r.at("one_call_max_diff").get<double>()));
  ::testing::Test::RecordProperty("ppl_ort", fmt::format("{:.6f}", r.at("ppl").get<double>()));
  ::testing::Test::RecordProperty("ppl_latentllm", fmt::format("{:.6f}", r.at("ppl_reference").get<double>()));
  ::testing::Test::RecordProperty("ppl_rel_diff", fmt::format("{:.3g}", r.at("ppl_rel_diff").get<double>()));
}

// --method gptq: every dense weight 4-bit, full rank.
TEST(OnnxRuntime, GptqDenseMatchesLatentllm) {
  REQUIRE_ORT();
  expect_quantized_export_agrees(quantized_fixture("stories260K/hf", kQuantGptq));
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
