// `--preset paper` reproduces the figures of an independent float64 implementation of the paper
// (issue 13): TinyStories-656K, 20 %, 32 contiguous C4 windows of 256 tokens, perplexity on the 232
// shared TinyStories validation stories at seqlen 512. Reference: plain-svd 116.68, asvd-rootcov
// 79.06, latentllm 43.79; the issue asks for 1 % (asvd-rootcov) and 3 % (latentllm). Measured here:
// 116.676, 78.528 (−0.67 %), 44.131 (+0.78 %).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace latentllm {
namespace {

std::string q(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

double paper_ppl(const std::string& method) {
  const auto out = test::make_temp_dir("paper-preset") / method;
  const std::string compress =
      fmt::format("{} compress --model {} --preset paper --method {} --ratio 0.2 --calib c4 --calib-data {} "
                  "--nsamples 32 --seqlen 256 --calib-sampling contiguous --seed 0 --out {} 2>&1",
                  test::cli_path().string(), q(test::shared_path("models/TinyStories-656K")), method,
                  q(test::shared_path("data/c4/c4-train.00000-of-01024.first1000.jsonl")), q(out));
  std::string log;
  EXPECT_EQ(test::run_command(compress, log), 0) << log;
  const auto info = nlohmann::json::parse(std::ifstream(out / "config.json")).at("latent");
  EXPECT_EQ(info.at("preset"), "paper");
  // The options record holds what the method reads: plain-svd has no damping to record.
  if (method == "plain-svd") EXPECT_FALSE(info.contains("lambda_rel"));
  else EXPECT_EQ(info.at("lambda_rel"), 0.01);
  EXPECT_EQ(info.at("intra_layer"), false);
  EXPECT_EQ(info.at("junction"), method == "latentllm" ? "block-identity" : "identity");
  std::string res;
  const std::string ppl = fmt::format(
      "{} ppl --model {} --dataset text --data {} --seqlen 512 --json 2>/dev/null", test::cli_path().string(), q(out),
      q(test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")));
  EXPECT_EQ(test::run_command(ppl, res), 0) << res;
  const auto brace = res.rfind("\n{");  // stderr's log lines come first
  return nlohmann::json::parse(brace == std::string::npos ? res : res.substr(brace + 1)).at("ppl").get<double>();
}

TEST(PaperPreset, ReproducesTheIndependentImplementation) {
  const double plain = paper_ppl("plain-svd");
  const double rootcov = paper_ppl("asvd-rootcov");
  const double latent = paper_ppl("latentllm");
  EXPECT_NEAR(plain, 116.68, 0.01 * 116.68);
  EXPECT_NEAR(rootcov, 79.06, 0.01 * 79.06);
  EXPECT_NEAR(latent, 43.79, 0.03 * 43.79);
  EXPECT_GT(plain, rootcov);  // the paper's ordering
  EXPECT_GT(rootcov, latent);
}

}  // namespace
}  // namespace latentllm
