// docs/ERRORS.md in sync with the code (tests/support/errors_doc.hpp): config.json, tokenizer files,
// datasets and calibration text, one bad input per catalogued row.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "errors_doc.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/files.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path put(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

json llama() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 32},
          {"hidden_size", 64},  {"intermediate_size", 128},               {"num_hidden_layers", 2},
          {"num_attention_heads", 8}, {"max_position_embeddings", 64}};
}

// parse_config of the Llama config with `key` set to `value` (null value: key removed).
CaseFn config_with(std::vector<std::pair<std::string, json>> edits) {
  return lib([=] {
    json c = llama();
    for (const auto& [k, v] : edits) {
      if (v.is_null()) c.erase(k);
      else c[k] = v;
    }
    (void)model::parse_config(c, "dir/config.json");
  });
}

TEST(ErrorsDoc, ConfigJson) {
  check_section(
      "config.json (`model::load_config`, `model::parse_config`)",
      {
          {"cfg-open", {lib([] { (void)model::load_config(make_temp_dir("err-cfg") / "config.json"); })}},
          {"cfg-json", {lib([] { (void)model::load_config(put(make_temp_dir("err-cfg") / "config.json", "{")); })}},
          {"cfg-type", {lib([] { (void)model::parse_config(json::array(), "dir/config.json"); })}},
          {"cfg-arch", {config_with({{"architectures", {"GPT2LMHeadModel"}}})}},
          {"cfg-model-type", {config_with({{"architectures", nullptr}, {"model_type", "gpt2"}})}},
          {"cfg-no-arch", {config_with({{"architectures", nullptr}, {"model_type", nullptr}})}},
          {"cfg-archs-type", {config_with({{"architectures", "x"}}), config_with({{"architectures", json::array()}})}},
          {"cfg-type-mismatch", {config_with({{"model_type", "opt"}})}},
          {"cfg-missing", {config_with({{"hidden_size", nullptr}})}},
          {"cfg-size", {config_with({{"hidden_size", "256"}})}},
          {"cfg-number", {config_with({{"rms_norm_eps", 0}})}},
          {"cfg-bool", {config_with({{"tie_word_embeddings", 1}})}},
          {"cfg-string", {config_with({{"hidden_act", 3}})}},
          {"cfg-token-id", {config_with({{"eos_token_id", "2"}})}},
          {"cfg-heads", {config_with({{"hidden_size", 60}})}},
          {"cfg-kv-heads", {config_with({{"num_key_value_heads", 3}})}},
          {"cfg-rope-scaling", {config_with({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}}}})}},
          {"cfg-rope-scaling-type", {config_with({{"rope_scaling", "llama3"}})}},
          {"cfg-head-dim-odd", {config_with({{"head_dim", 7}})}},
          {"cfg-sliding",
           {config_with({{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"use_sliding_window", true}})}},
      });
}

// load_tokenizer of a directory holding `files` (name -> content).
CaseFn tokenizer_dir(std::vector<std::pair<std::string, std::string>> files) {
  return lib([=] {
    const fs::path dir = make_temp_dir("err-tok");
    for (const auto& [name, content] : files) put(dir / name, content);
    (void)io::load_tokenizer(dir);
  });
}

// Llama-2's tokenizer.model with tokenizer_config.json {"added_tokens_decoder": <decoder>}.
CaseFn spm_added_tokens(const std::string& decoder) {
  const std::string model = core::read_file(shared_path("data/tokenizers/llama2/tokenizer.model"));
  return tokenizer_dir({{"tokenizer.model", model}, {"tokenizer_config.json", R"({"added_tokens_decoder": )" + decoder + "}"}});
}

TEST(ErrorsDoc, Tokenizers) {
  check_section("Tokenizers (`io::load_tokenizer`)",
                {
                    {"tok-dir", {lib([] { (void)io::load_tokenizer(put(make_temp_dir("err-tok") / "f", "x")); })}},
                    {"tok-none", {tokenizer_dir({})}},
                    {"tok-gpt2-half", {tokenizer_dir({{"vocab.json", R"({"a":0})"}})}},
                    {"tok-json",
                     {tokenizer_dir({{"tokenizer.json", "{"}}),
                      tokenizer_dir({{"tokenizer.json", "{}"}, {"tokenizer_config.json", "{"}})}},
                    {"tok-json-model", {tokenizer_dir({{"tokenizer.json", "{}"}})}},
                    {"tok-config-type", {tokenizer_dir({{"tokenizer.json", "{}"}, {"tokenizer_config.json", "[]"}})}},
                    {"tok-vocab", {tokenizer_dir({{"vocab.json", "[]"}, {"merges.txt", "#version: 0.2\na b\n"}})}},
                    {"tok-merges", {tokenizer_dir({{"vocab.json", R"({"a":0,"b":1})"}, {"merges.txt", "a b c\n"}})}},
                    {"tok-spm", {tokenizer_dir({{"tokenizer.model", "not a protobuf"}})}},
                    {"tok-model-vocab", {lib([] {
                       const fs::path dir = shared_path("models/stories260K/hf");
                       io::check_tokenizer_vocab(*io::load_tokenizer(dir), 400, dir);
                     })}},
                    {"tok-spm-added",
                     {spm_added_tokens(R"([])"), spm_added_tokens(R"({"x": {"content": "<a>"}})"),
                      spm_added_tokens(R"({"32000": {"special": true}})")}},
                });
}

calib::CalibOptions calib_text(const fs::path& file, int nsamples, int seqlen) {
  calib::CalibOptions co;
  co.source = "text";
  co.data = file;
  co.nsamples = nsamples;
  co.seqlen = seqlen;
  return co;
}

// sample_calibration with the stories260K tokenizer.
CaseFn sample(std::function<calib::CalibOptions(const fs::path& tmp)> make) {
  return lib([=] {
    const auto tok = io::load_tokenizer(shared_path("models/stories260K/hf"));
    (void)calib::sample_calibration(*tok, make(make_temp_dir("err-calib")));
  });
}

TEST(ErrorsDoc, DatasetsAndCalibrationText) {
  const auto text = [](const std::string& content) {
    return lib([=] { (void)io::build_eval_text(io::Dataset::Text, put(make_temp_dir("err-data") / "t.txt", content)); });
  };
  const auto jsonl = [](const std::string& content) {
    return lib([=] { (void)io::read_jsonl_texts(put(make_temp_dir("err-data") / "c4.jsonl", content), 0); });
  };
  const auto raw = [](io::Dataset d, const std::string& content) {
    return lib([=] { (void)io::build_eval_text(d, put(make_temp_dir("err-data") / "f.txt", content)); });
  };
  check_section(
      "Datasets and calibration text (`io::read_jsonl_texts`, `io::build_eval_text`, `calib::sample_calibration`)",
      {
          {"data-open", {lib([] { (void)io::read_jsonl_texts(make_temp_dir("err-data") / "none.jsonl", 0); })}},
          {"data-utf8", {text("ok \xff"), jsonl("\xc3")}},
          {"data-empty", {text(" \n\n"), jsonl("\n\n")}},
          {"data-jsonl", {jsonl("{\"text\": \"a\"}\n{\n")}},
          {"data-jsonl-text", {jsonl("{\"x\": 1}\n"), jsonl("[1]\n")}},
          {"data-dir", {lib([] { (void)io::build_eval_text(io::Dataset::WikiText2, make_temp_dir("err-data")); }),
                        lib([] { (void)io::read_jsonl_texts(make_temp_dir("err-data"), 0); }),
                        sample([](const fs::path& t) { return calib_text(t, 1, 8); })}},
          {"data-jsonl-as-text", {raw(io::Dataset::WikiText2, "\n{\"text\": \"a\"}\n"),
                                  raw(io::Dataset::PTB, "{\"text\": \"a\"}\n"),
                                  raw(io::Dataset::StoriesValid, "{\"text\": \"a\"}\n\n{\"text\": \"b\"}\n")}},
          {"data-text-as-jsonl", {jsonl("\n = Robert Boulter = \n"),
                                  raw(io::Dataset::C4, "Once upon a time\n"),
                                  sample([](const fs::path& t) {
                                    auto co = calib_text(put(t / "t.txt", "Once upon a time"), 1, 8);
                                    co.source = "c4";
                                    return co;
                                  })}},
          {"data-name", {lib([] { (void)io::parse_dataset("wiki"); })}},
          {"data-heldout", {lib([] {
             std::string docs;
             for (int i = 0; i < 100; ++i) docs += "{\"text\": \"d\"}\n";
             (void)io::build_eval_text(io::Dataset::C4Heldout, put(make_temp_dir("err-data") / "c4.jsonl", docs));
           })}},
          {"calib-source", {sample([](const fs::path& t) {
             auto co = calib_text(put(t / "t.txt", "Once upon a time"), 1, 8);
             co.source = "xx";
             return co;
           })}},
          {"calib-nsamples", {sample([](const fs::path& t) { return calib_text(t / "t.txt", 0, 8); })}},
          {"calib-seqlen", {sample([](const fs::path& t) { return calib_text(t / "t.txt", 1, 1); })}},
          {"calib-short-docs", {sample([](const fs::path& t) {
             auto co = calib_text(put(t / "c4.jsonl", "{\"text\": \"Once upon a time\"}\n"), 1, 64);
             co.source = "c4";
             return co;
           })}},
          {"calib-holdout", {sample([](const fs::path& t) {
                               auto co = calib_text(put(t / "t.txt", "Once upon a time"), 1, 8);
                               co.holdout_docs = 1;
                               return co;
                             }),
                             sample([](const fs::path& t) {
                               auto co = calib_text(put(t / "c4.jsonl", "{\"text\": \"Once\"}\n"), 1, 8);
                               co.source = "c4";
                               co.holdout_docs = -1;
                               return co;
                             })}},
          {"calib-holdout-all", {sample([](const fs::path& t) {
             auto co = calib_text(put(t / "c4.jsonl", "{\"text\": \"Once\"}\n{\"text\": \"upon\"}\n"), 1, 8);
             co.source = "c4";
             co.holdout_docs = 2;
             return co;
           })}},
          {"calib-contiguous", {sample([](const fs::path& t) {
             auto co = calib_text(put(t / "t.txt", "Once upon a time there was a dog."), 4, 8);
             co.sampling = calib::Sampling::Contiguous;
             return co;
           })}},
      });
}

}  // namespace
}  // namespace latentllm::test
