// End-to-end compression on a real model (stories260K: 5 layers, GQA, RoPE): calibration is
// reproducible, the plan holds the budget, the latent checkpoint reloads to the same logits, and the
// root-covariance pre-conditioner beats plain SVD on held-out perplexity.
#include <gtest/gtest.h>

#include <cmath>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compressor.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

constexpr int kSeqlen = 128;

calib::CalibOptions calib_options(std::uint64_t seed) {
  calib::CalibOptions co;
  co.source = "text";
  co.data = test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt");
  co.nsamples = 8;
  co.seqlen = kSeqlen;
  co.seed = seed;
  return co;
}

std::filesystem::path model_dir() { return test::shared_path("models/stories260K/hf"); }

class CompressE2E : public ::testing::Test {
 protected:
  void SetUp() override { set_log_callback(nullptr); }
  void TearDown() override { set_log_callback([](LogLevel, std::string_view) {}); }
};

TEST_F(CompressE2E, CalibrationIsReproducibleForASeed) {
  const auto tok = io::load_tokenizer(model_dir());
  const auto a = calib::sample_calibration(*tok, calib_options(7));
  const auto b = calib::sample_calibration(*tok, calib_options(7));
  const auto c = calib::sample_calibration(*tok, calib_options(8));
  ASSERT_EQ(a.size(), 8u * kSeqlen);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST_F(CompressE2E, ContiguousWindowsAreThePrefixOfTheTokenizedText) {
  const auto tok = io::load_tokenizer(model_dir());
  auto co = calib_options(0);
  co.sampling = calib::Sampling::Contiguous;
  const auto ids = calib::sample_calibration(*tok, co);
  const auto text = io::build_eval_text(io::Dataset::Text, co.data);
  const auto all = tok->encode(text);
  ASSERT_EQ(ids.size(), 8u * kSeqlen);
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), all.begin()));
}

// Compresses stories260K in memory and returns held-out NLL per token and the model.
std::unique_ptr<model::Model> compressed(const std::string& method, double ratio, compress::CompressReport* rep) {
  auto m = model::Model::load(model_dir());
  const auto tok = io::load_tokenizer(model_dir());
  const auto ids = calib::sample_calibration(*tok, calib_options(0));
  compress::CompressOptions opt;
  opt.method = method;
  opt.ratio = ratio;
  auto r = compress::compress_model(*m, ids, kSeqlen, opt);
  if (rep) *rep = r;
  return m;
}

double heldout_nll(const model::Model& m) {
  const auto tok = io::load_tokenizer(model_dir());
  const auto text = io::build_eval_text(io::Dataset::Text, test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"));
  auto ids = tok->encode(text);
  const std::size_t n = 16 * 256;  // the first 16 windows of 256
  ids.resize(n);
  return m.windows_nll(ids, 256) / (16.0 * 255.0);
}

TEST_F(CompressE2E, PlanHoldsTheBudgetAndCheckpointReloadsExactly) {
  compress::CompressReport rep;
  auto m = compressed("asvd-rootcov", 0.3, &rep);
  EXPECT_GT(rep.dense_params, 0);
  EXPECT_LE(rep.params, static_cast<std::int64_t>(0.7 * rep.dense_params) + 1);
  for (int i = 0; i < m->num_layers(); ++i)
    for (const auto& lin : m->layer(i).linears) {
      EXPECT_TRUE(lin.factored()) << lin.name;
      EXPECT_TRUE(lin.block_identity) << lin.name;
    }
  const auto dir = test::make_temp_dir("e2e") / "latent";
  checkpoint::SaveOptions so;
  so.dtype = DType::F32;
  checkpoint::save(*m, dir, so);
  auto re = model::Model::load(dir);
  std::vector<std::int32_t> ids(2 * 64);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37 + 5) % 512);
  for (int i = 0; i < m->num_layers(); ++i)
    for (const auto& lin : m->layer(i).linears) {
      const auto& r = re->layer(i).linear(lin.name.substr(lin.name.find(".layers.") + 8 + std::to_string(i).size() + 1));
      EXPECT_EQ(lin.B, r.B) << lin.name;
      EXPECT_EQ(lin.A, r.A) << lin.name;
      EXPECT_EQ(lin.bias, r.bias) << lin.name;
      EXPECT_EQ(lin.perm, r.perm) << lin.name;
    }
  EXPECT_EQ(m->windows_nll(ids, 64), m->windows_nll(ids, 64));
  EXPECT_EQ(m->windows_nll(ids, 64), re->windows_nll(ids, 64));  // bit-identical
  EXPECT_EQ(re->num_params(), m->num_params());
}

TEST_F(CompressE2E, RootCovarianceBeatsPlainSvdAndLatentLlmBeatsRootCov) {
  const double dense = heldout_nll(*model::Model::load(model_dir()));
  const double plain = heldout_nll(*compressed("plain-svd", 0.3, nullptr));
  const double rootcov = heldout_nll(*compressed("asvd-rootcov", 0.3, nullptr));
  const double latent = heldout_nll(*compressed("latentllm", 0.3, nullptr));
  std::printf("held-out NLL/token: dense %.4f plain-svd %.4f asvd-rootcov %.4f latentllm %.4f\n", dense, plain,
              rootcov, latent);
  EXPECT_LT(dense, rootcov);
  EXPECT_LT(rootcov, plain);
  EXPECT_LE(latent, rootcov * 1.01);
}

TEST_F(CompressE2E, BadRatioIsRejected) {
  auto m = model::Model::load(model_dir());
  compress::CompressOptions opt;
  opt.ratio = 1.5;
  EXPECT_THROW(compress::plan_model(*m, opt), ConfigError);
  opt.ratio = 0.2;
  opt.method = "svd-magic";
  EXPECT_THROW(compress::plan_model(*m, opt), ConfigError);
}

}  // namespace
}  // namespace latentllm
