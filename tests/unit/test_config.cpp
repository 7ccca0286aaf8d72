// config.json -> ModelConfig: the four shared models, each family's defaults, and one bad config per
// failure mode (exception type + a message naming the file, the key and expected/got).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "test_support.hpp"

namespace latentllm::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;



std::string config_error(const json& doc) {
  return test::error_of<ConfigError>([&] { parse_config(doc, "dir/config.json"); });
}

json minimal_opt() {
  return {{"architectures", {"OPTForCausalLM"}}, {"model_type", "opt"}, {"vocab_size", 100},
          {"hidden_size", 32}, {"num_hidden_layers", 2}, {"ffn_dim", 64}, {"num_attention_heads", 4},
          {"max_position_embeddings", 128}};
}

json minimal_llama(const std::string& arch = "LlamaForCausalLM", const std::string& type = "llama") {
  return {{"architectures", {arch}}, {"model_type", type}, {"vocab_size", 100}, {"hidden_size", 64},
          {"intermediate_size", 96}, {"num_hidden_layers", 2}, {"num_attention_heads", 8},
          {"max_position_embeddings", 256}};
}

// ---- the shared models ------------------------------------------------------------------------

TEST(Config, OptTiny) {
  const fs::path p = test::shared_path("models/opt-tiny/config.json");
  const ModelConfig c = load_config(p);
  EXPECT_EQ(c.architecture, "OPTForCausalLM");
  EXPECT_EQ(c.model_type, "opt");
  EXPECT_EQ(c.vocab_size, 50272);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.ffn_dim, 1024);
  EXPECT_EQ(c.ffn_width(), 1024);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(c.word_embed_proj_dim, 256);
  EXPECT_TRUE(c.do_layer_norm_before);
  EXPECT_TRUE(c.enable_bias);
  EXPECT_TRUE(c.qkv_bias && c.o_bias && c.mlp_bias);
  EXPECT_TRUE(c.layer_norm_elementwise_affine);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.hidden_act, "relu");
  EXPECT_EQ(c.bos_token_id, 2);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.pad_token_id, 1);
  EXPECT_EQ(c.torch_dtype, "float16");
  EXPECT_EQ(c.raw.at("_name_or_path"), "opt-tiny");
}

TEST(Config, TinyStories656K) {
  const ModelConfig c = load_config(test::shared_path("models/TinyStories-656K/config.json"));
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.intermediate_size, 384);
  EXPECT_EQ(c.ffn_width(), 384);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.attention_bias || c.qkv_bias || c.o_bias || c.mlp_bias);
  EXPECT_TRUE(c.tie_word_embeddings);  // explicit in the file (the llama default is false)
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_EQ(c.torch_dtype, "float32");
}

TEST(Config, Stories260KAndAidreams260K) {
  const ModelConfig s = load_config(test::shared_path("models/stories260K/hf/config.json"));
  EXPECT_EQ(s.hidden_size, 64);
  EXPECT_EQ(s.intermediate_size, 172);
  EXPECT_EQ(s.num_hidden_layers, 5);
  EXPECT_EQ(s.num_attention_heads, 8);
  EXPECT_EQ(s.num_key_value_heads, 4);
  EXPECT_EQ(s.head_dim, 8);
  EXPECT_EQ(s.vocab_size, 512);
  EXPECT_EQ(s.max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(s.rms_norm_eps, 1e-5);
  EXPECT_TRUE(s.tie_word_embeddings);

  const ModelConfig a = load_config(test::shared_path("models/aidreams260K/hf/config.json"));
  EXPECT_EQ(a.num_hidden_layers, 4);
  EXPECT_EQ(a.num_attention_heads, 4);
  EXPECT_EQ(a.num_key_value_heads, 4);
  EXPECT_EQ(a.head_dim, 16);
  EXPECT_EQ(a.max_position_embeddings, 128);
  EXPECT_DOUBLE_EQ(a.rms_norm_eps, 1e-5);
}

// ---- family defaults --------------------------------------------------------------------------

TEST(Config, OptDefaults) {
  const ModelConfig c = parse_config(minimal_opt(), "config.json");
  EXPECT_EQ(c.word_embed_proj_dim, 32);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.do_layer_norm_before);
  EXPECT_TRUE(c.enable_bias);
  EXPECT_EQ(c.hidden_act, "relu");
  json d = minimal_opt();
  d["enable_bias"] = false;
  d["do_layer_norm_before"] = false;
  d["word_embed_proj_dim"] = 16;
  d["activation_function"] = "gelu";
  const ModelConfig e = parse_config(d, "config.json");
  EXPECT_FALSE(e.enable_bias || e.qkv_bias || e.mlp_bias);
  EXPECT_FALSE(e.do_layer_norm_before);
  EXPECT_EQ(e.word_embed_proj_dim, 16);
  EXPECT_EQ(e.hidden_act, "gelu");
}

TEST(Config, LlamaFamilyDefaultsAndBiases) {
  const ModelConfig l = parse_config(minimal_llama(), "config.json");
  EXPECT_EQ(l.num_key_value_heads, 8);  // MHA when absent
  EXPECT_EQ(l.head_dim, 8);             // hidden / heads when absent
  EXPECT_FALSE(l.tie_word_embeddings);  // transformers' LlamaConfig default
  EXPECT_DOUBLE_EQ(l.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(l.rope.theta, 10000.0);
  EXPECT_EQ(l.hidden_act, "silu");
  EXPECT_FALSE(l.qkv_bias || l.o_bias || l.mlp_bias);
  EXPECT_EQ(l.sliding_window, 0);

  json b = minimal_llama();
  b["attention_bias"] = true;
  b["mlp_bias"] = true;
  b["rope_scaling"] = nullptr;  // null is fine
  const ModelConfig lb = parse_config(b, "config.json");
  EXPECT_TRUE(lb.attention_bias && lb.qkv_bias && lb.o_bias && lb.mlp_bias);

  const ModelConfig q = parse_config(minimal_llama("Qwen2ForCausalLM", "qwen2"), "config.json");
  EXPECT_TRUE(q.qkv_bias);  // Qwen2 always has q/k/v biases, never o/mlp
  EXPECT_FALSE(q.o_bias || q.mlp_bias);

  json m = minimal_llama("MistralForCausalLM", "mistral");
  m["sliding_window"] = 4096;
  m["num_key_value_heads"] = 2;
  m["head_dim"] = 16;  // head_dim need not be hidden / heads
  m["rope_theta"] = 1000000.0;
  m["eos_token_id"] = json::array({7, 9});
  m["tie_word_embeddings"] = true;
  const ModelConfig mc = parse_config(m, "config.json");
  EXPECT_EQ(mc.sliding_window, 4096);
  EXPECT_EQ(mc.num_key_value_heads, 2);
  EXPECT_EQ(mc.head_dim, 16);
  EXPECT_DOUBLE_EQ(mc.rope.theta, 1e6);
  EXPECT_EQ(mc.eos_token_id, 7);
  EXPECT_TRUE(mc.tie_word_embeddings);
  EXPECT_FALSE(mc.qkv_bias);
}

// transformers MistralConfig: sliding_window=4096 when the key is absent; an explicit null (as in
// Mistral-7B-v0.2 and later) disables the window.
TEST(Config, MistralSlidingWindowDefaultsTo4096AndNullMeansNone) {
  json m = minimal_llama("MistralForCausalLM", "mistral");
  EXPECT_EQ(parse_config(m, "config.json").sliding_window, 4096);
  m["sliding_window"] = nullptr;
  EXPECT_EQ(parse_config(m, "config.json").sliding_window, 0);
  m["sliding_window"] = 7;
  EXPECT_EQ(parse_config(m, "config.json").sliding_window, 7);
  m["sliding_window"] = 0;
  test::expect_contains(config_error(m), {"sliding_window (expected a positive integer, got 0)"});
  m["sliding_window"] = "4096";
  test::expect_contains(config_error(m), {"sliding_window (expected a positive integer, got \"4096\")"});
}

// Llama-3.1's rope_scaling (the values of its config.json) and the older "type" spelling of linear.
TEST(Config, RopeScaling) {
  json d = minimal_llama();
  d["rope_scaling"] = {{"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}};
  d["rope_theta"] = 500000.0;
  const ModelConfig c = parse_config(d, "config.json");
  EXPECT_EQ(c.rope.scaling, RopeSpec::Scaling::Llama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope.original_max_position_embeddings, 8192);
  d["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse_config(d, "config.json").rope.scaling, RopeSpec::Scaling::Linear);
  d["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse_config(d, "config.json").rope.scaling, RopeSpec::Scaling::None);
}

// transformers Qwen3Config: head_dim 128 when absent (not hidden / heads), q_norm and k_norm always,
// attention_bias false by default (then q, k, v and o have none).
TEST(Config, Qwen3Defaults) {
  json d = minimal_llama("Qwen3ForCausalLM", "qwen3");
  const ModelConfig c = parse_config(d, "config.json");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  d["attention_bias"] = true;
  d["head_dim"] = 16;
  const ModelConfig b = parse_config(d, "config.json");
  EXPECT_TRUE(b.qkv_bias && b.o_bias);
  EXPECT_EQ(b.head_dim, 16);
  EXPECT_FALSE(parse_config(minimal_llama(), "config.json").qk_norm);
  d["use_sliding_window"] = true;
  test::expect_contains(config_error(d), {"use_sliding_window is unsupported"});
}

TEST(Config, ModelTypeAloneSelectsTheArchitecture) {
  json d = minimal_llama("", "qwen2");
  d.erase("architectures");
  const ModelConfig c = parse_config(d, "config.json");
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.qkv_bias);
}

// ---- bad configs ------------------------------------------------------------------------------

TEST(ConfigErrors, UnsupportedArchitectureListsSupported) {
  json d = minimal_llama("GPT2LMHeadModel", "gpt2");
  EXPECT_EQ(test::error_of<ConfigError>([&] { parse_config(d, "config.json"); }),
            "config.json: architecture GPT2LMHeadModel is not supported (supported: OPTForCausalLM, "
            "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM)");
  d.erase("architectures");
  test::expect_contains(config_error(d), {"dir/config.json: model_type gpt2 is not supported",
                                    "supported: opt, llama, qwen2, qwen3, mistral"});
  d.erase("model_type");
  test::expect_contains(config_error(d), {"dir/config.json: missing key architectures (expected one of OPTForCausalLM"});
  json mismatch = minimal_llama("LlamaForCausalLM", "opt");
  test::expect_contains(config_error(mismatch), {"model_type (expected llama for LlamaForCausalLM, got opt)"});
}

TEST(ConfigErrors, MissingKey) {
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "ffn_dim",
                          "max_position_embeddings"}) {
    json d = minimal_opt();
    d.erase(key);
    test::expect_contains(config_error(d), {fmt::format("dir/config.json: missing key {} (expected a positive integer)", key)});
  }
  json l = minimal_llama();
  l.erase("intermediate_size");
  test::expect_contains(config_error(l), {"dir/config.json: missing key intermediate_size"});
  json n = minimal_llama();
  n["hidden_size"] = nullptr;  // null counts as missing for a required key
  test::expect_contains(config_error(n), {"missing key hidden_size"});
}

TEST(ConfigErrors, WrongTypesAndValues) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"hidden_size", "256"}}, R"(dir/config.json: hidden_size (expected a positive integer, got "256"))"},
      {{{"hidden_size", 256.0}}, "dir/config.json: hidden_size (expected a positive integer, got 256.0)"},
      {{{"num_hidden_layers", 0}}, "dir/config.json: num_hidden_layers (expected a positive integer, got 0)"},
      {{{"num_attention_heads", -4}}, "dir/config.json: num_attention_heads (expected a positive integer, got -4)"},
      {{{"num_key_value_heads", true}}, "num_key_value_heads (expected a positive integer, got true)"},
      {{{"rms_norm_eps", 0}}, "dir/config.json: rms_norm_eps (expected a positive number, got 0)"},
      {{{"rope_theta", "1e4"}}, R"(rope_theta (expected a positive number, got "1e4"))"},
      {{{"tie_word_embeddings", 1}}, "dir/config.json: tie_word_embeddings (expected true or false, got 1)"},
      {{{"hidden_act", 3}}, "dir/config.json: hidden_act (expected a string, got 3)"},
      {{{"architectures", "LlamaForCausalLM"}}, "architectures (expected a non-empty list of strings"},
      {{{"eos_token_id", "2"}}, R"(eos_token_id (expected an integer or a list of integers, got "2"))"},
  };
  for (const auto& [patch, want] : cases) {
    json d = minimal_llama();
    d.update(patch);
    test::expect_contains(config_error(d), {want});
  }
  json o = minimal_opt();
  o["enable_bias"] = "yes";
  test::expect_contains(config_error(o), {R"(enable_bias (expected true or false, got "yes"))"});
}

TEST(ConfigErrors, HeadDivisibility) {
  json d = minimal_llama();
  d["hidden_size"] = 60;  // 60 / 8 heads
  test::expect_contains(config_error(d), {"dir/config.json: hidden_size 60 (expected a multiple of num_attention_heads 8)"});
  d["head_dim"] = 8;  // an explicit head_dim lifts that requirement
  EXPECT_EQ(parse_config(d, "config.json").head_dim, 8);
  json g = minimal_llama();
  g["num_key_value_heads"] = 3;
  test::expect_contains(config_error(g),
                  {"dir/config.json: num_attention_heads 8 (expected a multiple of num_key_value_heads 3)"});
  json o = minimal_opt();
  o["num_attention_heads"] = 5;
  test::expect_contains(config_error(o), {"hidden_size 32 (expected a multiple of num_attention_heads 5)"});
}

TEST(ConfigErrors, UnsupportedRopeScalingAndSlidingWindow) {
  json d = minimal_llama();
  d["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_EQ(config_error(d),
            "dir/config.json: rope_scaling.rope_type (expected default, linear or llama3, got yarn)");
  d["rope_scaling"] = "llama3";
  EXPECT_EQ(config_error(d), R"(dir/config.json: rope_scaling (expected null or an object, got "llama3"))");
  d["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", -8.0}};
  EXPECT_EQ(config_error(d), "dir/config.json: rope_scaling: factor (expected a positive number, got -8.0)");
  d["rope_scaling"] = {{"rope_type", "llama3"}, {"low_freq_factor", 4.0}, {"high_freq_factor", 4.0}};
  EXPECT_EQ(config_error(d), "dir/config.json: rope_scaling high_freq_factor 4 (expected > low_freq_factor 4)");
  json odd = minimal_llama();
  odd["head_dim"] = 7;
  EXPECT_EQ(config_error(odd), "dir/config.json: head_dim (expected even for RoPE, got 7)");
  json q = minimal_llama("Qwen2ForCausalLM", "qwen2");
  q["use_sliding_window"] = true;
  test::expect_contains(config_error(q), {"use_sliding_window is unsupported"});
}

TEST(ConfigErrors, FileLevelFailures) {
  const fs::path dir = test::make_temp_dir("config");
  const fs::path bad = dir / "config.json";
  {
    std::ofstream out(bad);
    out << R"({"architectures": ["OPTForCausalLM"], "hidden_size": 2)";  // truncated
  }
  test::expect_contains(test::error_of<FormatError>([&] { load_config(bad); }), {bad.string() + ": not valid JSON"});
  {
    std::ofstream out(bad);
    out << "[1, 2]";
  }
  test::expect_contains(test::error_of<ConfigError>([&] { load_config(bad); }),
                  {bad.string() + ": config (expected a JSON object, got array)"});
  const fs::path missing = dir / "nope" / "config.json";
  test::expect_contains(test::error_of<IoError>([&] { load_config(missing); }), {missing.string(), "cannot open"});
}

}  // namespace
}  // namespace latentllm::model
