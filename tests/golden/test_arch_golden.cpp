// The architectures added without a trained fixture, against an independent transcription of the
// Hugging Face forward (scripts/gen_arch_golden.py, PyTorch float64): Llama-3.x rope_scaling
// ("llama3") and Qwen3 (q_norm / k_norm before RoPE, head_dim ≠ hidden / heads). The checkpoints are
// the random-weight presets of tools/synth with the real tokenizers from ../shared, regenerated here
// bit for bit from the golden file's seed; the goldens hold, for the first 64 WikiText-2 ids of each
// tokenizer, the logits at 59 vocabulary ids, the log-sum-exp over the whole vocabulary and the
// argmax at every position.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "synth.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json golden(const std::string& name) {
  std::ifstream in(test_data_path("golden/" + name + ".json"));
  return json::parse(in);
}

// The preset's checkpoint (optionally with its config edited) in a temporary directory.
std::unique_ptr<model::Model> load_preset(const json& g, const std::function<void(synth::SynthSpec&)>& edit = {}) {
  synth::SynthSpec s = synth::preset(g.at("preset").get<std::string>());
  if (edit) edit(s);
  synth::WriteOptions o;
  o.seed = g.at("seed").get<std::uint64_t>();
  o.tokenizers_dir = shared_path("data/tokenizers");
  const fs::path dir = make_temp_dir("arch-golden") / s.name;
  synth::write_checkpoint(s, dir, o);
  return model::Model::load(dir);
}

struct Diff {
  double logit = 0, lse = 0;
  int argmax_mismatches = 0;
};

// Our float32 forward of the golden's input ids against the golden numbers `ref` (the golden itself
// or its without_rope_scaling section).
Diff compare(const model::Model& m, const json& g, const json& ref) {
  const auto ids = g.at("input_ids").get<std::vector<std::int32_t>>();
  const int T = static_cast<int>(ids.size());
  MatrixF h, logits;  // [T, d], [T, V]
  m.embed(ids, T, h);
  for (int i = 0; i < m.num_layers(); ++i) m.layer_forward(i, h, T);
  m.head(h, logits);
  const auto vocab = g.at("vocab_ids").get<std::vector<std::int64_t>>();
  Diff d;
  for (int t = 0; t < T; ++t) {
    for (std::size_t j = 0; j < vocab.size(); ++j) {
      d.logit = std::max(d.logit, std::abs(logits(t, vocab[j]) - ref.at("logits")[t][j].get<double>()));
    }
    Eigen::Index best = 0;
    const double mx = logits.row(t).maxCoeff(&best);
    double sum = 0;
    for (Eigen::Index v = 0; v < logits.cols(); ++v) sum += std::exp(static_cast<double>(logits(t, v)) - mx);
    d.lse = std::max(d.lse, std::abs(mx + std::log(sum) - ref.at("logsumexp")[t].get<double>()));
    if (best != ref.at("argmax")[t].get<std::int64_t>()) ++d.argmax_mismatches;
  }
  return d;
}

// Logits are O(10) here; our float32 forward is within 1.6e-5 of the float64 transcription (measured,
// printed below), so 1e-4 leaves a 6x margin and still catches any wrong term.
constexpr double kTol = 1e-4;

TEST(ArchGolden, Llama3RopeScaling) {
  const json g = golden("llama3-tiny");
  const auto m = load_preset(g);
  ASSERT_EQ(m->config().rope.scaling, model::RopeSpec::Scaling::Llama3);
  const Diff d = compare(*m, g, g);
  std::printf("llama3-tiny (rope_scaling llama3): max |d logit| %.2e, max |d logsumexp| %.2e\n", d.logit, d.lse);
  EXPECT_LT(d.logit, kTol);
  EXPECT_LT(d.lse, kTol);
  EXPECT_EQ(d.argmax_mismatches, 0);
  // The scaling is exercised: against the unscaled golden the same forward is far off.
  EXPECT_GT(compare(*m, g, g.at("without_rope_scaling")).logit, 100 * kTol);
}

TEST(ArchGolden, Llama3WithoutRopeScaling) {
  const json g = golden("llama3-tiny");
  const auto m = load_preset(g, [](synth::SynthSpec& s) { s.config.erase("rope_scaling"); });
  const Diff d = compare(*m, g, g.at("without_rope_scaling"));
  EXPECT_LT(d.logit, kTol);
  EXPECT_LT(d.lse, kTol);
  EXPECT_EQ(d.argmax_mismatches, 0);
}

TEST(ArchGolden, Qwen3QkNorm) {
  const json g = golden("qwen3-tiny");
  const auto m = load_preset(g);
  ASSERT_TRUE(m->config().qk_norm);
  ASSERT_TRUE(m->attention().qk_norm);
  EXPECT_EQ(m->config().head_dim, 32);
  const Diff d = compare(*m, g, g);
  std::printf("qwen3-tiny (q_norm, k_norm): max |d logit| %.2e, max |d logsumexp| %.2e\n", d.logit, d.lse);
  EXPECT_LT(d.logit, kTol);
  EXPECT_LT(d.lse, kTol);
  EXPECT_EQ(d.argmax_mismatches, 0);
  // The norms matter: with unit q_norm / k_norm weights the forward moves far from the golden.
  auto plain = load_preset(g);
  for (int i = 0; i < plain->num_layers(); ++i)
    for (auto& [name, v] : plain->layer(i).norms)
      if (name.find("_norm.weight") != std::string::npos && name.starts_with("self_attn")) v.setOnes();
  EXPECT_GT(compare(*plain, g, g).logit, 10 * kTol);
}

// The generated directories carry the real tokenizers: they encode like their references.
TEST(ArchGolden, PresetTokenizersMatchTheirReferences) {
  for (const char* name : {"llama3-tiny", "qwen3-tiny"}) {
    const json g = golden(name);
    const auto m = load_preset(g);
    const auto tok = io::load_tokenizer(m->dir());
    std::ifstream in(shared_path("data/tokenizers/" + synth::preset(name).tokenizer + "/REFERENCE.json"));
    const json ref = json::parse(in);
    for (const json& t : ref.at("tricky")) {
      EXPECT_EQ(tok->encode(t.at("text").get<std::string>()), t.at("ids").get<std::vector<std::int32_t>>())
          << name << " " << t.at("name");
    }
  }
}

}  // namespace
}  // namespace latentllm::test

namespace latentllm::test {
namespace {

// The compressor on the new architectures: Qwen3's q/k norms make joint Q-K fall back to local Q and K
// (a joint-skipped note per layer); Llama-3 rope_scaling enters joint Q-K's RoPE window (the rotation
// between the factors is the scaled one). Every module is factored and the forward stays finite.
void compress_preset(const std::string& name, int rope_window, bool expect_skipped) {
  const json g = golden(name);
  auto m = load_preset(g);
  const auto ids = g.at("input_ids").get<std::vector<std::int32_t>>();  // one window of 64 tokens
  compress::CompressOptions o;
  o.ratio = 0.3;
  o.rope_window = rope_window;
  const auto rep = compress::compress_model(*m, ids, static_cast<int>(ids.size()), o);
  int skipped = 0;
  for (const auto& n : rep.notes) skipped += n.kind == "joint-skipped";
  EXPECT_EQ(skipped, expect_skipped ? m->num_layers() : 0) << name;
  EXPECT_EQ(rep.qk_losses.size(), expect_skipped ? 0u : static_cast<std::size_t>(m->num_layers())) << name;
  for (int i = 0; i < m->num_layers(); ++i)
    for (const auto& l : m->layer(i).linears) EXPECT_TRUE(l.factored()) << l.name;
  EXPECT_TRUE(std::isfinite(m->windows_nll(ids, static_cast<int>(ids.size()))));
}

TEST(ArchGolden, CompressQwen3FallsBackToLocalQk) { compress_preset("qwen3-tiny", 0, true); }
TEST(ArchGolden, CompressLlama3WithScaledRopeWindow) { compress_preset("llama3-tiny", 4, false); }

}  // namespace
}  // namespace latentllm::test
