// Joint Q-K-V and split heads end to end on TinyStories-656K (GQA: q_proj [128, 128], k_proj and v_proj
// [64, 128]; the paper's appendix "Activation-Aware Joint QKV Compression" and "Split-Head Compression"): the
// report's parameters stay within the ratio's budget with the shared A counted once (split heads: B's head
// blocks), q/k/v take the rank that budget allows, the stored q_proj, k_proj and v_proj hold one A, split
// heads' B is zero outside its blocks, the checkpoint reloads to bit-identical logits with a finite
// perplexity, and a lazy run and a run stopped after a layer and resumed write the eager run's bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "compress/math/joint_qkv.hpp"
#include "compress/math/split_heads.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "checkpoint_support.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
constexpr int kSeqlen = 64;

fs::path model_dir() { return test::shared_path("models/TinyStories-656K"); }
fs::path stories() { return test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"); }

std::string read(const fs::path& p) { return test::read_bytes(p); }

// 8 random windows of kSeqlen tokens of the TinyStories stories (test::text_calibration).
std::vector<std::int32_t> calibration() { return test::text_calibration(model_dir(), stories(), 8, kSeqlen); }

compress::CompressOptions options(bool qkv) {
  compress::CompressOptions o = compress::preset_options(compress::Preset::Default, compress::Method::LatentLlm, 0.3);
  o.rank_alloc = compress::RankAlloc::Uniform;
  o.joint = compress::JointParts{false, false, false};
  o.joint.qkv = qkv;
  o.split_heads = !qkv;
  return o;
}

using test::logits_of;

// Compresses TinyStories-656K and saves it (f32) to `out` (test::compress_and_save); an eager run also
// returns the compressed model's logits on `probe`.
compress::CompressReport run(const compress::CompressOptions& base, const fs::path& out, bool lazy, int stop_after,
                             const std::vector<std::int32_t>* probe = nullptr, MatrixF* logits = nullptr) {
  return test::compress_and_save(model_dir(), calibration(), kSeqlen, base, out, lazy, stop_after, probe, logits);
}

std::vector<std::int32_t> probe() {
  std::vector<std::int32_t> ids(2 * kSeqlen);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37 + 5) % 2048);
  return ids;
}

// A module's weights in the uniform plan at ratio 0.3.
std::int64_t plan_params(std::int64_t out, std::int64_t in, bool block_identity) {
  const auto j = block_identity ? compress::Junction::BlockIdentity : compress::Junction::Identity;
  return eval::factored_params(out, in, compress::rank_for_ratio(out, in, 0.3, j, "test"), block_identity);
}

const compress::ModuleReport& module(const compress::CompressReport& r, const std::string& name) {
  for (const auto& m : r.modules)
    if (m.name == name) return m;
  throw std::runtime_error("no report row for " + name);
}

class JointQkvCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { set_log_callback([](LogLevel, std::string_view) {}); }

  // Reload: the same logits as the compressed model in memory, finite perplexity; lazy and resumed runs write
  // the eager run's bytes.
  void check_reload_and_resume(const compress::CompressOptions& opt, const fs::path& tmp, const MatrixF& before) {
    auto re = model::Model::load(tmp / "eager");
    EXPECT_TRUE(logits_of(*re, probe(), kSeqlen) == before);
    const auto text = io::load_tokenizer(model_dir())->encode(read(stories()));
    const auto ppl = eval::perplexity_ids(*re, text, 128, 8, 0, "stories");
    EXPECT_TRUE(std::isfinite(ppl.ppl) && ppl.ppl > 1.0) << ppl.ppl;
    run(opt, tmp / "lazy", true, 0);
    run(opt, tmp / "resumed", false, 1);
    const std::string eager = read(tmp / "eager" / "model.safetensors");
    EXPECT_EQ(read(tmp / "lazy" / "model.safetensors"), eager);
    EXPECT_EQ(read(tmp / "resumed" / "model.safetensors"), eager);
  }
};

TEST_F(JointQkvCheckpoint, SharedAWithinBudgetReloadsAndResumes) {
  const auto tmp = test::make_temp_dir("joint-qkv");
  const auto opt = options(true);
  MatrixF before;
  const auto ids = probe();
  const auto report = run(opt, tmp / "eager", false, 0, &ids, &before);
  EXPECT_LE(report.params, static_cast<std::int64_t>(0.7 * static_cast<double>(report.dense_params)));
  auto re = model::Model::load(tmp / "eager");
  const std::int64_t d = 128, out_sum = 128 + 64 + 64;
  for (int i = 0; i < re->num_layers(); ++i) {
    const auto& layer = re->layer(i);
    const auto &q = layer.linear(model::Role::Q), &k = layer.linear(model::Role::K), &v = layer.linear(model::Role::V);
    ASSERT_TRUE(q.factored() && k.factored() && v.factored());
    EXPECT_TRUE(q.A.f32() == k.A.f32() && q.A.f32() == v.A.f32()) << "layer " << i;
    EXPECT_EQ(q.perm, k.perm);
    // The uniform plan's q/k/v budget (each module's rank at 0.3, block identity) spent on one rank,
    // r·(Σd' + d) − r².
    double budget = 0;
    for (const model::Linear* l : {&q, &k, &v}) budget += static_cast<double>(plan_params(l->out, l->in, true));
    const std::int64_t want = compress::joint_qkv_rank(d, out_sum, budget, true);
    EXPECT_EQ(q.rank(), want);
    EXPECT_GT(q.rank(), k.out);  // above k_proj's 64 rows: the latent is the three modules'
    // Counted once: q_proj its B and the shared A, k_proj and v_proj their B.
    EXPECT_EQ(module(report, q.name).params, q.B.size() + q.A.size());
    EXPECT_EQ(module(report, k.name).params, k.B.size());
    EXPECT_EQ(module(report, v.name).params, v.B.size());
    EXPECT_LE(q.B.size() + q.A.size() + k.B.size() + v.B.size(), static_cast<std::int64_t>(budget));
    EXPECT_EQ(module(report, q.name).how, "joint-qkv");
  }
  check_reload_and_resume(opt, tmp, before);
}

TEST_F(JointQkvCheckpoint, SplitHeadsBlockDiagonalWithinBudgetReloadsAndResumes) {
  const auto tmp = test::make_temp_dir("split-heads");
  const auto opt = options(false);
  MatrixF before;
  const auto ids = probe();
  const auto report = run(opt, tmp / "eager", false, 0, &ids, &before);
  EXPECT_LE(report.params, static_cast<std::int64_t>(0.7 * static_cast<double>(report.dense_params)));
  auto re = model::Model::load(tmp / "eager");
  for (int i = 0; i < re->num_layers(); ++i)
    for (const auto role : {model::Role::Q, model::Role::K, model::Role::V}) {
      const auto& l = re->layer(i).linear(role);
      const std::int64_t h = role == model::Role::Q ? 8 : 4, dh = 16;
      ASSERT_TRUE(l.factored() && !l.block_identity) << l.name;
      ASSERT_EQ(l.rank() % h, 0) << l.name;
      const std::int64_t rh = l.rank() / h;
      const auto budget = static_cast<double>(plan_params(l.out, l.in, true));
      EXPECT_EQ(l.rank(), compress::split_heads_rank(l.out, l.in, h, budget));
      const MatrixF& b = l.B.f32();  // [d', r]
      for (Eigen::Index r = 0; r < b.rows(); ++r)
        for (Eigen::Index c = 0; c < b.cols(); ++c)
          if (r / dh != c / rh) {
            ASSERT_EQ(b(r, c), 0.0f) << l.name << " " << r << "," << c;
          }
      EXPECT_EQ(module(report, l.name).params, compress::split_heads_params(l.out, l.in, h, l.rank()));
    }
  check_reload_and_resume(opt, tmp, before);
}

}  // namespace
}  // namespace latentllm
