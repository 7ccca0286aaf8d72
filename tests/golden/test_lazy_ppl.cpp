// Layer-major perplexity of lazy models (model::LoadOptions::lazy) on the shared checkpoints and on a
// latent checkpoint compressed here: the same bits as the eager window-major evaluation. And
// `latentllm ppl`'s memory plan: printed at the start, --layer-major, and a budget that cannot fit
// refused before any window runs, with the option that would fit.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/threads.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;

std::string q(const fs::path& p) { return fmt::format("'{}'", p.string()); }
fs::path stories() { return test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"); }
fs::path wiki() { return test::shared_path("data/wikitext2/wiki.test.raw"); }

// 5 windows of 128 in batches of 2 (the last batch one window): eager and lazy mean NLL.
void expect_lazy_equals_eager(const fs::path& dir) {
  const auto eager = model::Model::load(dir);
  const auto lazy = model::Model::load(dir, {.lazy = true});
  const auto tok = io::load_tokenizer(dir);
  const auto ids = eval::eval_ids(*tok, io::Dataset::Text, stories(), 128);
  const auto e = eval::perplexity_ids(*eager, ids, 128, 5, 2, "stories");
  const auto l = eval::perplexity_ids(*lazy, ids, 128, 5, 2, "stories");
  EXPECT_EQ(l.windows, 5);
  EXPECT_EQ(e.mean_nll, l.mean_nll) << dir;
  EXPECT_EQ(e.ppl, l.ppl) << dir;
  for (int i = 0; i < lazy->num_layers(); ++i) EXPECT_FALSE(lazy->layer_loaded(i)) << dir << " layer " << i;
}

TEST(LazyPerplexity, OptTinyEqualsEager) { expect_lazy_equals_eager(test::shared_path("models/opt-tiny")); }
TEST(LazyPerplexity, Stories260KEqualsEager) { expect_lazy_equals_eager(test::shared_path("models/stories260K/hf")); }
// Llama family with only lm_head stored (the embedding an alias of the head).
TEST(LazyPerplexity, TinyStories656KEqualsEager) { expect_lazy_equals_eager(test::shared_path("models/TinyStories-656K")); }

// A latent checkpoint (factored modules, block-identity junction, F16 storage) of stories260K.
TEST(LazyPerplexity, LatentCheckpointEqualsEager) {
  set_log_callback([](LogLevel, std::string_view) {});
  const fs::path src = test::shared_path("models/stories260K/hf");
  auto m = model::Model::load(src);
  const auto tok = io::load_tokenizer(src);
  calib::CalibOptions co;
  co.source = "text";
  co.data = stories();
  co.nsamples = 4;
  co.seqlen = 64;
  compress::CompressOptions opt;
  opt.method = compress::parse_method("asvd-rootcov");
  opt.ratio = 0.3;
  compress::compress_model(*m, calib::sample_calibration(*tok, co), 64, opt);
  const fs::path out = test::make_temp_dir("lazy-latent") / "latent";
  checkpoint::save(*m, out, checkpoint::SaveOptions{});
  const auto lazy = model::Model::load(out, {.lazy = true});
  ASSERT_FALSE(lazy->footprint().layers.empty());
  lazy->load_layer(0);
  EXPECT_TRUE(lazy->layer(0).linears.front().factored());
  lazy->release_layer(0);
  expect_lazy_equals_eager(out);
}

// Runs `latentllm ppl <args>` in a subshell (args may redirect); the exit status, the output in out.
int ppl(const std::string& args, std::string& out) {
  return test::run_command("(" + test::cli_path().string() + " ppl " + args + ")", out);
}

TEST(PplCliMemory, LayerMajorGivesTheWindowMajorResultAndPrintsThePlan) {
  const std::string base = "--model " + q(test::shared_path("models/TinyStories-656K")) + " --dataset text --data " +
                           q(stories()) + " --seqlen 128 --max-windows 3 --json";
  std::string eager_out, lazy_out;
  ASSERT_EQ(ppl("--max-memory 20G " + base + " 2>/dev/null", eager_out), 0) << eager_out;
  ASSERT_EQ(ppl("--layer-major " + base + " 2>/dev/null", lazy_out), 0) << lazy_out;
  const auto e = nlohmann::json::parse(eager_out), l = nlohmann::json::parse(lazy_out);
  EXPECT_EQ(e.at("order"), "window-major");
  EXPECT_EQ(l.at("order"), "layer-major");
  EXPECT_EQ(e.at("memory_budget_bytes"), std::int64_t{20} << 30);
  EXPECT_EQ(e.at("ppl").get<double>(), l.at("ppl").get<double>());  // JSON doubles round-trip exactly
  std::string log;
  ASSERT_EQ(ppl("--max-memory 20G --verbose " + base + " 2>&1 >/dev/null", log), 0) << log;
  test::expect_contains(log, {"ppl: memory plan eager (window-major): ", " of 20.00 GiB budget (fits; --max-memory)\n",
                              "ppl: memory plan layer-major (lazy layers): ", "  hidden states ",
                              "3 windows x 128 tokens x 128 x 4 B", "ppl: evaluating window-major"});
  // Without --verbose: one summary line per plan, no items.
  ASSERT_EQ(ppl("--max-memory 20G " + base + " 2>&1 >/dev/null", log), 0) << log;
  test::expect_contains(log, {"ppl: memory plan eager (window-major): ", "; --verbose lists the items\n",
                              "ppl: memory plan layer-major (lazy layers): "});
  EXPECT_EQ(log.find("  hidden states "), std::string::npos) << log;
  EXPECT_EQ(log.find("3 windows x 128 tokens"), std::string::npos) << log;
}

// opt-tiny on wikitext2 in windows of 256: the CLI names the most windows that fit, as the library
// computes them (2 threads in both).
TEST(PplCliMemory, TooSmallBudgetNamesTheWindowsThatFitBeforeAnyWork) {
  const fs::path dir = test::shared_path("models/opt-tiny");
  // The plan of ppl's default --weights stored (opt-tiny is F16).
  const auto m = model::Model::load(dir, {.lazy = true, .weights = model::LoadOptions::Weights::Stored});
  const auto ids = eval::eval_ids(*io::load_tokenizer(dir), io::Dataset::WikiText2, wiki(), 256);
  const auto n_ids = static_cast<std::int64_t>(ids.size());
  const std::int64_t windows = eval::eval_windows(n_ids, 256, 0), budget = std::int64_t{400} << 20;
  const std::int64_t k = eval::max_layer_major_windows(*m, n_ids, windows, 256, 0, 2, budget);
  ASSERT_GT(k, 0);
  ASSERT_LT(k, windows);
  std::string out;
  EXPECT_EQ(ppl("--model " + q(dir) + " --data " + q(wiki()) + " --seqlen 256 --threads 2 --layer-major --max-memory 400M",
                out),
            1);
  test::expect_contains(out, {fmt::format("latentllm: error: --max-memory: budget too small for layer-major evaluation "
                                          "of {} windows (expected at least ", windows),
                              "; got 400.00 MiB); use " + fmt::format("--max-windows {} (at most {} of the {} windows "
                                                                      "fit) or --max-memory ", k, k, windows)});
  EXPECT_EQ(out.find("ppl: windows"), std::string::npos) << out;  // no window ran
  EXPECT_EQ(out.find("ppl: layers"), std::string::npos) << out;
  // A few of those windows run in the same budget.
  ASSERT_EQ(ppl("--model " + q(dir) + " --data " + q(wiki()) + " --seqlen 256 --threads 2 --layer-major --max-memory 400M"
                " --max-windows " + std::to_string(std::min<std::int64_t>(k, 4)) + " --json 2>/dev/null", out),
            0)
      << out;
}

}  // namespace
}  // namespace latentllm
