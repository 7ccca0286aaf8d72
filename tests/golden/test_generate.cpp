// Incremental decoding and text generation (issue 14 items 1-2): the KV-cache forward gives the logits
// of the full-sequence forward at every position (dense and latent, OPT and the Llama family: GQA,
// RoPE, Qwen3's q/k norms, Mistral's sliding window), the context limit is a clear error, greedy
// decoding of stories260K reproduces its README, sampling is deterministic for a seed, and the
// streamed text is exactly the decoded continuation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/generate.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "synth.hpp"
#include "incremental_support.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
using test::shared_path;
using test::check_incremental;
using test::story_ids;
using test::full_logits;
using model::KvCacheMode;

// Prefill of one token, then of a third of the window.
double check_dense_cache(const model::Model& m, const std::vector<std::int32_t>& ids, const std::string& what) {
  return check_incremental(m, ids, KvCacheMode::Dense, {1, static_cast<int>(ids.size()) / 3}, what);
}


TEST(KvCache, IncrementalEqualsFullLlamaGqaRopeDenseAndLatent) {
  const fs::path dir = shared_path("models/stories260K/hf");
  const auto tok = io::load_tokenizer(dir);
  const auto ids = story_ids(*tok, 48);
  const auto dense = model::Model::load(dir);
  check_dense_cache(*dense, ids, "stories260K dense");
  const auto lat = test::latent_copy(dir, 0.2, "kv-llama");
  ASSERT_TRUE(lat->layer(0).linear(model::Role::Q).factored());
  check_dense_cache(*lat, ids, "stories260K latent 20 %");
}

TEST(KvCache, IncrementalEqualsFullOptDenseAndLatent) {
  const fs::path dir = shared_path("models/opt-tiny");
  const auto tok = io::load_tokenizer(dir);
  const auto ids = story_ids(*tok, 40);
  const auto dense = model::Model::load(dir);
  check_dense_cache(*dense, ids, "opt-tiny dense");
  const auto lat = test::latent_copy(dir, 0.2, "kv-opt");
  ASSERT_TRUE(lat->layer(0).linear(model::Role::Up).factored());
  check_dense_cache(*lat, ids, "opt-tiny latent 20 %");
}

// stories260K's weights under MistralForCausalLM with a sliding window of 8 keys: positions past the
// window see only the last 8 keys, in the full forward and from the cache alike.
TEST(KvCache, IncrementalEqualsFullWithSlidingWindow) {
  const fs::path src = shared_path("models/stories260K/hf"), dir = test::make_temp_dir("kv-mistral") / "m";
  fs::create_directories(dir);
  for (const char* f : {"model.safetensors", "tokenizer.json"}) fs::copy_file(src / f, dir / f);
  nlohmann::json c = nlohmann::json::parse(std::ifstream(src / "config.json"));
  c["architectures"] = {"MistralForCausalLM"};
  c["model_type"] = "mistral";
  c["sliding_window"] = 8;
  std::ofstream(dir / "config.json") << c.dump();
  const auto m = model::Model::load(dir);
  ASSERT_EQ(m->config().sliding_window, 8);
  const auto tok = io::load_tokenizer(dir);
  const auto ids = story_ids(*tok, 40);
  check_dense_cache(*m, ids, "stories260K as Mistral, window 8");
  // The window changes the logits, so the test above compares something different from plain causal.
  const auto plain = model::Model::load(src);
  EXPECT_GT((full_logits(*m, ids) - full_logits(*plain, ids)).cwiseAbs().maxCoeff(), 1e-3);
}

// Qwen3 (q/k RMSNorm per head before RoPE, head_dim independent of d) from the synthetic preset.
TEST(KvCache, IncrementalEqualsFullQwen3) {
  synth::SynthSpec s = synth::preset("qwen3-tiny");
  synth::WriteOptions o;
  o.seed = 1;
  o.tokenizers_dir = shared_path("data/tokenizers");
  const fs::path dir = test::make_temp_dir("kv-qwen3") / s.name;
  synth::write_checkpoint(s, dir, o);
  const auto m = model::Model::load(dir);
  ASSERT_TRUE(m->config().qk_norm);
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back((i * 7919 + 13) % static_cast<int>(m->config().vocab_size));
  check_dense_cache(*m, ids, "qwen3-tiny (synthetic)");
}

TEST(KvCache, ContextLimitIsAClearError) {
  const auto m = model::Model::load(shared_path("models/stories260K/hf"));  // max_position_embeddings 512
  test::expect_error<ConfigError>([&] { model::KvCache(*m, 513); },
                                  {"KV cache of 513 positions (expected 1..max_position_embeddings = 512)"});
  model::KvCache cache(*m, 4);
  MatrixF logits;
  const std::vector<std::int32_t> ids = {1, 403, 407};
  m->forward_cached(ids, cache, logits);
  EXPECT_EQ(logits.rows(), 3);
  test::expect_error<ConfigError>([&] { m->forward_cached(ids, cache, logits); },
                                  {"positions 3..5 (expected 1 or more new positions within the KV cache's "
                                   "capacity of 4 positions, got 3)"});
  EXPECT_EQ(cache.length(), 3);
  const auto tok = io::load_tokenizer(shared_path("models/stories260K/hf"));
  eval::GenerateOptions opt;
  opt.max_new_tokens = 10;
  const std::vector<std::int32_t> prompt(505, 261);
  test::expect_error<ConfigError>([&] { eval::generate(*m, *tok, prompt, opt); },
                                  {"prompt of 505 tokens + --max-new-tokens 10 (expected at most "
                                   "max_position_embeddings = 512 positions, got 515)"});
  opt.max_new_tokens = 7;  // exactly the context: fine
  const auto r = eval::generate(*m, *tok, prompt, opt);
  EXPECT_LE(r.prompt_ids.size() + r.tokens.size(), 512u);
}

// The README of ../shared/models/stories260K: greedy decoding from BOS, first ids and text.
TEST(Generate, GreedyStories260KReproducesItsReadme) {
  const fs::path dir = shared_path("models/stories260K/hf");
  const auto m = model::Model::load(dir);
  const auto tok = io::load_tokenizer(dir);
  eval::GenerateOptions opt;
  opt.max_new_tokens = 256;
  opt.sampling.temperature = 0;
  std::string streamed;
  const auto prompt = eval::prompt_ids(*m, *tok, "");
  ASSERT_EQ(prompt, std::vector<std::int32_t>{1});
  const auto r = eval::generate(*m, *tok, prompt, opt, [&](std::string_view s) { streamed += s; });
  const std::vector<std::int32_t> first = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
  ASSERT_GE(r.tokens.size(), first.size());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), r.tokens.begin()));
  const std::string readme =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
      "a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said, \"Lily, let's go to the park";
  EXPECT_EQ(r.text.substr(0, readme.size()), readme);
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.text, tok->decode(r.tokens));
  EXPECT_EQ(r.kv_cache_bytes_per_token, 2 * 5 * 4 * 8 * 4);  // 2 (k, v) · L · H_kv · d_h · float32
  EXPECT_EQ(r.kv_cache_bytes, r.kv_cache_length * r.kv_cache_bytes_per_token);
  EXPECT_EQ(r.kv_cache_length, 1 + r.decode_steps);
}

// generation_config.json's eos_token_id (an id or a list) takes precedence over config.json's, as in
// transformers: with the third greedy token (261) among its ids, generation stops there.
TEST(Generate, StopsAtAnyEosOfGenerationConfig) {
  const fs::path src = shared_path("models/stories260K/hf"), dir = test::make_temp_dir("gen-eos") / "m";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) fs::copy_file(src / f, dir / f);
  {
    const auto m = model::Model::load(dir);
    ASSERT_EQ(eval::stop_token_ids(*m), std::vector<std::int64_t>{2});  // config.json's
  }
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [9999, 261], "bos_token_id": 1})";
  const auto m = model::Model::load(dir);
  const auto tok = io::load_tokenizer(dir);
  EXPECT_EQ(eval::stop_token_ids(*m), (std::vector<std::int64_t>{9999, 261}));
  eval::GenerateOptions opt;
  opt.max_new_tokens = 64;
  opt.sampling.temperature = 0;
  const auto r = eval::generate(*m, *tok, eval::prompt_ids(*m, *tok, ""), opt);
  EXPECT_EQ(r.tokens, (std::vector<std::int32_t>{403, 407, 261}));
  EXPECT_TRUE(r.stopped_at_eos);
  // A generation_config.json without eos_token_id leaves config.json's.
  std::ofstream(dir / "generation_config.json") << R"({"temperature": 0.7})";
  EXPECT_EQ(eval::stop_token_ids(*m), std::vector<std::int64_t>{2});
}

TEST(Generate, SamplingIsDeterministicForASeed) {
  const fs::path dir = shared_path("models/stories260K/hf");
  const auto m = model::Model::load(dir);
  const auto tok = io::load_tokenizer(dir);
  const auto prompt = eval::prompt_ids(*m, *tok, "Once upon a time");
  eval::GenerateOptions opt;
  opt.max_new_tokens = 40;
  opt.sampling = {0.9, 40, 0.95, 7};
  const auto a = eval::generate(*m, *tok, prompt, opt), b = eval::generate(*m, *tok, prompt, opt);
  EXPECT_EQ(a.tokens, b.tokens);
  opt.sampling.seed = 8;
  const auto c = eval::generate(*m, *tok, prompt, opt);
  EXPECT_NE(a.tokens, c.tokens);
  // The generator and the draw are fixed: the first draws of seed 0 are those of mt19937_64.
  eval::Sampler s({1.0, 0, 1.0, 0});
  std::mt19937_64 ref(0);
  EXPECT_EQ(s.uniform(), static_cast<double>(ref() >> 11) * 0x1.0p-53);
  // Top-k 1 is greedy whatever the temperature.
  opt.sampling = {5.0, 1, 1.0, 3};
  opt.max_new_tokens = 12;
  const auto k1 = eval::generate(*m, *tok, prompt, opt);
  opt.sampling = {0, 0, 1.0, 0};
  EXPECT_EQ(k1.tokens, eval::generate(*m, *tok, prompt, opt).tokens);
}

// Incremental detokenization: pieces concatenate to the decoded continuation and never hold a U+FFFD
// for a character whose bytes are split across byte-fallback (stories260K) or byte-level (OPT) tokens.
TEST(Generate, TextStreamHandlesSplitCharactersAndTheLeadingSpace) {
  for (const char* model : {"models/stories260K/hf", "models/opt-tiny"}) {
    const auto tok = io::load_tokenizer(shared_path(model));
    const std::string text = "Lily saw a café — and a 🐶 dog, then 東京.";
    const auto ids = tok->encode(text);
    const std::vector<std::int32_t> prefix(ids.begin(), ids.begin() + 1);  // BOS
    io::TextStream stream(*tok, prefix);
    std::string joined;
    for (std::size_t i = 1; i < ids.size(); ++i) {
      const std::string piece = stream.push(ids[i]);
      EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << model << " piece " << i;
      joined += piece;
    }
    joined += stream.finish();
    EXPECT_EQ(joined, text) << model;  // no leading space after BOS for either tokenizer here
    // After a prompt, the continuation keeps its leading space.
    const auto p = tok->encode("Lily saw");
    io::TextStream s2(*tok, p);
    std::string cont;
    for (const auto id : std::vector<std::int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(p.size()), ids.end())) {
      cont += s2.push(id);
    }
    cont += s2.finish();
    EXPECT_EQ(cont, text.substr(8)) << model;
  }
}

TEST(Generate, UnknownTokenIdsAreClearErrors) {
  const fs::path dir = shared_path("models/stories260K/hf");
  const auto m = model::Model::load(dir);
  const auto tok = io::load_tokenizer(dir);
  const std::vector<std::int32_t> bad = {1, 600};
  test::expect_error<ConfigError>([&] { eval::generate(*m, *tok, bad, {}); },
                                  {"prompt token id 600 at position 1 (expected 0..511, the model's vocabulary)"});
  test::expect_error<FormatError>([&] { tok->decode(bad); },
                                  {"tokenizer.json: token id 600 (expected one of the tokenizer's ids, 0..511)"});
}

// Scored prompts (serve's echo + logprobs): the prompt's entries are the same bits with or without a
// continuation after it (lm-eval asks with max_tokens 0 and 1), the continuation's agree with one forward
// over the whole sequence, and the log-probabilities are normalized.
TEST(TokenLogprobs, ThePromptsEntriesDoNotDependOnTheContinuation) {
  const fs::path dir = shared_path("models/TinyStories-656K");
  const auto m = model::Model::load(dir);
  const auto tok = io::load_tokenizer(dir);
  const auto ids = story_ids(*tok, 40);
  const std::size_t prompt = 23;
  const auto alone = eval::token_logprobs(*m, std::span(ids).first(prompt), 3);
  const auto split = eval::token_logprobs(*m, ids, 3, prompt);
  const auto whole = eval::token_logprobs(*m, ids, 3);
  ASSERT_EQ(split.size(), ids.size());
  EXPECT_TRUE(std::isnan(split[0].logprob));
  for (std::size_t i = 1; i < prompt; ++i) {
    EXPECT_EQ(split[i].logprob, alone[i].logprob) << i;
    EXPECT_EQ(split[i].top, alone[i].top) << i;
  }
  for (std::size_t i = 1; i < ids.size(); ++i) {
    EXPECT_NEAR(split[i].logprob, whole[i].logprob, 1e-4) << i;
    EXPECT_LE(split[i].logprob, 0) << i;
    ASSERT_EQ(split[i].top.size(), 3u);
    EXPECT_GE(split[i].top[0].second, split[i].logprob) << i;  // the most likely id comes first
  }
}

}  // namespace
}  // namespace latentllm
