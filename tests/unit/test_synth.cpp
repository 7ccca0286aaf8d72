// latentllm-synth (tools/synth): the RNG against published test vectors and the documented formula,
// determinism (same seed -> same bytes, another seed -> other values), the presets' parameter counts
// and config.json, generated checkpoints loading in latentllm (OPT, Llama, GQA, Qwen2 biases) with
// their tokenizer's BOS, forced sharding read back by io::TensorStore, atomic output, and the
// committed golden files of scripts/gen_arch_golden.py agreeing with the generator.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <set>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/tokenizer.hpp"
#include "synth.hpp"
#include "test_support.hpp"

namespace latentllm::synth {
namespace {

namespace fs = std::filesystem;

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class SynthWrite : public ::testing::Test {
 protected:
  void SetUp() override { set_log_level(LogLevel::Warn); }
  void TearDown() override { set_log_level(LogLevel::Info); }
};

// A preset shrunk to test sizes (the names, layout and config keys stay the preset's).
SynthSpec small(const std::string& name, std::int64_t layers = 2) {
  SynthSpec s = preset(name);
  s.num_hidden_layers = layers;
  s.hidden_size = 64;
  s.num_attention_heads = 4;
  if (s.family == Family::Opt || s.num_key_value_heads == s.num_attention_heads) {
    s.num_key_value_heads = 4;
  } else {
    s.num_key_value_heads = 2;  // GQA
  }
  s.head_dim = 16;
  s.ffn_width = 96;
  s.max_position_embeddings = 64;
  return s;
}

WriteOptions options(std::uint64_t seed = 0) {
  WriteOptions o;
  o.seed = seed;
  o.tokenizers_dir = test::shared_path("data/tokenizers");
  o.chunk_values = 1000;  // many appends per tensor
  return o;
}

// ---- RNG ----------------------------------------------------------------------------------------

TEST(SynthRng, PublishedTestVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);  // FNV-1a 64 offset basis
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(mix64(0x9e3779b97f4a7c15ULL), 0xe220a8397b1dcdafULL);  // splitmix64(seed 0): 1st output
  EXPECT_EQ(mix64(2 * 0x9e3779b97f4a7c15ULL), 0x6e789e6aa1b965f4ULL);  // 2nd output
}

// The header comment's formula, computed here step by step (volatile: no FMA contraction).
float documented_value(std::uint64_t seed, const std::string& name, std::uint64_t i, float center, float scale) {
  const std::uint64_t key = mix64(seed ^ fnv1a64(name));
  const std::uint64_t z = mix64(key + (i + 1) * 0x9e3779b97f4a7c15ULL);
  const float u = static_cast<float>(z >> 40) * std::ldexp(1.0f, -24);
  volatile float t = 2.0f * u - 1.0f;
  volatile float p = scale * t;
  return center + p;
}

TEST(SynthRng, ValuesFollowTheDocumentedFormula) {
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  for (std::uint64_t i : {0ULL, 1ULL, 7ULL, 12345ULL, 1ULL << 40}) {
    for (const auto& [c, s] : {std::pair{0.0f, 0.0346410162f}, {1.0f, 0.2f}, {0.0f, 1.7320508f}}) {
      const float v = synth_value(tensor_key(3, name), i, c, s);
      EXPECT_EQ(v, documented_value(3, name, i, c, s)) << i;
      EXPECT_GE(v, c - s);
      EXPECT_LT(v, c + s);
    }
  }
  std::vector<float> chunk(100);
  fill_values(tensor_key(3, name), 50, 1.0f, 0.2f, chunk);
  for (std::size_t j = 0; j < chunk.size(); ++j) EXPECT_EQ(chunk[j], documented_value(3, name, 50 + j, 1.0f, 0.2f));
}

// Values of scripts/gen_arch_golden.py (numpy), the independent implementation: its
// `--print-rng-vectors` output.
TEST(SynthRng, MatchesThePythonImplementation) {
  const std::uint64_t key = tensor_key(0, "model.embed_tokens.weight");
  EXPECT_EQ(key, 0x1acb025cf390dc05ULL);
  const std::uint32_t want[] = {0xbfb9b959, 0xbe80c171, 0xbfdb6a2f};  // -1.45096886, -0.251475841, -1.71417797
  const float sqrt3 = static_cast<float>(std::sqrt(3.0));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(synth_value(key, static_cast<std::uint64_t>(i), 0.0f, sqrt3)), want[i]) << i;
  }
}

// ---- presets, plan, config ----------------------------------------------------------------------

TEST(SynthPresets, ParameterCountsOfTheRealModels) {
  const std::pair<const char*, std::int64_t> counts[] = {
      {"opt-125m", 125'239'296},       {"opt-1.3b", 1'315'758'080},     {"opt-6.7b", 6'658'473'984},
      {"llama-2-7b", 6'738'415'616},   {"llama-3-8b", 8'030'261'248},   {"qwen2.5-7b", 7'615'616'512},
      // Llama-2-7B with 64 more embedding and head rows, CLIP ViT-L/14-336 (303,507,456) and the
      // projector (20,979,712); NeXT adds image_newline [4096].
      {"llava-1.5-7b", 7'063'427'072}, {"llava-v1.6-vicuna-7b", 7'063'431'168}};
  for (const auto& [name, n] : counts) EXPECT_EQ(num_params(preset(name)), n) << name;
  EXPECT_EQ(preset_names().size(), 10u);
  EXPECT_EQ(test::error_of<ConfigError>([] { preset("gpt-5"); }),
            "preset (expected one of opt-125m, opt-1.3b, opt-6.7b, llama-2-7b, llama-3-8b, qwen2.5-7b, llama3-tiny, "
            "qwen3-tiny, llava-1.5-7b, llava-v1.6-vicuna-7b, got gpt-5)");
}

TEST(SynthPresets, ConfigIsThePresetsOwnUntilEdited) {
  for (const auto& name : preset_names()) {
    const SynthSpec s = preset(name);
    EXPECT_EQ(config_json(s).dump(), s.config.dump()) << name;  // every field read back unchanged
  }
  SynthSpec s = preset("llama-3-8b");
  s.dtype = DType::F16;
  s.num_hidden_layers = 3;
  const auto c = config_json(s);
  EXPECT_EQ(c.at("torch_dtype"), "float16");
  EXPECT_EQ(c.at("num_hidden_layers"), 3);
  EXPECT_FALSE(c.contains("head_dim"));  // d / n_h: not added
  EXPECT_FALSE(c.contains("rope_scaling"));
  s = preset("qwen3-tiny");
  EXPECT_EQ(s.head_dim, 32);
  EXPECT_TRUE(s.qk_norm);
  const auto plan = tensor_plan(s);
  EXPECT_EQ(plan[1].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(plan[1].shape, (std::vector<std::int64_t>{128, 64}));  // [n_h·d_h, d]
  EXPECT_EQ(plan[4].name, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(plan[4].shape, (std::vector<std::int64_t>{64, 128}));
  EXPECT_EQ(plan[5].name, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(plan[5].shape, (std::vector<std::int64_t>{32}));
  EXPECT_EQ(plan.back().name, "model.norm.weight");  // tied: no lm_head.weight
}

TEST(SynthPresets, StateDictOrderAndValidation) {
  const auto opt = tensor_plan(small("opt-125m", 1));
  const std::vector<std::string> want = {
      "model.decoder.embed_tokens.weight", "model.decoder.embed_positions.weight",
      "model.decoder.final_layer_norm.weight", "model.decoder.final_layer_norm.bias",
      "model.decoder.layers.0.self_attn.k_proj.weight", "model.decoder.layers.0.self_attn.k_proj.bias"};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(opt[i].name, want[i]);
  EXPECT_EQ(opt[1].shape, (std::vector<std::int64_t>{66, 64}));  // max_pos + 2
  EXPECT_EQ(opt.size(), 4u + 16u);
  const auto qwen = tensor_plan(small("qwen2.5-7b", 1));
  EXPECT_EQ(qwen[2].name, "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(qwen.back().name, "lm_head.weight");
  SynthSpec bad = small("llama-3-8b");
  bad.num_key_value_heads = 3;
  EXPECT_EQ(test::error_of<ConfigError>([&] { tensor_plan(bad); }),
            "synth llama-3-8b: num_attention_heads (expected a multiple of num_key_value_heads 3, got 4)");
  bad = small("opt-125m");
  bad.head_dim = 8;
  EXPECT_EQ(test::error_of<ConfigError>([&] { tensor_plan(bad); }),
            "synth opt-125m: head_dim (expected hidden_size / num_attention_heads = 16 (OPT), got 8)");
}

TEST(SynthPresets, ShardPlanFollowsSavePretrained) {
  const std::vector<TensorPlan> plan = {{"a", {10}}, {"b", {30}}, {"c", {5}}, {"d", {100}}, {"e", {1}}};
  const auto shards = plan_shards(plan, DType::F32, 160);  // bytes 40, 120, 20, 400, 4
  ASSERT_EQ(shards.size(), 4u);
  EXPECT_EQ(shards[0].tensors, (std::vector<std::size_t>{0, 1}));  // 160: fits exactly
  EXPECT_EQ(shards[1].tensors, (std::vector<std::size_t>{2}));
  EXPECT_EQ(shards[2].tensors, (std::vector<std::size_t>{3}));     // larger than the limit: alone
  EXPECT_EQ(shards[3].tensors, (std::vector<std::size_t>{4}));
  EXPECT_EQ(shards[2].file, "model-00003-of-00004.safetensors");
  EXPECT_EQ(plan_shards(plan, DType::F32, 5'000'000'000).front().file, "model.safetensors");
}

// ---- writing ------------------------------------------------------------------------------------

TEST_F(SynthWrite, SameSeedSameBytesOtherSeedOtherValues) {
  const fs::path dir = test::make_temp_dir("synth");
  SynthSpec s = small("llama-3-8b");
  s.vocab_size = 1000;
  write_checkpoint(s, dir / "a", options(5));
  write_checkpoint(s, dir / "b", options(5));
  write_checkpoint(s, dir / "c", options(6));
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dir / "a")) files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"config.json", "model.safetensors", "synth.json", "tokenizer.json",
                                          "tokenizer_config.json"}));
  for (const auto& f : files) EXPECT_EQ(file_bytes(dir / "a" / f), file_bytes(dir / "b" / f)) << f;
  EXPECT_EQ(file_bytes(dir / "a" / "config.json"), file_bytes(dir / "c" / "config.json"));
  const auto a = io::TensorStore::open(dir / "a"), c = io::TensorStore::open(dir / "c");
  for (const auto& name : a.names()) {
    const auto va = a.get(name).to_f32(), vc = c.get(name).to_f32();
    std::size_t same = 0;
    for (std::size_t i = 0; i < va.size(); ++i) same += va[i] == vc[i];
    EXPECT_LT(same, va.size() / 10 + 2) << name;  // independent values (BF16: a few coincide)
  }
  EXPECT_FALSE(fs::exists(dir / ("a.partial-" + std::to_string(::getpid()))));
}

TEST_F(SynthWrite, StoredValuesAreTheRngValuesRounded) {
  const fs::path dir = test::make_temp_dir("synth");
  SynthSpec s = small("opt-125m", 1);
  s.vocab_size = 300;
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    s.dtype = dt;
    write_checkpoint(s, dir / std::string(dtype_name(dt)), options(9));
    const auto store = io::TensorStore::open(dir / std::string(dtype_name(dt)));
    for (const TensorPlan& t : tensor_plan(s)) {
      const TensorView& v = store.get(t.name, t.shape);
      ASSERT_EQ(v.dtype, dt);
      const auto got = v.to_f32();
      for (std::size_t i = 0; i < got.size(); i += 37) {
        const float x = documented_value(9, t.name, i, t.center, t.scale);
        const float want = dt == DType::F32 ? x : dt == DType::F16 ? f16_to_f32(f32_to_f16(x)) : bf16_to_f32(f32_to_bf16(x));
        ASSERT_EQ(got[i], want) << t.name << "[" << i << "]";
      }
    }
  }
}

// Every family loads in latentllm with the parameter count the generator planned, and the tokenizer
// files give the model's BOS.
TEST_F(SynthWrite, GeneratedCheckpointsLoad) {
  const fs::path dir = test::make_temp_dir("synth");
  const std::pair<const char*, std::optional<std::int32_t>> cases[] = {
      {"opt-125m", 2}, {"llama-2-7b", 1}, {"llama-3-8b", std::nullopt}, {"qwen2.5-7b", std::nullopt}};
  for (const auto& [name, bos] : cases) {
    SCOPED_TRACE(name);
    SynthSpec s = small(name);
    s.vocab_size = std::string(name) == "llama-2-7b" ? 32000 : 2000;
    const WriteResult r = write_checkpoint(s, dir / name, options());
    const auto m = model::Model::load(dir / name);
    EXPECT_EQ(eval::num_params(*m), num_params(s));
    EXPECT_EQ(eval::num_params(*m), r.num_params);
    EXPECT_EQ(m->num_layers(), 2);
    EXPECT_EQ(m->config().architecture, preset(name).config.at("architectures").at(0).get<std::string>());
    EXPECT_EQ(m->config().num_key_value_heads, s.num_key_value_heads);
    EXPECT_EQ(m->config().tie_word_embeddings, s.tie_word_embeddings);
    EXPECT_EQ(io::load_tokenizer(dir / name)->bos_id(), bos);
  }
}

TEST_F(SynthWrite, ForcedShardingWritesAValidIndex) {
  const fs::path dir = test::make_temp_dir("synth");
  SynthSpec s = small("qwen2.5-7b", 3);
  s.vocab_size = 500;
  WriteOptions o = options(1);
  o.max_shard_bytes = 40'000;
  const WriteResult r = write_checkpoint(s, dir / "q", o);
  EXPECT_GT(r.num_shards, 3u);
  EXPECT_FALSE(fs::exists(dir / "q" / "model.safetensors"));
  std::ifstream in(dir / "q" / "model.safetensors.index.json");
  const auto index = nlohmann::json::parse(in);
  EXPECT_EQ(index.at("metadata").at("total_size").get<std::uint64_t>(), r.total_size);
  const auto plan = tensor_plan(s);
  ASSERT_EQ(index.at("weight_map").size(), plan.size());
  const auto store = io::TensorStore::open(dir / "q");
  EXPECT_EQ(store.names().size(), plan.size());
  std::uint64_t total = 0;
  std::size_t prev_shard = 0;
  for (const TensorPlan& t : plan) {  // state-dict order across shards
    const TensorView& v = store.get(t.name, t.shape);
    total += v.nbytes;
    const std::string file = index.at("weight_map").at(t.name).get<std::string>();
    const std::size_t k = std::stoul(file.substr(6, 5));
    EXPECT_GE(k, prev_shard);
    prev_shard = k;
    EXPECT_EQ(file, fmt::format("model-{:05d}-of-{:05d}.safetensors", k, r.num_shards));
  }
  EXPECT_EQ(total, r.total_size);
  for (std::size_t k = 1; k <= r.num_shards; ++k) {
    io::SafetensorsFile f(dir / "q" / fmt::format("model-{:05d}-of-{:05d}.safetensors", k, r.num_shards));
    std::uint64_t bytes = 0;
    for (const auto& v : f.tensors()) bytes += v.nbytes;
    EXPECT_TRUE(bytes <= o.max_shard_bytes || f.tensors().size() == 1) << k;
    EXPECT_EQ(f.metadata().at("format"), "pt");
  }
  EXPECT_EQ(eval::num_params(*model::Model::load(dir / "q")), r.num_params);
}

TEST_F(SynthWrite, OutputIsAtomic) {
  const fs::path dir = test::make_temp_dir("synth");
  SynthSpec s = small("llama-3-8b", 1);
  s.vocab_size = 100;
  write_checkpoint(s, dir / "m", options(1));
  EXPECT_EQ(test::error_of<IoError>([&] { write_checkpoint(s, dir / "m", options(2)); }),
            (dir / "m").string() + ": output directory exists (use --force to replace it)");
  WriteOptions o = options(2);
  o.overwrite = true;
  write_checkpoint(s, dir / "m", o);
  const std::string seed2 = file_bytes(dir / "m" / "model.safetensors");
  o.tokenizers_dir = dir / "no-such-dir";  // fails after the partial directory was created
  EXPECT_EQ(test::error_of<IoError>([&] { write_checkpoint(s, dir / "m", o); }).find(": cannot open"),
            (dir / "no-such-dir/llama3/tokenizer.json").string().size());
  EXPECT_EQ(file_bytes(dir / "m" / "model.safetensors"), seed2);  // the old checkpoint stays
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1u);  // no partial directory left
}

// ---- LLaVA ---------------------------------------------------------------------------------------

// A LLaVA preset at test sizes: the small language model (V = 32064 keeps <image> = 32000 and <pad> =
// 32001 inside the embedding) and a 2-layer vision tower on 28-pixel images (2 × 2 patches of 14; 28
// divides every pinpoint of llava-v1.6).
SynthSpec small_llava(const std::string& name) {
  SynthSpec s = small(name, 1);
  s.vocab_size = 32064;
  VisionSpec& v = s.llava->vision;
  v.hidden_size = 32;
  v.num_hidden_layers = 2;
  v.num_attention_heads = 2;
  v.intermediate_size = 48;
  v.image_size = 28;
  return s;
}

TEST(SynthLlava, ConfigKeepsTheNestedLayout) {
  SynthSpec s = preset("llava-1.5-7b");
  EXPECT_EQ(s.hidden_size, 4096);  // LlamaConfig's defaults: the published text_config leaves them out
  EXPECT_EQ(s.ffn_width, 11008);
  EXPECT_EQ(s.vocab_size, 32064);
  EXPECT_EQ(s.llava->vision.num_hidden_layers, 24);
  EXPECT_FALSE(s.llava->image_newline);
  EXPECT_TRUE(preset("llava-v1.6-vicuna-7b").llava->image_newline);
  s.num_hidden_layers = 2;  // --layers: the language model only
  auto c = config_json(s);
  EXPECT_EQ(c.at("text_config").at("num_hidden_layers"), 2);
  EXPECT_FALSE(c.at("text_config").contains("hidden_size"));  // unchanged: still left out
  EXPECT_EQ(c.at("vision_config").at("num_hidden_layers"), 24);
  c = config_json(small_llava("llava-1.5-7b"));
  EXPECT_EQ(c.at("text_config").at("hidden_size"), 64);
  EXPECT_EQ(c.at("text_config").at("num_attention_heads"), 4);
  EXPECT_EQ(c.at("text_config").at("num_key_value_heads"), 2);  // small(): GQA, not LlamaConfig's n_h
  EXPECT_EQ(c.at("vision_config").at("hidden_size"), 32);
  EXPECT_EQ(c.at("image_seq_length"), 4);
  const auto plan = tensor_plan(preset("llava-v1.6-vicuna-7b"));
  EXPECT_EQ(plan[0].name, "image_newline");
  EXPECT_EQ(plan[2].name, "vision_tower.vision_model.embeddings.patch_embedding.weight");
  EXPECT_EQ(plan[2].shape, (std::vector<std::int64_t>{1024, 3, 14, 14}));
  EXPECT_EQ(plan[3].shape, (std::vector<std::int64_t>{577, 1024}));  // (336 / 14)² + 1 positions
  EXPECT_EQ(plan.back().name, "language_model.lm_head.weight");
  SynthSpec bad = small_llava("llava-1.5-7b");
  bad.llava->vision.image_size = 30;
  EXPECT_EQ(test::error_of<ConfigError>([&] { tensor_plan(bad); }),
            "synth llava-1.5-7b: vision image_size (expected a multiple of patch_size 14, got 30)");
}

// Both LLaVA presets, shrunk, load as LLaVA (hub layout) and as their language model, run an image
// through, tokenize <image> as 32000, and show their components in `latentllm inspect`.
TEST_F(SynthWrite, LlavaCheckpointsLoad) {
  const fs::path dir = test::make_temp_dir("synth");
  for (const char* name : {"llava-1.5-7b", "llava-v1.6-vicuna-7b"}) {
    SCOPED_TRACE(name);
    const SynthSpec s = small_llava(name);
    const WriteResult r = write_checkpoint(s, dir / name, options());
    for (const char* f : {"preprocessor_config.json", "generation_config.json", "tokenizer.model"})
      EXPECT_TRUE(fs::exists(dir / name / f)) << f;
    const auto m = model::LlavaModel::load(dir / name);
    std::int64_t stored = 0;
    for (const auto& [part, n] : m.component_params()) stored += n;
    EXPECT_EQ(stored, r.num_params);
    EXPECT_EQ(m.component_params().front(), (std::pair<std::string, std::int64_t>{"vision", 34'144}));
    EXPECT_EQ(m.language_model().num_layers(), 1);
    const auto tok = io::load_tokenizer(dir / name);
    EXPECT_EQ(tok->bos_id(), 1);
    const std::vector<std::int32_t> ids = tok->encode("USER: " + model::expand_image_tokens("<image>", 4) + "\nHi");
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 32000), 4);
    const bool next = s.llava->image_newline;
    const int n_tiles = next ? 3 : 1;  // NeXT: 28 × 28 → best [28, 56], base + 2 tiles
    std::vector<float> pixels(static_cast<std::size_t>(n_tiles) * 3 * 28 * 28, 0.25f);  // [n_tiles, 3, 28, 28]
    const model::ImageInput image{pixels, n_tiles, 28, 28};
    if (!next) {
      MatrixF logits;  // [T, V]
      m.forward(ids, std::span(&image, 1), logits);
      EXPECT_EQ(logits.rows(), static_cast<std::int64_t>(ids.size()));
      EXPECT_TRUE(logits.allFinite());
    } else {
      EXPECT_GT(m.image_tokens(image), 4);
    }
    std::string out;
    ASSERT_EQ(test::run_command(test::cli_path().string() + " inspect --json " + (dir / name).string() +
                                    " 2>/dev/null", out), 0) << out;
    const auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j.at("multimodal").at("architecture"), s.config.at("architectures").at(0));
    EXPECT_EQ(j.at("dims").at("num_hidden_layers"), 1);
    EXPECT_EQ(j.at("tokenizer").at("vocab_size"), 32002);
  }
}

// ---- the golden files of scripts/gen_arch_golden.py ---------------------------------------------

TEST(SynthGolden, FilesAgreeWithTheGenerator) {
  for (const char* name : {"llama3-tiny", "qwen3-tiny"}) {
    SCOPED_TRACE(name);
    std::ifstream in(test::test_data_path(std::string("golden/") + name + ".json"));
    ASSERT_TRUE(in.good());
    const auto g = nlohmann::json::parse(in);
    const SynthSpec s = preset(name);
    EXPECT_EQ(g.at("preset"), name);
    EXPECT_EQ(g.at("dtype"), torch_dtype_name(s.dtype));
    EXPECT_EQ(g.at("config").dump(), nlohmann::json::parse(config_json(s).dump()).dump());
    std::ifstream ref(test::shared_path(std::string("data/tokenizers/") + s.tokenizer + "/REFERENCE.json"));
    const auto first = nlohmann::json::parse(ref).at("eval").at("wikitext2_test").at("first_64");
    EXPECT_EQ(g.at("input_ids"), first);
    const std::size_t T = first.size();
    EXPECT_EQ(g.at("logsumexp").size(), T);
    EXPECT_EQ(g.at("argmax").size(), T);
    ASSERT_EQ(g.at("logits").size(), T);
    for (const auto& row : g.at("logits")) EXPECT_EQ(row.size(), g.at("vocab_ids").size());
    EXPECT_GE(g.at("vocab_ids").size(), 32u);
  }
  // The llama3 scaling is exercised: scaled and unscaled RoPE logits differ far beyond a test's tolerance.
  std::ifstream in(test::test_data_path("golden/llama3-tiny.json"));
  const auto g = nlohmann::json::parse(in);
  const auto& u = g.at("without_rope_scaling");
  double max_diff = 0;
  for (std::size_t t = 0; t < g.at("logits").size(); ++t)
    for (std::size_t j = 0; j < g.at("logits")[t].size(); ++j)
      max_diff = std::max(max_diff, std::abs(g.at("logits")[t][j].get<double>() - u.at("logits")[t][j].get<double>()));
  EXPECT_GT(max_diff, 0.5);
}

}  // namespace
}  // namespace latentllm::synth
