// Presets (issue 13): the paper's protocol where it differs from the defaults, and each method's
// junction (J = I for the paper's baselines, block identity for LatentLLM).
#include <gtest/gtest.h>

#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "test_support.hpp"

namespace latentllm::compress {
namespace {

TEST(Preset, BaselinesDefaultToIdentityJunctionAndLatentLlmToBlockIdentity) {
  for (Method m : all_methods()) {
    const Junction want = m == Method::LatentLlm ? Junction::BlockIdentity : Junction::Identity;
    EXPECT_EQ(default_junction(m), want) << method_name(m);
    EXPECT_EQ(preset_options(Preset::Default, m, 0.2).local.junction, want) << method_name(m);
    EXPECT_EQ(preset_options(Preset::Paper, m, 0.2).local.junction, want) << method_name(m);
  }
}

TEST(Preset, PaperDampsByOnePercentAndTakesLayerStatisticsFromTheDensePass) {
  const CompressOptions paper = preset_options(Preset::Paper, Method::LatentLlm, 0.3);
  EXPECT_EQ(paper.method, Method::LatentLlm);
  EXPECT_EQ(paper.ratio, 0.3);
  EXPECT_EQ(paper.local.lambda_rel, 0.01);
  EXPECT_FALSE(paper.pipeline.sequential_within_layer);
  EXPECT_TRUE(paper.joint.qk);
  EXPECT_FALSE(paper.joint.vo);
  EXPECT_TRUE(paper.joint.ud);
  EXPECT_TRUE(paper.local.update_bias);
  EXPECT_EQ(paper.rank_alloc, RankAlloc::Uniform);
  EXPECT_FALSE(paper.error_compensation);
  const CompressOptions def = preset_options(Preset::Default, Method::LatentLlm, 0.3);
  EXPECT_EQ(def.local.lambda_rel, kDefaultLambdaRel);
  EXPECT_TRUE(def.pipeline.sequential_within_layer);
  EXPECT_EQ(def.rank_alloc, RankAlloc::Global);  // validated: bench/results/rank_alloc
  EXPECT_EQ(def.alloc_score, AllocScore::Relative);
  EXPECT_FALSE(def.error_compensation);  // mixed on validation (docs/PRESETS.md)
  // The baselines stay the paper's under both presets: uniform ranks.
  for (Method m : all_methods()) {
    if (m != Method::LatentLlm) {
      EXPECT_EQ(preset_options(Preset::Default, m, 0.3).rank_alloc, RankAlloc::Uniform);
    }
  }
}

// Joint up-down needs about 12·f tokens (bench/results/ud_tokens): the default skips it below, the
// paper never does, and the tokens counted are the ones it would use (min(n, ud_max_tokens)).
TEST(Preset, DefaultSkipsJointUpDownWithFewerThanTwelveTimesFfnTokens) {
  model::ModelConfig c;
  c.intermediate_size = 384;
  const CompressOptions def = preset_options(Preset::Default, Method::LatentLlm, 0.3);
  EXPECT_EQ(def.ud_min_tokens_per_ffn, 12);
  EXPECT_EQ(preset_options(Preset::Paper, Method::LatentLlm, 0.3).ud_min_tokens_per_ffn, 0);
  std::string why;
  EXPECT_TRUE(effective_options(c, 12 * 384, def, &why).joint.ud);
  EXPECT_TRUE(why.empty());
  const CompressOptions few = effective_options(c, 12 * 384 - 1, def, &why);
  EXPECT_FALSE(few.joint.ud);
  EXPECT_TRUE(few.joint.qk);
  test::expect_contains(why, {"on 4607 tokens = 12.0 x ffn 384 (expected at least 12 x ffn",
                              "--ud-min-tokens-per-ffn"});
  // The token cap counts: 10^6 calibration tokens but at most 4096 of them for joint up-down.
  CompressOptions capped = def;
  capped.ud_max_tokens = 4096;
  EXPECT_FALSE(effective_options(c, 1000000, capped).joint.ud);
  capped.ud_max_tokens = 0;
  EXPECT_TRUE(effective_options(c, 1000000, capped).joint.ud);
  // The paper's protocol, and a plain CompressOptions, run it whatever the token count.
  EXPECT_TRUE(effective_options(c, 384, preset_options(Preset::Paper, Method::LatentLlm, 0.3)).joint.ud);
  EXPECT_TRUE(effective_options(c, 384, CompressOptions{}, &why).joint.ud);
  EXPECT_TRUE(why.empty());
}

TEST(Preset, NamesRoundTripAndUnknownNamesAreRejected) {
  for (Preset p : {Preset::Default, Preset::Paper}) EXPECT_EQ(parse_preset(preset_name(p)), p);
  test::expect_error<ConfigError>([] { (void)parse_preset("sparsegpt"); },
                                  {"--preset: unknown preset (expected default or paper, got sparsegpt)"});
}

}  // namespace
}  // namespace latentllm::compress
