// `eval --task mc` on the fixtures: the library's scores of tests/data/mc/handmade.jsonl on stories260K
// against an independent float64 numpy transcription (scripts/mc_float64_check.py, committed output
// tests/data/mc/float64_stories260K.json): the same ids, the same log-likelihoods within float32
// accumulation, the same predictions; the CLI's JSON (acc, acc_norm, mean_stderr); and the TinyStories
// next-sentence task, on which the TinyStories fixtures score well above chance (1/4).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "latentllm/mc.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace mc = eval::mc;
namespace fs = std::filesystem;
using json = nlohmann::json;

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

json run_json(const std::string& args) {
  std::string out;
  const int rc = run_command(cli_path().string() + " " + args + " --json --quiet 2>/dev/null", out);
  EXPECT_EQ(rc, 0) << args << "\n" << out;
  return json::parse(out);
}

TEST(Mc, ScoresMatchAnIndependentFloat64Forward) {
  const fs::path dir = shared_path("models/stories260K/hf");
  const auto m = model::Model::load(dir);
  const auto tok = io::load_tokenizer(dir);
  const std::vector<mc::Item> items = mc::read_items(test_data_path("mc/handmade.jsonl"));
  const json ref = json::parse(read_bytes(test_data_path("mc/float64_stories260K.json")));
  const mc::Result r = mc::evaluate(*m, *tok, items, {});
  ASSERT_EQ(r.items.size(), ref.at("items").size());
  for (std::size_t k = 0; k < r.items.size(); ++k) {
    const json& x = ref.at("items")[k];
    SCOPED_TRACE("item " + std::to_string(k));
    for (int i = 0; i < items[k].alternatives(); ++i) {
      EXPECT_EQ(r.items[k].context_ids[static_cast<std::size_t>(i)], x.at("context_ids")[i].get<std::vector<std::int32_t>>());
      EXPECT_EQ(r.items[k].continuation_ids[static_cast<std::size_t>(i)],
                x.at("continuation_ids")[i].get<std::vector<std::int32_t>>());
      EXPECT_NEAR(r.items[k].loglik[static_cast<std::size_t>(i)], x.at("loglik")[i].get<double>(), 1e-3);
    }
    EXPECT_EQ(r.items[k].pred, x.at("pred"));
    EXPECT_EQ(r.items[k].pred_norm, x.at("pred_norm"));
  }
  EXPECT_DOUBLE_EQ(r.acc, ref.at("acc").get<double>());
  EXPECT_DOUBLE_EQ(r.acc_norm, ref.at("acc_norm").get<double>());
  // An empty context is lm-eval's prefix token (BOS) alone.
  EXPECT_EQ(r.items[5].context_ids[0], std::vector<std::int32_t>{1});
}

// The CLI's document: per-task results and mean_stderr = sample stdev / sqrt(n).
TEST(Mc, CliJsonAndStderr) {
  const fs::path f = make_temp_dir("mc-cli") / "wrong.jsonl";
  {
    std::ofstream out(f);
    // Two items the model gets right and one with the gold on the absurd choice: acc = 2/3.
    out << R"({"context": "Tom had a red ball. He threw the ball to his dog. The dog", "choices": ["ran after the ball.", "filed a tax return."], "gold": 0})" << "\n";
    out << R"({"context": "The sun was hot, so Mia wanted", "choices": ["to eat ice cream.", "a new tractor engine."], "gold": 0})" << "\n";
    out << R"({"context": "Once upon a time, there was a little girl named Lily. She loved to play", "choices": ["outside in the park.", "with quantum fields."], "gold": 1})" << "\n";
  }
  const json r = run_json("eval --task mc --model " + q(shared_path("models/stories260K/hf")) + " --data " + q(f));
  const json& t = r.at("results").at("wrong");
  EXPECT_NEAR(t.at("acc").get<double>(), 2.0 / 3.0, 1e-12);
  // sample stdev of {1, 1, 0} = sqrt(1/3), over sqrt(3): 1/3.
  EXPECT_NEAR(t.at("acc_stderr").get<double>(), 1.0 / 3.0, 1e-12);
  EXPECT_EQ(r.at("item_count"), 3);
  EXPECT_EQ(r.at("items").size(), 3u);
}

// The discriminating task: chance is 25 %; both TinyStories fixtures score far above it (acc_norm more than
// four standard errors above 0.25). The figures are in docs (README, "Zero-shot multiple choice").
TEST(Mc, TinyStoriesNextSentenceAboveChance) {
  const std::string data = q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.txt"));
  for (const char* model : {"models/stories260K/hf", "models/TinyStories-656K"}) {
    const json r = run_json("eval --task mc --format tinystories-next --data " + data + " --model " +
                            q(shared_path(model)));
    const json& t = r.at("results").at("tinystories-next");
    SCOPED_TRACE(model);
    EXPECT_EQ(r.at("item_count"), 232);
    EXPECT_GT(t.at("acc_norm").get<double>() - 0.25, 4 * t.at("acc_norm_stderr").get<double>());
    EXPECT_GT(t.at("acc").get<double>(), 0.35);
  }
}

}  // namespace
}  // namespace latentllm::test
