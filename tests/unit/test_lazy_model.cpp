// Lazy models (model::LoadOptions::lazy) on tiny synthetic checkpoints: layers loaded and released on
// demand, the same numbers as an eager model, non-finite weights found when widened; the weight
// footprint and the memory plan of an evaluation (core::MemoryPlan, eval::plan_perplexity_memory),
// checked against hand-computed byte counts; core::parse_bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/threads.hpp"
#include "model_fixtures.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

using model::Model;
using test::LlamaDims;
using test::OptDims;

std::vector<std::int32_t> some_ids(std::int64_t n, std::int64_t V) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7 + 3) % V);
  return ids;
}

LlamaDims untied() {
  LlamaDims s;
  s.tie = false;
  return s;
}

TEST(LazyModel, LayersAreNotLoadedUntilAskedAndUsingOneThrows) {
  const auto dir = test::make_llama(LlamaDims{}, 71).write("lazy-unloaded");
  const auto m = Model::load(dir, {.lazy = true});
  EXPECT_TRUE(m->lazy());
  ASSERT_EQ(m->num_layers(), 2);
  EXPECT_FALSE(m->layer_loaded(0));
  EXPECT_FALSE(m->layer_loaded(1));
  EXPECT_EQ(test::error_of<Error>([&] { (void)m->layer(1); }),
            dir.string() + ": layer 1 is not loaded (expected load_layer(1) before using it in a lazy model)");
  // The forward asks for the layer the same way.
  const auto ids = some_ids(8, 48);
  EXPECT_EQ(test::error_of<Error>([&] { (void)m->windows_nll(ids, 8); }),
            dir.string() + ": layer 0 is not loaded (expected load_layer(0) before using it in a lazy model)");
}

TEST(LazyModel, ReleaseLayerOnAnEagerModelThrows) {
  const auto dir = test::make_opt(OptDims{}, 72).write("eager-release");
  const auto m = Model::load(dir);
  EXPECT_FALSE(m->lazy());
  EXPECT_TRUE(m->layer_loaded(1));
  m->load_layer(1);  // nothing: already in memory
  test::expect_error<Error>([&] { m->release_layer(1); },
                            {dir.string() + ": release_layer(1) on an eager model (expected a model loaded with "
                                            "LoadOptions::lazy"});
  EXPECT_TRUE(m->layer_loaded(1));
}

TEST(LazyModel, LoadReleaseLoadGivesTheEagerWeights) {
  const auto dir = test::make_llama(untied(), 73).write("lazy-roundtrip");
  const auto eager = Model::load(dir);
  const auto lazy = Model::load(dir, {.lazy = true});
  for (int round = 0; round < 2; ++round) {
    lazy->load_layer(1);
    ASSERT_TRUE(lazy->layer_loaded(1));
    EXPECT_FALSE(lazy->layer_loaded(0));
    const auto& a = eager->layer(1).linears;
    const auto& b = lazy->layer(1).linears;
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].name, b[k].name);
      EXPECT_TRUE(a[k].weight == b[k].weight) << a[k].name;
    }
    lazy->release_layer(1);
    EXPECT_FALSE(lazy->layer_loaded(1));
    EXPECT_THROW((void)lazy->layer(1), Error);
  }
}

// windows_nll of a lazy model with every layer loaded, and perplexity_ids (layer-major) of a lazy
// model with none, equal the eager model's to the last bit: OPT with projections and an untied
// Llama (the head a separate mapped table).
TEST(LazyModel, PerplexityEqualsEagerBitForBit) {
  OptDims os;
  os.p = 12;  // project_in/out
  const std::vector<std::filesystem::path> dirs = {test::make_opt(os, 74).write("lazy-opt"),
                                                   test::make_llama(untied(), 75).write("lazy-llama")};
  for (const auto& dir : dirs) {
    const auto eager = Model::load(dir);
    const auto lazy = Model::load(dir, {.lazy = true});
    const auto ids = some_ids(5 * 10 + 3, eager->config().vocab_size);
    const auto e = eval::perplexity_ids(*eager, ids, 10, 0, 2, "ids");
    std::vector<int> layers_seen;
    const auto l = eval::perplexity_ids(*lazy, ids, 10, 0, 2, "ids",
                                        [&](const eval::PplProgress& p) { layers_seen.push_back(p.layers_done); });
    EXPECT_EQ(l.windows, 5);
    EXPECT_EQ(e.mean_nll, l.mean_nll) << dir;
    EXPECT_EQ(layers_seen.front(), 1);  // one report per layer, then per batch at the head
    for (int i = 0; i < lazy->num_layers(); ++i) EXPECT_FALSE(lazy->layer_loaded(i));  // released again
    // A layer the caller loaded stays loaded.
    lazy->load_layer(0);
    EXPECT_EQ(eval::perplexity_ids(*lazy, ids, 10, 0, 2, "ids").mean_nll, e.mean_nll);
    EXPECT_TRUE(lazy->layer_loaded(0));
    lazy->load_layer(1);
    const auto span = std::span(ids).first(20);
    EXPECT_EQ(lazy->windows_nll(span, 10), eager->windows_nll(span, 10));
    // The head's logits, widened one vocabulary block at a time (other GEMM blocking: near, not equal).
    MatrixF h, le, ll;  // [20, d], [20, V] x 2
    eager->embed(span, 10, h);
    eager->head(h, le);
    lazy->head(h, ll);
    ASSERT_EQ(le.cols(), ll.cols());
    EXPECT_LE((le - ll).cwiseAbs().maxCoeff(), 1e-5f * le.cwiseAbs().maxCoeff());
  }
}

TEST(LazyModel, NonFiniteWeightIsFoundWhenTheLayerLoads) {
  auto c = test::make_opt(OptDims{}, 76);
  c.data("model.decoder.layers.1.fc2.weight")[5] = std::nanf("");
  const auto m = Model::load(c.write("lazy-nan"), {.lazy = true});  // not widened yet: no error
  m->load_layer(0);
  test::expect_error<NumericError>([&] { m->load_layer(1); },
                                   {"model.decoder.layers.1.fc2.weight: non-finite value at [0, 5] (expected finite"});
  EXPECT_FALSE(m->layer_loaded(1));
}

TEST(LazyModel, ScanFiniteFindsANonFiniteWeightAtLoad) {
  auto c = test::make_opt(OptDims{}, 76);
  c.data("model.decoder.layers.1.fc2.weight")[5] = std::numeric_limits<float>::infinity();
  const auto dir = c.write("lazy-scan");
  test::expect_error<NumericError>([&] { Model::load(dir, {.lazy = true, .scan_finite = true}); },
                                   {"model.decoder.layers.1.fc2.weight: non-finite value at [0, 5] (expected finite"});
  const auto ok = Model::load(test::make_opt(OptDims{}, 76).write("lazy-scan-ok"), {.lazy = true, .scan_finite = true});
  EXPECT_FALSE(ok->layer_loaded(0)) << "scanned, not kept";
}

TEST(LazyModel, NonFiniteEmbeddingRowIsFoundWhenGathered) {
  auto c = test::make_llama(LlamaDims{}, 77);
  c.data("model.embed_tokens.weight")[3 * 16 + 2] = INFINITY;  // row 3
  const auto m = Model::load(c.write("lazy-inf-embed"), {.lazy = true});
  MatrixF h;  // [n, d]
  m->embed(std::vector<std::int32_t>{1, 2, 4, 5}, 4, h);  // row 3 is not read
  test::expect_error<NumericError>([&] { m->embed(std::vector<std::int32_t>{1, 3, 4, 5}, 4, h); },
                                   {"model.embed_tokens.weight: non-finite value at [3, 2] (expected finite, got inf)"});
}

// The untied Llama fixture (V 48, d 16, H 4, H_kv 2, d_h 6, ffn 20, F32): per layer q 24x16, k and v
// 12x16, o 16x24, gate/up 20x16, down 16x20, two norms of 16 = 2144 floats.
TEST(WeightFootprint, CountsEachLayerTheTablesAndTheRest) {
  const auto dir = test::make_llama(untied(), 78).write("footprint");
  for (const bool lazy : {false, true}) {
    const auto m = Model::load(dir, {.lazy = lazy});
    const model::WeightFootprint& f = m->footprint();
    EXPECT_EQ(f.layers, (std::vector<std::int64_t>{2144 * 4, 2144 * 4}));
    EXPECT_EQ(f.tables, 2 * 48 * 16 * 4);  // embedding + head
    EXPECT_EQ(f.other, 16 * 4);            // the final norm
    EXPECT_EQ(f.largest_layer_tensor_stored, 24 * 16 * 4);  // q_proj (o_proj alike)
    EXPECT_EQ(f.largest_table_stored, 48 * 16 * 4);
    EXPECT_EQ(f.largest_layer(), 2144 * 4);
    EXPECT_EQ(f.all_layers(), 2 * 2144 * 4);
  }
}

// The same fixture, 1000 ids, 3 windows of 8, batches of 2 windows, 2 threads. Activations per token:
// 2·16 + max(2·24 + 2·12, 2·20, 16 + 16) = 104 floats; a batch is 16 tokens.
TEST(PlanPerplexityMemory, TotalsAreTheHandComputedBytes) {
  const auto m = Model::load(test::make_llama(untied(), 79).write("plan"), {.lazy = true});
  constexpr std::int64_t kRuntime = (256 << 20) + 4 * 1000, kActs = 4 * 16 * 104, kLogits = 4 * 256 * 512;
  const auto plan = eval::plan_perplexity_memory(*m, 1000, 3, 8, 2, 2, 1 << 30);
  EXPECT_EQ(plan.eager.total(), 2 * 8576 + 6144 + 64 + 3072 + kActs + 2 * kLogits + kRuntime);
  EXPECT_EQ(plan.layer_major.total(),
            8576 + 64 + 4 * 3 * 8 * 16 + (3072 + 1536) + kActs + 2 * (kLogits + 4 * 512 * 16) + kRuntime);
  EXPECT_TRUE(plan.eager.fits());
  EXPECT_EQ(plan.layer_major.budget, 1 << 30);
  // One window: batches of one window, 8 tokens.
  const auto one = eval::plan_perplexity_memory(*m, 1000, 1, 8, 2, 2, 0);
  EXPECT_EQ(one.layer_major.total(), plan.layer_major.total() - 2 * 512 - kActs / 2);
  EXPECT_FALSE(one.layer_major.fits());
  // The most windows that fit: 2 in a budget one byte short of 3 windows' plan, none below one's.
  const std::int64_t three = plan.layer_major.total();
  EXPECT_EQ(eval::max_layer_major_windows(*m, 1000, 3, 8, 2, 2, three), 3);
  EXPECT_EQ(eval::max_layer_major_windows(*m, 1000, 3, 8, 2, 2, three - 1), 2);
  EXPECT_EQ(eval::max_layer_major_windows(*m, 1000, 3, 8, 2, 2, one.layer_major.total() - 1), 0);
}

// Compression of the same fixture (d 16, H·d_h 24, ffn 20, gated) on 64 tokens in windows of 8, 2
// threads: every item of plan_compress_memory by hand (docs/SCALE.md). The site covariances count three
// times: the double matrices, their exact sums (calib::ExactSums) while the batches are added, and the
// copies the deferred output errors hold.
TEST(PlanCompressMemory, TotalsAreTheHandComputedBytes) {
  const auto m = Model::load(test::make_llama(untied(), 80).write("plan-compress"), {.lazy = true});
  core::set_num_threads(2);
  compress::CompressOptions o;  // latentllm, joint Q-K and up-down, batches of 8 windows
  o.pipeline.resume_limit_bytes = 1 << 30;
  constexpr std::int64_t kRuntime = (256 << 20) + 4 * 64, kChunks = 2 * 12 * 8 * (std::int64_t{4} << 20);
  // The deferred finishing work: the layer's fits in float32, at most 2 x 4 B per weight (q 16 x 24,
  // k and v 16 x 12, o 24 x 16, gate/up/down 3 x 16 x 20: 2112), the sites' statistics in double (as
  // the covariances) and q/k in double ((24 + 12) x 16).
  const std::int64_t deferred = 8 * 2112 + 8 * (24 + 12) * 16;
  const std::int64_t common = 2 * 8576 + 64 + (3072 + 1536) + 4 * 64 * 16 + 4 * 64 * 104 + kRuntime + deferred;
  const auto plan = compress::plan_compress_memory(*m, 64, 8, o, std::int64_t{2} << 30);
  // Joint up-down with float passes (the default): inputs and outputs in float, plus the float
  // products of a chunk ([20, 20] + [20, 16]) before they are added to the double statistics.
  // The exact sums of joint up-down's accumulators: crosses [20, 16] and [16, 20], the Gram's upper
  // triangle (210 entries) and their sums (2 x (20 + 16 + 1)), 16 bytes each.
  const std::int64_t ud_common = 4 * 64 * 20 + 8 * (5 * 400 + 15 * 20 * 16) + kChunks + 16 * (640 + 210 + 74);
  EXPECT_EQ(plan.total(), common + 4 * 64 * (16 + 24) + 3 * 8 * (2 * 256 + 576) + 4 * 64 * 16 +
                              (4 * 64 * 2 * 16 + 4 * (400 + 20 * 16) + ud_common));
  EXPECT_TRUE(plan.fits());
  o.ud_f32 = false;  // in double: inputs and outputs in double, no float products
  EXPECT_EQ(compress::plan_compress_memory(*m, 64, 8, o, std::int64_t{2} << 30).total(),
            common + 4 * 64 * (16 + 24) + 3 * 8 * (2 * 256 + 576) + 4 * 64 * 16 + (8 * 64 * 2 * 16 + ud_common));
  o.joint.ud = false;  // the down_proj input (20 wide) is tapped; a local decomposition instead
  o.pipeline.resume_limit_bytes = 0;  // passes on per-batch copies
  const auto local = compress::plan_compress_memory(*m, 64, 8, o, 1000);
  // Beyond the limit a pass holds one batch's state (batch_windows 8 of 8 tokens here: all 64), not a copy
  // of every batch's input beside it.
  // o_proj [16, 24] beats down_proj [16, 20]; one such working set per thread (2).
  EXPECT_EQ(local.total(), common + 4 * 64 * (16 + 24) + 3 * 8 * (2 * 256 + 576 + 400) +
                               2 * 8 * (2 * 576 + 4 * 24 * 16));
  EXPECT_FALSE(local.fits());
}

TEST(MemoryPlan, SumsDescribesAndSummarizes) {
  core::MemoryPlan p;
  p.title = "test";
  p.budget = 3000;
  p.add("weights", 2048, "two KiB");
  p.add("ids", 1000);
  EXPECT_EQ(p.total(), 3048);
  EXPECT_FALSE(p.fits());
  EXPECT_EQ(p.describe(),
            "test: 2.98 KiB of 2.93 KiB budget (does not fit)\n"
            "  weights    2.00 KiB  two KiB\n"
            "  ids" + std::string(10, ' ') + "1000 B\n");
  EXPECT_EQ(p.summary(), "weights 2.00 KiB, ids 1000 B");
  p.budget = 3048;
  EXPECT_TRUE(p.fits());
  EXPECT_EQ(core::MemoryPlan{}.total(), 0);
}

TEST(MemoryPlan, FormatBytesUsesBinaryUnits) {
  EXPECT_EQ(core::format_bytes(0), "0 B");
  EXPECT_EQ(core::format_bytes(1023), "1023 B");
  EXPECT_EQ(core::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(core::format_bytes(std::int64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(core::format_bytes(std::int64_t{5} << 40), "5.00 TiB");
  EXPECT_GE(core::default_memory_budget(), std::int64_t{1} << 30);
}

TEST(ParseBytes, AcceptsWholeBytesAndBinaryUnits) {
  EXPECT_EQ(core::parse_bytes("21474836480", "x"), 21474836480);
  EXPECT_EQ(core::parse_bytes("20G", "x"), 21474836480);
  EXPECT_EQ(core::parse_bytes("20GiB", "x"), 21474836480);
  EXPECT_EQ(core::parse_bytes("20gb", "x"), 21474836480);
  EXPECT_EQ(core::parse_bytes("1.5G", "x"), 1610612736);
  EXPECT_EQ(core::parse_bytes("512M", "x"), 536870912);
  EXPECT_EQ(core::parse_bytes("4k", "x"), 4096);
  EXPECT_EQ(core::parse_bytes("2T", "x"), std::int64_t{2} << 40);
  EXPECT_EQ(core::parse_bytes("100B", "x"), 100);
}

TEST(ParseBytes, RejectsAnythingElseWithOneMessage) {
  for (const char* bad : {"", "G", "abc", "0", "0.4", "1.5", "-1G", "+1G", "20X", "20 G", "1e9", "0x10", "1.2.3G",
                          "20GiBs", "9000000T", "nan", "inf"}) {
    EXPECT_EQ(test::error_of<ConfigError>([&] { (void)core::parse_bytes(bad, "--max-memory"); }),
              std::string("--max-memory (expected a byte count such as 20G, 512M or 21474836480, got ") + bad + ")");
  }
}

}  // namespace
}  // namespace latentllm
