// Global rank allocation on a real model (stories260K: 5 layers, GQA, RoPE): the pre-pass measures
// what the activation loss says, the allocation spends exactly the uniform budget, every stage
// (joint Q-K and up-down with unequal ranks) installs the planned ranks, and uniform ranks give
// what they gave before global allocation existed.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "compress/run/resume.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

constexpr int kSeqlen = 128;

std::filesystem::path model_dir() { return test::shared_path("models/stories260K/hf"); }
std::filesystem::path stories() {
  return test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt");
}

std::vector<std::int32_t> calibration() {
  calib::CalibOptions co;
  co.source = "text";
  co.data = stories();
  co.nsamples = 8;
  co.seqlen = kSeqlen;
  const auto tok = io::load_tokenizer(model_dir());
  return calib::sample_calibration(*tok, co);
}

class RankAllocE2E : public ::testing::Test {
 protected:
  void SetUp() override { set_log_callback([](LogLevel, std::string_view) {}); }
};

// Σ σ_i² of W·P is ‖W·P‖_F² = tr(W·(C + λI)·Wᵀ): the module's damped output energy on the dense inputs
// of layer 0 (which the embedding alone feeds, so the test can tap them itself).
TEST_F(RankAllocE2E, SpectraSumToTheDampedOutputEnergy) {
  auto m = model::Model::load(model_dir());
  const auto ids = calibration();
  compress::CompressOptions opt;
  const auto spectra = compress::measure_spectra(*m, ids, kSeqlen, opt);
  ASSERT_EQ(spectra.size(), 35u);  // 5 layers × 7 modules, in layer and module order
  for (const auto& s : spectra) {
    ASSERT_EQ(static_cast<std::int64_t>(s.sigma2.size()), std::min(s.out, s.in)) << s.name;
    EXPECT_TRUE(std::is_sorted(s.sigma2.rbegin(), s.sigma2.rend())) << s.name;
    EXPECT_GT(s.sigma2.back(), 0) << s.name;  // damped: every direction is excited
  }
  // Layer 0's attention input: RMSNorm of the embeddings, tapped by a stage-free layer forward.
  MatrixF h;  // [N·L, d]
  m->embed(ids, kSeqlen, h);
  struct Tap : model::ForwardObserver {
    calib::SiteStats st;
    void on_input(int, model::Site site, const MatrixF& x) override {
      if (site != model::Site::AttnIn) return;
      if (st.n == 0) st.reset(static_cast<int>(x.cols()));
      st.add(x);
    }
  } tap;
  m->layer_forward(0, h, kSeqlen, &tap);
  const MatrixD c = tap.st.xtx;
  const double lambda = opt.local.lambda_rel * c.diagonal().mean();
  const MatrixD w = m->layer(0).linear(model::Role::Q).weight.f32().cast<double>();  // [out, in]
  const double energy = (w * (c + lambda * MatrixD::Identity(c.rows(), c.cols())) * w.transpose()).trace();
  double sum = 0;
  for (double v : spectra[0].sigma2) sum += v;
  EXPECT_EQ(spectra[0].name, m->layer(0).linear(model::Role::Q).name);
  // The pre-pass sums float products in double (2.3e-8 relative here); a wrong λ, centering or input moves
  // the sum by far more than 1e-6.
  EXPECT_NEAR(sum, energy, 1e-6 * energy);
}

// --alloc-tokens: the pre-pass measures on the first whole windows within the cap (at least one),
// exactly as if only they had been given; a cap of 0 or above the tokens given takes them all.
TEST_F(RankAllocE2E, PrePassTokenCapTakesTheFirstWindows) {
  auto m = model::Model::load(model_dir());
  const auto ids = calibration();  // 8 windows
  compress::CompressOptions all;
  all.alloc_max_tokens = 0;
  compress::CompressOptions capped;
  capped.alloc_max_tokens = 3 * kSeqlen + kSeqlen / 2;  // 3.5 windows: the first 3
  const auto first3 = compress::measure_spectra(*m, std::span(ids).first(3 * kSeqlen), kSeqlen, all);
  const auto got = compress::measure_spectra(*m, ids, kSeqlen, capped);
  const auto full = compress::measure_spectra(*m, ids, kSeqlen, all);
  ASSERT_EQ(got.size(), first3.size());
  bool differs_from_full = false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].sigma2, first3[i].sigma2) << got[i].name;
    differs_from_full |= got[i].sigma2 != full[i].sigma2;
  }
  EXPECT_TRUE(differs_from_full);
  capped.alloc_max_tokens = 10;  // below one window: one window
  const auto one = compress::measure_spectra(*m, ids, kSeqlen, capped);
  EXPECT_EQ(one[0].sigma2, compress::measure_spectra(*m, std::span(ids).first(kSeqlen), kSeqlen, all)[0].sigma2);
}

// The plan never spends more than the uniform plan and leaves less than any further step would
// cost; compressing with it installs exactly its ranks, unequal ones in joint Q-K and up-down too.
TEST_F(RankAllocE2E, GlobalPlanSpendsTheUniformBudgetAndEveryStageTakesItsRanks) {
  auto m = model::Model::load(model_dir());
  const auto ids = calibration();
  compress::CompressOptions opt;  // latentllm: joint Q-K and up-down
  opt.rank_alloc = compress::RankAlloc::Global;
  const auto spectra = compress::measure_spectra(*m, ids, kSeqlen, opt);
  for (double ratio : {0.1, 0.2, 0.3, 0.4}) {
    const auto plan = compress::allocate_ranks(spectra, ratio, opt.local.junction, opt.alloc_score);
    opt.ratio = ratio;
    const auto uniform = compress::plan_model(*m, opt);
    EXPECT_LE(plan.params(), uniform.params()) << ratio;
    bool differs = false;
    for (std::size_t i = 0; i < plan.modules.size(); ++i) {
      const auto& p = plan.modules[i];
      differs |= p.rank != uniform.modules[i].rank;
      ASSERT_GE(p.rank, 1);
      ASSERT_LE(p.rank, std::min(p.out, p.in));
      if (p.rank < std::min(p.out, p.in)) {
        EXPECT_GT(eval::factored_params(p.out, p.in, p.rank + 1, true) - p.params, uniform.params() - plan.params())
            << p.name << " could still grow";
      }
    }
    EXPECT_TRUE(differs) << ratio;
  }
  opt.ratio = 0.3;
  const auto plan = compress::allocate_ranks(spectra, opt.ratio, opt.local.junction, opt.alloc_score);
  const auto report = compress::compress_model(*m, ids, kSeqlen, opt, &plan);
  ASSERT_EQ(report.modules.size(), plan.modules.size());
  bool unequal_qk = false;
  for (const auto& p : plan.modules) {
    const auto it = std::find_if(report.modules.begin(), report.modules.end(),
                                 [&](const auto& r) { return r.name == p.name; });
    ASSERT_NE(it, report.modules.end()) << p.name;
    EXPECT_EQ(it->rank, p.rank) << p.name;
    EXPECT_EQ(it->params, p.params) << p.name;
  }
  for (int i = 0; i < 5; ++i) unequal_qk |= plan.modules[7 * i].rank != plan.modules[7 * i + 1].rank;
  EXPECT_TRUE(unequal_qk);
  EXPECT_EQ(report.params, plan.params());
  EXPECT_EQ(report.rank_alloc, compress::RankAlloc::Global);
}

// Uniform ranks (the default) run as before: the default path equals an explicit uniform plan bit for
// bit, and the held-out NLL of `latentllm compress --ratio 0.3` (4 windows of 64 of this text, f32)
// is the one the tool gave before global allocation existed (commit b995917), joint up-down run as it
// then was on these 256 tokens (the default now skips it below 12·f tokens: NLL 3.42 instead of 4.52),
// with double covariance products and all 8 joint Q-K iterations (the default preset now takes float
// products and stops the iterations at 1e-6).
TEST_F(RankAllocE2E, UniformIsUnchanged) {
  const auto ids = calibration();
  compress::CompressOptions opt;
  opt.ratio = 0.3;
  auto a = model::Model::load(model_dir());
  auto b = model::Model::load(model_dir());
  compress::compress_model(*a, ids, kSeqlen, opt);
  const auto plan = compress::plan_model(*b, opt);
  compress::compress_model(*b, ids, kSeqlen, opt, &plan);
  for (int i = 0; i < a->num_layers(); ++i)
    for (std::size_t k = 0; k < a->layer(i).linears.size(); ++k) {
      EXPECT_EQ(a->layer(i).linears[k].B, b->layer(i).linears[k].B);
      EXPECT_EQ(a->layer(i).linears[k].A, b->layer(i).linears[k].A);
    }

  const auto dir = test::make_temp_dir("rank-alloc-uniform");
  const std::string q = "'", cli = test::cli_path().string();
  std::string out;
  ASSERT_EQ(test::run_command(cli + " compress --model " + q + model_dir().string() + q + " --out " + q +
                                  (dir / "u30").string() + q + " --method latentllm --rank-alloc uniform --ud-min-tokens-per-ffn 0 --covariance f64 --joint-tol 0 --ratio 0.3 --calib text " +
                                  "--calib-data " + q + stories().string() + q +
                                  " --nsamples 4 --seqlen 64 --dtype f32 2>&1",
                              out),
            0)
      << out;
  ASSERT_EQ(test::run_command(cli + " ppl --model " + q + (dir / "u30").string() + q + " --dataset text --data " + q +
                                  stories().string() + q + " --seqlen 256 --max-windows 16 --json 2>/dev/null",
                              out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  // Bit-equal in a Release build on the CPU it was recorded on; the sanitizer build's other code
  // generation moves it by ~1e-6 and another CPU's BLAS kernels (AMD EPYC against the Intel one) by
  // 1.1e-5, while a change of ranks moves it by ~3e-2.
  EXPECT_NEAR(j.at("mean_nll").get<double>(), 4.524171965293918, 1e-4);
}

// A resumed run must allocate as the killed one did: the allocation is part of the fingerprint, and
// uniform keeps the fingerprint it had (old progress directories stay resumable).
TEST_F(RankAllocE2E, ResumeFingerprintIncludesTheAllocation) {
  auto m = model::Model::load(model_dir());
  const std::vector<std::int32_t> ids(kSeqlen, 1);
  compress::CompressOptions uniform, global, grouped;
  global.rank_alloc = grouped.rank_alloc = compress::RankAlloc::Global;
  grouped.alloc_score = compress::AllocScore::Grouped;
  const auto fu = compress::run_fingerprint(*m, ids, kSeqlen, uniform);
  const auto fg = compress::run_fingerprint(*m, ids, kSeqlen, global);
  const auto fgr = compress::run_fingerprint(*m, ids, kSeqlen, grouped);
  EXPECT_NE(fu, fg);
  EXPECT_NE(fg, fgr);
  uniform.alloc_score = compress::AllocScore::Grouped;  // unused by uniform ranks
  EXPECT_EQ(compress::run_fingerprint(*m, ids, kSeqlen, uniform), fu);
}

// `compress --dry-run --rank-alloc global` runs the pre-pass and prints the global plan: at most the
// uniform total, other ranks than the uniform dry run.
TEST_F(RankAllocE2E, DryRunPrintsTheGlobalPlan) {
  const std::string q = "'", cli = test::cli_path().string();
  const std::string base = cli + " compress --model " + q + model_dir().string() + q + " --ratio 0.3 --calib text " +
                           "--calib-data " + q + stories().string() + q + " --nsamples 4 --seqlen 64 --dry-run --json";
  std::string out_u, out_g;
  ASSERT_EQ(test::run_command(base + " --rank-alloc uniform 2>/dev/null", out_u), 0) << out_u;
  ASSERT_EQ(test::run_command(base + " --rank-alloc global 2>&1", out_g), 0) << out_g;
  EXPECT_NE(out_g.find("the ranks need the dense pre-pass"), std::string::npos) << out_g;
  EXPECT_NE(out_g.find("rank allocation pre-pass: 5/5 layers done"), std::string::npos) << out_g;  // its progress
  const auto ju = nlohmann::json::parse(out_u.substr(out_u.find("\n{") + 1)).at("plan");
  const auto jg = nlohmann::json::parse(out_g.substr(out_g.find("\n{") + 1)).at("plan");
  EXPECT_LE(jg.at("params").get<std::int64_t>(), ju.at("params").get<std::int64_t>());
  ASSERT_EQ(jg.at("modules").size(), ju.at("modules").size());
  int differ = 0;
  for (std::size_t i = 0; i < ju.at("modules").size(); ++i)
    differ += jg.at("modules")[i].at("rank") != ju.at("modules")[i].at("rank");
  EXPECT_GT(differ, 10);
}

}  // namespace
}  // namespace latentllm
