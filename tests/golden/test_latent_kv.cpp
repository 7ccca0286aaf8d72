// The latent KV cache (issue 14 item 3): a jointly compressed checkpoint caches c_k = A_k·x and
// c_v = A_v·x instead of keys and values, and its incremental logits equal the full-sequence forward at
// every position, for latent OPT (B_k absorbed into the queries, B_v applied after the weighted sum,
// the k bias dropped, the v bias added) and latent Llama (RoPE: keys decompressed per step), through
// both the absorbed route (one new position) and the decompressing one (a prompt). Its bytes per
// position are the latents' ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/generate.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "incremental_support.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
using model::KvCacheMode;
using model::KvForm;
using test::shared_path;
using test::check_incremental;
using test::story_ids;

// The bytes per position of a cache: each module's rank where it is latent, H_kv·d_h floats otherwise.
std::int64_t expected_bytes(const model::Model& m, const model::KvCache& cache) {
  const auto& a = m.attention();
  const std::int64_t width = static_cast<std::int64_t>(a.num_kv_heads) * a.head_dim;
  std::int64_t floats = 0;
  for (int i = 0; i < m.num_layers(); ++i) {
    floats += cache.layer(i).k_form == KvForm::Latent ? m.layer(i).linear(model::Role::K).rank() : width;
    floats += cache.layer(i).v_form == KvForm::Latent ? m.layer(i).linear(model::Role::V).rank() : width;
  }
  return floats * 4;
}

TEST(LatentKvCache, OptIncrementalEqualsFullAndCachesTheRanks) {
  const fs::path dir = shared_path("models/opt-tiny");
  const auto tok = io::load_tokenizer(dir);
  const auto ids = story_ids(*tok, 96);
  const auto dense = model::Model::load(dir);
  const std::int64_t dense_bytes = model::KvCache(*dense, 8).bytes_per_token();
  EXPECT_EQ(dense_bytes, 2 * 6 * 256 * 4);
  for (double ratio : {0.2, 0.4}) {
    const auto lat = test::latent_copy(dir, ratio, "latent-kv-opt");
    const std::string what = fmt::format("opt-tiny latentllm {:.0f} %", ratio * 100);
    model::KvCache cache(*lat, 8, KvCacheMode::Auto);
    std::int64_t rk_plus_rv = 0;
    for (int i = 0; i < lat->num_layers(); ++i) {
      const auto& L = lat->layer(i);
      ASSERT_TRUE(L.linear(model::Role::K).factored() && L.linear(model::Role::V).factored()) << what;
      const std::int64_t rk = L.linear(model::Role::K).rank(), rv = L.linear(model::Role::V).rank();
      ASSERT_LT(rk, 256) << what << " layer " << i;
      ASSERT_LT(rv, 256) << what << " layer " << i;
      EXPECT_EQ(cache.layer(i).k_form, KvForm::Latent);
      EXPECT_EQ(cache.layer(i).v_form, KvForm::Latent);
      rk_plus_rv += rk + rv;
      std::printf("[ info ] %s layer %d: r_k %lld, r_v %lld (H_kv·d_h 256)\n", what.c_str(), i,
                  static_cast<long long>(rk), static_cast<long long>(rv));
    }
    // Exactly the ranks, and so (r_k + r_v)/(2·H_kv·d_h) of the dense cache summed over the layers.
    EXPECT_EQ(cache.bytes_per_token(), rk_plus_rv * 4);
    EXPECT_EQ(cache.bytes_per_token(), expected_bytes(*lat, cache));
    EXPECT_LE(static_cast<double>(cache.bytes_per_token()),
              static_cast<double>(rk_plus_rv) / (2.0 * 256 * lat->num_layers()) * static_cast<double>(dense_bytes));
    EXPECT_EQ(model::KvCache(*lat, 8, KvCacheMode::Dense).bytes_per_token(), dense_bytes);
    // Prefills: 1 and 13 new positions run the absorbed form, 70 (> 64) decompresses.
    check_incremental(*lat, ids, KvCacheMode::Auto, {1, 13, 70}, what);
    check_incremental(*lat, ids, KvCacheMode::Dense, {13}, what);
  }
}

TEST(LatentKvCache, LlamaIncrementalEqualsFullWithRope) {
  const fs::path dir = shared_path("models/stories260K/hf");
  const auto tok = io::load_tokenizer(dir);
  const auto ids = story_ids(*tok, 48);
  for (double ratio : {0.2, 0.4}) {
    const auto lat = test::latent_copy(dir, ratio, "latent-kv-llama");
    const std::string what = fmt::format("stories260K latentllm {:.0f} %", ratio * 100);
    // Auto: values latent (absorbed), keys dense (RoPE between the factors).
    model::KvCache cache(*lat, 8, KvCacheMode::Auto);
    EXPECT_EQ(cache.bytes_per_token(), expected_bytes(*lat, cache));
    EXPECT_EQ(cache.layer(0).k_form, KvForm::Dense);
    EXPECT_EQ(cache.layer(0).v_form, KvForm::Latent);  // r_v < 32 and 8 heads: smaller and not slower
    for (const auto& line : cache.describe()) std::printf("[ info ] %s auto: %s\n", what.c_str(), line.c_str());
    // Latent: keys decompressed and rotated per step. Prefill 16 decompresses the values too.
    model::KvCache forced(*lat, 8, KvCacheMode::Latent);
    EXPECT_EQ(forced.layer(0).k_form, KvForm::Latent);
    EXPECT_EQ(forced.layer(0).k.cols(), lat->layer(0).linear(model::Role::K).rank());
    EXPECT_EQ(forced.bytes_per_token(), expected_bytes(*lat, forced));
    check_incremental(*lat, ids, KvCacheMode::Auto, {1, 16}, what);
    check_incremental(*lat, ids, KvCacheMode::Latent, {1, 16}, what);
  }
}

TEST(LatentKvCache, GenerateReportsTheCacheAndModeParses) {
  EXPECT_EQ(model::parse_kv_cache_mode("latent"), KvCacheMode::Latent);
  EXPECT_EQ(model::parse_kv_cache_mode("auto"), KvCacheMode::Auto);
  test::expect_error<ConfigError>([] { model::parse_kv_cache_mode("mla"); },
                                  {"--kv-cache (expected dense, latent or auto, got mla)"});
  const fs::path dir = shared_path("models/stories260K/hf");
  const auto lat = test::latent_copy(dir, 0.4, "latent-kv-gen");
  const auto tok = io::load_tokenizer(dir);
  eval::GenerateOptions opt;
  opt.max_new_tokens = 24;
  opt.sampling.temperature = 0;
  const auto prompt = eval::prompt_ids(*lat, *tok, "Once upon a time");
  opt.kv_cache = KvCacheMode::Dense;
  const auto d = eval::generate(*lat, *tok, prompt, opt);
  opt.kv_cache = KvCacheMode::Latent;
  const auto l = eval::generate(*lat, *tok, prompt, opt);
  EXPECT_EQ(d.kv_cache_bytes_per_token, 2 * 5 * 4 * 8 * 4);
  EXPECT_LT(l.kv_cache_bytes_per_token, d.kv_cache_bytes_per_token);
  EXPECT_EQ(l.kv_cache_layers.size(), 5u);
  EXPECT_EQ(d.tokens, l.tokens);  // greedy: the same text from either cache
}

}  // namespace
}  // namespace latentllm
