// The perplexity protocol on small inputs (window count, tail dropped, max-windows, too-short data),
// and the `inspect` / `ppl` subcommands: output, --json, exit codes and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

// Shell-quoted path.
std::string q(const std::filesystem::path& p) { return fmt::format("'{}'", p.string()); }

std::filesystem::path tiny_model() { return test::shared_path("models/TinyStories-656K"); }
std::filesystem::path stories() { return test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"); }

std::filesystem::path write_text(const std::string& tag, const std::string& text) {
  const auto p = test::make_temp_dir(tag) / "data.txt";
  std::ofstream(p) << text;
  return p;
}

TEST(Perplexity, WindowsAreNonOverlappingAndTheTailIsDropped) {
  const auto m = model::Model::load(tiny_model());
  const auto tok = io::load_tokenizer(tiny_model());
  const auto ids = eval::eval_ids(*tok, io::Dataset::Text, stories(), 64);
  ASSERT_GT(ids.size(), 300u);
  EXPECT_EQ(ids.front(), 1);  // BOS once, at the start
  // 3 windows + 10 tail tokens: the tail is ignored, each window predicts T − 1 tokens.
  const std::vector<std::int32_t> part(ids.begin(), ids.begin() + 3 * 64 + 10);
  const auto r = eval::perplexity_ids(*m, part, 64, 0, 2, "part");
  EXPECT_EQ(r.tokens, 3 * 64 + 10);
  EXPECT_EQ(r.windows, 3);
  EXPECT_EQ(r.predicted, 3 * 63);
  // Other batchings block the float GEMMs differently: equal to about 1e-7 relative.
  const double nll = m->windows_nll(std::span(part).first(3 * 64), 64);
  EXPECT_NEAR(r.mean_nll, nll / (3 * 63), 1e-6 * r.mean_nll);
  EXPECT_NEAR(r.ppl, std::exp(r.mean_nll), 1e-9 * r.ppl);
  // The batch size does not change the result; max_windows keeps the first K windows.
  EXPECT_NEAR(eval::perplexity_ids(*m, part, 64, 0, 1, "part").mean_nll, r.mean_nll, 1e-6 * r.mean_nll);
  const auto first = eval::perplexity_ids(*m, part, 64, 1, 0, "part");
  EXPECT_EQ(first.windows, 1);
  EXPECT_NEAR(first.mean_nll, m->windows_nll(std::span(part).first(64), 64) / 63, 1e-6 * first.mean_nll);
}

TEST(Perplexity, TooShortForOneWindowNamesTheFileAndCounts) {
  const auto m = model::Model::load(tiny_model());
  const std::vector<std::int32_t> ids(100, 5);
  try {
    eval::perplexity_ids(*m, ids, 128, 0, 0, "short.txt");
    FAIL() << "no exception";
  } catch (const FormatError& e) {
    EXPECT_STREQ(e.what(), "short.txt: dataset too short for one window (expected >= 128 tokens, got 100)");
  }
}

TEST(Perplexity, DefaultSeqlenIsCappedAt2048) {
  model::ModelConfig c;
  c.max_position_embeddings = 512;
  EXPECT_EQ(eval::default_seqlen(c), 512);
  c.max_position_embeddings = 32768;
  EXPECT_EQ(eval::default_seqlen(c), 2048);
}

TEST(Perplexity, C4IsTruncatedTo256Windows) {
  const auto tok = io::load_tokenizer(tiny_model());
  const auto c4 = test::shared_path("data/c4/c4-train.00000-of-01024.first1000.jsonl");
  EXPECT_EQ(eval::eval_ids(*tok, io::Dataset::C4, c4, 16).size(), 256u * 16u);
}

// ---------------------------------------------------------------------------------------------
// CLI

TEST(InspectCli, PrintsArchitectureDimensionsParametersAndTokenizer) {
  std::string out;
  ASSERT_EQ(test::run_command(test::cli_path().string() + " inspect " + q(tiny_model()), out), 0) << out;
  for (const char* s : {"LlamaForCausalLM", "d 128, layers 2, heads 8, kv heads 4, d_h 16, ffn 384, vocab 2048",
                        "656,000", "tokenizer.json:BPE", "F32"})
    EXPECT_NE(out.find(s), std::string::npos) << s << "\n" << out;
}

TEST(InspectCli, JsonCountsParameters) {
  std::string out;
  ASSERT_EQ(test::run_command(test::cli_path().string() + " inspect --json " + q(test::shared_path("models/opt-tiny")), out), 0)
      << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("model_params").get<std::int64_t>(), 17740288);  // opt-tiny README: 17.7 M
  EXPECT_EQ(j.at("family"), "opt");
  EXPECT_EQ(j.at("tokenizer").at("bos_id"), 2);
}

TEST(PplCli, JsonResultMatchesTheLibrary) {
  std::string out;
  // Progress goes to stderr; keep only stdout.
  const std::string cmd = fmt::format("({} ppl --model {} --dataset text --data {} --seqlen 128 --max-windows 3 --json 2>/dev/null)",
                                      test::cli_path().string(), q(tiny_model()), q(stories()));
  ASSERT_EQ(test::run_command(cmd, out), 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("window_count"), 3);
  EXPECT_EQ(j.at("predicted_token_count"), 3 * 127);
  EXPECT_GT(j.at("tokens_per_s").get<double>(), 0.0);
  EXPECT_TRUE(std::isfinite(j.at("tokens_per_s").get<double>()));
  const auto m = model::Model::load(tiny_model());
  const auto tok = io::load_tokenizer(tiny_model());
  eval::PplOptions opt;
  opt.dataset = io::Dataset::Text;
  opt.data = stories();
  opt.seqlen = 128;
  opt.max_windows = 3;
  EXPECT_NEAR(j.at("ppl").get<double>(), eval::perplexity(*m, *tok, opt).ppl, 1e-6 * j.at("ppl").get<double>());
}

TEST(PplCli, TextOutputAndProgress) {
  std::string out;
  const std::string cmd = test::cli_path().string() + " ppl --model " + q(tiny_model()) + " --dataset text --data " +
                          q(stories()) + " --seqlen 64 --max-windows 2 --threads 1";
  ASSERT_EQ(test::run_command(cmd, out), 0) << out;
  for (const char* s : {"ppl ", "windows      2", "tokens/s", "windows 2/2"})
    EXPECT_NE(out.find(s), std::string::npos) << s << "\n" << out;
}

TEST(PplCli, DatasetTooShortFailsWithOneMessage) {
  const auto data = write_text("short", "Once upon a time there was a cat.");
  std::string out;
  const int rc = test::run_command(test::cli_path().string() + " ppl --model " + q(tiny_model()) +
                                       " --dataset text --data " + q(data) + " --seqlen 128", out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("latentllm: error: " + data.string() + ": dataset too short for one window (expected >= 128 tokens, got "),
            std::string::npos)
      << out;
}

TEST(PplCli, UnknownDatasetAndMissingModelFail) {
  std::string out;
  EXPECT_NE(test::run_command(test::cli_path().string() + " ppl --model " + q(tiny_model()) +
                                  " --dataset imagenet --data " + q(stories()), out), 0);
  EXPECT_NE(out.find("imagenet"), std::string::npos) << out;
  const auto empty = test::make_temp_dir("nomodel");
  EXPECT_EQ(test::run_command(test::cli_path().string() + " ppl --model " + q(empty) + " --dataset text --data " +
                                  q(stories()), out), 1);
  EXPECT_NE(out.find(empty.string()), std::string::npos) << out;
  EXPECT_EQ(test::run_command(test::cli_path().string() + " inspect " + q(empty / "nope"), out), 1);
  EXPECT_NE(out.find("latentllm: error: "), std::string::npos) << out;
}

}  // namespace
}  // namespace latentllm
