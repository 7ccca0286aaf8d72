// End-to-end compression on a real model (stories260K: 5 layers, GQA, RoPE): calibration is
// reproducible, the plan holds the budget, the latent checkpoint reloads to the same logits, and the
// root-covariance pre-conditioner beats plain SVD on held-out perplexity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tensor.hpp"
#include "latentllm/tokenizer.hpp"
#include "checkpoint_support.hpp"
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

// --calib-holdout: no window comes from the last documents of a c4 file, with either sampling. A file of
// 6 kept stories and 30 held ones: every random window is a piece of a kept story's tokens, and the
// contiguous windows are the prefix of the kept stories joined; without the hold-out some random
// window is not (so the check can fail).
TEST_F(CompressE2E, HoldoutDocumentsAreNeverSampled) {
  const auto tok = io::load_tokenizer(model_dir());
  const auto text = io::build_eval_text(io::Dataset::StoriesValid,
                                        test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"));
  std::vector<std::string> stories;
  for (std::size_t pos = 0; stories.size() < 36;) {
    const std::size_t end = text.find("\n\n", pos);
    stories.push_back(text.substr(pos, end - pos));
    pos = end + 2;
  }
  std::string jsonl;
  for (const auto& st : stories) jsonl += nlohmann::json({{"text", st}}).dump() + "\n";
  const auto dir = test::make_temp_dir("holdout");
  std::ofstream(dir / "c4.jsonl", std::ios::binary) << jsonl;
  calib::CalibOptions co;
  co.source = "c4";
  co.data = dir / "c4.jsonl";
  co.nsamples = 24;
  co.seqlen = 16;
  std::vector<std::vector<std::int32_t>> kept;
  for (int d = 0; d < 6; ++d) kept.push_back(tok->encode(stories[static_cast<std::size_t>(d)]));
  auto from_kept = [&](std::span<const std::int32_t> w) {
    return std::any_of(kept.begin(), kept.end(), [&](const auto& k) {
      return std::search(k.begin(), k.end(), w.begin(), w.end()) != k.end();
    });
  };
  auto windows_from_kept = [&](const std::vector<std::int32_t>& ids) {
    int n = 0;
    for (std::size_t i = 0; i < ids.size(); i += 16) n += from_kept(std::span(ids).subspan(i, 16));
    return n;
  };
  co.holdout_docs = 30;
  EXPECT_EQ(windows_from_kept(calib::sample_calibration(*tok, co)), 24);
  co.holdout_docs = 0;
  EXPECT_LT(windows_from_kept(calib::sample_calibration(*tok, co)), 12);
  co.holdout_docs = 30;
  co.sampling = calib::Sampling::Contiguous;
  co.nsamples = 4;
  std::string joined = stories[0];
  for (int d = 1; d < 6; ++d) joined += " " + stories[static_cast<std::size_t>(d)];
  const auto all = tok->encode(joined);
  const auto ids = calib::sample_calibration(*tok, co);
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), all.begin()));
  co.nsamples = static_cast<int>(all.size() / 16) + 1;  // more than the kept text holds
  EXPECT_THROW(calib::sample_calibration(*tok, co), FormatError);
}

// Compresses stories260K in memory and returns held-out NLL per token and the model.
std::unique_ptr<model::Model> compressed(const std::string& method, double ratio, compress::CompressReport* rep) {
  auto m = model::Model::load(model_dir());
  const auto tok = io::load_tokenizer(model_dir());
  const auto ids = calib::sample_calibration(*tok, calib_options(0));
  compress::CompressOptions opt;
  opt.method = compress::parse_method(method);
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

// Writes m with `dtype` and loads it back.
std::unique_ptr<model::Model> save_and_reload(const model::Model& m, DType dtype, const std::string& tag) {
  const auto dir = test::make_temp_dir(tag) / "latent";
  checkpoint::SaveOptions so;
  so.dtype = dtype;
  checkpoint::save(m, dir, so);
  return model::Model::load(dir);
}

// The reloaded module that corresponds to `lin` of layer i.
const model::Linear& reloaded(const model::Model& re, int i, const model::Linear& lin) {
  return re.layer(i).linear(lin.name.substr(lin.name.find(".layers.") + 8 + std::to_string(i).size() + 1));
}

// Logits [n, V] of the windows of T tokens in ids.
using test::logits_of;

std::vector<std::int32_t> probe_ids() {
  std::vector<std::int32_t> ids(2 * 64);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37 + 5) % 512);
  return ids;
}

template <typename M>
M f16_rounded(M x) {
  for (Eigen::Index k = 0; k < x.size(); ++k) x.data()[k] = f16_to_f32(f32_to_f16(x.data()[k]));
  return x;
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
  auto re = save_and_reload(*m, DType::F32, "e2e");
  for (int i = 0; i < m->num_layers(); ++i)
    for (const auto& lin : m->layer(i).linears) {
      const auto& r = reloaded(*re, i, lin);
      EXPECT_EQ(lin.B, r.B) << lin.name;
      EXPECT_EQ(lin.A, r.A) << lin.name;
      EXPECT_EQ(lin.bias, r.bias) << lin.name;
      EXPECT_EQ(lin.perm, r.perm) << lin.name;
    }
  // The written-then-loaded f32 checkpoint runs the same computation: bit-identical logits and NLL.
  const auto ids = probe_ids();
  const MatrixF a = logits_of(*m, ids, 64), b = logits_of(*re, ids, 64);
  ASSERT_EQ(a.rows(), b.rows());
  ASSERT_EQ(a.cols(), b.cols());
  EXPECT_TRUE(a == b) << "max |Δlogit| " << (a - b).cwiseAbs().maxCoeff();
  EXPECT_EQ(m->windows_nll(ids, 64), re->windows_nll(ids, 64));
  EXPECT_EQ(eval::num_params(*re), eval::num_params(*m));
}

// f16 storage: the reloaded factors and biases are exactly the in-memory ones rounded to half
// (nearest even), and the NLL moves by no more than that rounding explains.
TEST_F(CompressE2E, F16CheckpointHoldsTheHalfRoundedFactors) {
  auto m = compressed("asvd-rootcov", 0.3, nullptr);
  auto re = save_and_reload(*m, DType::F16, "e2e-f16");
  bool any_rounded = false;
  for (int i = 0; i < m->num_layers(); ++i)
    for (const auto& lin : m->layer(i).linears) {
      const auto& r = reloaded(*re, i, lin);
      EXPECT_EQ(f16_rounded(lin.B.f32()), r.B) << lin.name;
      EXPECT_EQ(f16_rounded(lin.A.f32()), r.A) << lin.name;
      EXPECT_EQ(f16_rounded(lin.bias), r.bias) << lin.name;
      EXPECT_EQ(lin.perm, r.perm) << lin.name;
      any_rounded |= lin.B != r.B;
    }
  EXPECT_TRUE(any_rounded);  // the file really is f16
  const auto ids = probe_ids();
  const double nll = m->windows_nll(ids, 64), nll16 = re->windows_nll(ids, 64);
  EXPECT_NE(nll, nll16);
  EXPECT_NEAR(nll16, nll, 1e-3 * nll);
  EXPECT_EQ(eval::num_params(*re), eval::num_params(*m));
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
  EXPECT_LT(latent, 0.95 * rootcov);  // measured 2.8977 vs 3.1746: 0.913
}

TEST_F(CompressE2E, BadRatioIsRejected) {
  auto m = model::Model::load(model_dir());
  compress::CompressOptions opt;
  opt.ratio = 1.5;
  EXPECT_THROW(compress::plan_model(*m, opt), ConfigError);
  EXPECT_EQ(test::error_of<ConfigError>([] { (void)compress::parse_method("svd-magic"); }),
            "--method: unknown method (expected one of plain-svd, asvd-hessian, asvd-l1, asvd-l2, asvd-cov, "
            "asvd-rootcov, latentllm, rtn, gptq, sparse, wanda, sparsegpt, lowrank-sparse, got svd-magic)");
}

}  // namespace
}  // namespace latentllm
