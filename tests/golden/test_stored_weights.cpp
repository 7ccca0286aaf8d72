// Weights kept in their stored dtype (model::LoadOptions::Weights::Stored) on 16-bit copies of the
// shared checkpoints made here: a latent checkpoint of stories260K (F16 factors, block identity) and its
// dense BF16 export, and opt-tiny's dense F16 export. Perplexity is bit-identical to the float32
// weights, eager and layer-major; decoding logits stay within the GEMV's rounding bound; the footprint
// counts the stored bytes; `latentllm ppl --weights` gives the same figure either way.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/export.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
using Weights = model::LoadOptions::Weights;

fs::path stories() { return test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"); }

// A latent F16 checkpoint of `model` (asvd-rootcov 30 %, block identity) in a temporary directory.
fs::path latent16(const std::string& model, const std::string& tag) {
  set_log_callback([](LogLevel, std::string_view) {});
  const fs::path src = test::shared_path(model);
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
  const fs::path out = test::make_temp_dir("stored-" + tag) / "latent";
  checkpoint::save(*m, out, checkpoint::SaveOptions{});  // F16
  return out;
}

// The dense export of a latent checkpoint in `dt`.
fs::path dense_export(const fs::path& latent, DType dt) {
  const fs::path out = latent.parent_path() / fmt::format("dense-{}", dtype_name(dt));
  format::ExportOptions eo;
  eo.dtype = dt;
  format::export_checkpoint(latent, out, eo);
  return out;
}

struct Fixture {
  fs::path latent, dense_bf16, dense_f16;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.latent = latent16("models/stories260K/hf", "stories");
    x.dense_bf16 = dense_export(x.latent, DType::BF16);
    x.dense_f16 = dense_export(latent16("models/opt-tiny", "opt"), DType::F16);
    return x;
  }();
  return f;
}

// 5 windows of 128 in batches of 2: float32, stored eager and stored layer-major, the same bits.
void expect_same_perplexity(const fs::path& dir) {
  const auto f32 = model::Model::load(dir);
  const auto stored = model::Model::load(dir, {.weights = Weights::Stored});
  const auto lazy = model::Model::load(dir, {.lazy = true, .weights = Weights::Stored});
  const auto tok = io::load_tokenizer(dir);
  const auto ids = eval::eval_ids(*tok, io::Dataset::Text, stories(), 128);
  const auto a = eval::perplexity_ids(*f32, ids, 128, 5, 2, "stories");
  const auto b = eval::perplexity_ids(*stored, ids, 128, 5, 2, "stories");
  const auto c = eval::perplexity_ids(*lazy, ids, 128, 5, 2, "stories");
  EXPECT_EQ(a.mean_nll, b.mean_nll) << dir;
  EXPECT_EQ(a.mean_nll, c.mean_nll) << dir;
  EXPECT_TRUE(std::isfinite(a.mean_nll));
  // The stored model holds 16-bit matrices only, and counts them at 2 bytes.
  for (const auto& l : stored->layer(0).linears) {
    EXPECT_TRUE(l.stored16()) << l.name;
    for (const model::Weight* w : {&l.weight, &l.B, &l.A}) EXPECT_TRUE(w->empty() || !w->is_f32()) << l.name;
  }
  EXPECT_EQ(stored->footprint().weights, Weights::Stored);
  EXPECT_GT(stored->footprint().largest_widened, 0);
  EXPECT_LT(stored->footprint().all_layers(), f32->footprint().all_layers() * 6 / 10);
  EXPECT_EQ(lazy->footprint().all_layers(), stored->footprint().all_layers());
}

TEST(StoredWeights, LatentF16PerplexityBitIdentical) { expect_same_perplexity(fixture().latent); }
TEST(StoredWeights, DenseBf16PerplexityBitIdentical) { expect_same_perplexity(fixture().dense_bf16); }
TEST(StoredWeights, OptDenseF16PerplexityBitIdentical) { expect_same_perplexity(fixture().dense_f16); }

// Prefill (8 positions: the layers' sgemm on widened blocks, the same bits; the mapped head splits
// its product by vocabulary blocks, the eager one not) and each decoding step (one row: the GEMV) stay
// within rounding of the float32 weights' logits.
TEST(StoredWeights, DecodingLogitsWithinBound) {
  for (const fs::path& dir : {fixture().latent, fixture().dense_bf16, fixture().dense_f16}) {
    const auto f32 = model::Model::load(dir);
    const auto stored = model::Model::load(dir, {.weights = Weights::Stored});
    model::KvCache ca(*f32, 32), cb(*stored, 32);
    const std::vector<std::int32_t> prompt = {1, 400, 401, 402, 403, 404, 405, 406};
    MatrixF la, lb;
    f32->forward_cached(prompt, ca, la);
    stored->forward_cached(prompt, cb, lb);
    EXPECT_LE((la - lb).cwiseAbs().maxCoeff(), 1e-5f * (1.0f + la.cwiseAbs().maxCoeff())) << dir;
    for (std::int32_t t : {7, 8, 9, 10}) {
      f32->forward_cached(std::vector<std::int32_t>{t}, ca, la);
      stored->forward_cached(std::vector<std::int32_t>{t}, cb, lb);
      const float scale = 1.0f + la.cwiseAbs().maxCoeff();
      EXPECT_LE((la - lb).cwiseAbs().maxCoeff(), 1e-4f * scale) << dir << " token " << t;
    }
  }
}

// With huge_pages (what generate loads) every 16-bit matrix is an owned copy of the mapped one, byte
// for byte, and prefill and decoding give the mapped model's logits to the last bit.
// The 16-bit matrix w keeps, or an empty one.
const Matrix16& half_of(const model::Weight& w) {
  static const Matrix16 kNone;
  return w.half() != nullptr ? *w.half() : kNone;
}

TEST(StoredWeights, HugePagesCopiesGiveTheSameBits) {
  for (const fs::path& dir : {fixture().latent, fixture().dense_bf16, fixture().dense_f16}) {
    const auto mapped = model::Model::load(dir, {.weights = Weights::Stored});
    // Every tensor copied (by default only those of 2 MiB and more, which these small models lack).
    const auto huge =
        model::Model::load(dir, {.weights = Weights::Stored, .huge_pages = true, .huge_pages_min_bytes = 0});
    const auto defaults = model::Model::load(dir, {.weights = Weights::Stored, .huge_pages = true});
    EXPECT_EQ(half_of(defaults->layer(0).linears[0].weight).owned, nullptr);
    EXPECT_EQ(half_of(defaults->layer(0).linears[0].B).owned, nullptr);
    for (int i = 0; i < mapped->num_layers(); ++i) {
      const auto& a = mapped->layer(i).linears;
      const auto& b = huge->layer(i).linears;
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t j = 0; j < a.size(); ++j) {
        for (const auto& [x, y] : {std::pair{&half_of(a[j].weight), &half_of(b[j].weight)},
                                   std::pair{&half_of(a[j].A), &half_of(b[j].A)},
                                   std::pair{&half_of(a[j].B), &half_of(b[j].B)}}) {
          ASSERT_EQ(x->size(), y->size()) << b[j].name;
          if (y->size() == 0) continue;
          EXPECT_EQ(x->owned, nullptr) << b[j].name;  // a view of the mapping
          EXPECT_NE(y->owned, nullptr) << b[j].name;  // a copy
          EXPECT_NE(x->data, y->data) << b[j].name;
          EXPECT_EQ(std::memcmp(x->data, y->data, static_cast<std::size_t>(x->bytes())), 0) << b[j].name;
        }
      }
    }
    EXPECT_EQ(huge->footprint().all_layers(), mapped->footprint().all_layers());
    EXPECT_EQ(huge->footprint().tables, mapped->footprint().tables);
    model::KvCache ca(*mapped, 32), cb(*huge, 32);
    const std::vector<std::int32_t> prompt = {1, 400, 401, 402, 403, 404, 405, 406};
    MatrixF la, lb;
    mapped->forward_cached(prompt, ca, la);
    huge->forward_cached(prompt, cb, lb);
    EXPECT_EQ(la, lb) << dir;
    for (std::int32_t t : {7, 8, 9, 10}) {
      mapped->forward_cached(std::vector<std::int32_t>{t}, ca, la);
      huge->forward_cached(std::vector<std::int32_t>{t}, cb, lb);
      EXPECT_EQ(la, lb) << dir << " token " << t;
    }
  }
}

// generate's default (a copy in huge pages) and --map-weights (the mapping in place) give the same text.
TEST(StoredWeights, GenerateMapWeightsSameText) {
  const std::string base = fmt::format("{} generate --model '{}' --prompt 'Once upon a' --temperature 0 "
                                       "--max-new-tokens 12",
                                       test::cli_path().string(), fixture().dense_bf16.string());
  std::string copied, mapped;
  ASSERT_EQ(test::run_command(base, copied), 0) << copied;
  ASSERT_EQ(test::run_command(base + " --map-weights", mapped), 0) << mapped;
  auto text = [](const std::string& out) {  // the line after the header that ends "greedy"
    const auto p = out.find("greedy\n");
    return p == std::string::npos ? std::string() : out.substr(p + 7, out.find('\n', p + 7) - (p + 7));
  };
  EXPECT_GT(text(copied).size(), 5u) << copied;
  EXPECT_EQ(text(copied), text(mapped));
}

TEST(StoredWeights, PplCliSameFigureAndStoredPlan) {
  // --verbose: the memory plans' items, where the weights' form is named.
  const std::string base = fmt::format("{} ppl --model '{}' --dataset text --data '{}' --seqlen 128 "
                                       "--max-windows 3 --verbose",
                                       test::cli_path().string(), fixture().dense_bf16.string(), stories().string());
  std::string f32_out, stored_out;
  ASSERT_EQ(test::run_command(base + " --weights f32 2>&1", f32_out), 0) << f32_out;
  ASSERT_EQ(test::run_command(base + " 2>&1", stored_out), 0) << stored_out;  // stored by default
  auto ppl_line = [](const std::string& s) {
    const auto p = s.find("\nppl ");
    return p == std::string::npos ? std::string() : s.substr(p, s.find('\n', p + 1) - p);
  };
  EXPECT_FALSE(ppl_line(f32_out).empty()) << f32_out;
  EXPECT_EQ(ppl_line(f32_out), ppl_line(stored_out));
  EXPECT_NE(stored_out.find("weights (stored)"), std::string::npos) << stored_out;
  EXPECT_NE(f32_out.find("weights (float32)"), std::string::npos) << f32_out;
}

}  // namespace
}  // namespace latentllm
