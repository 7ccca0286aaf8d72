// Native tokenizers against the reference encodings in ../shared:
//   data/tokenizers/*/REFERENCE.json and models/*/TOKENIZER_REFERENCE.json (every tricky string's ids;
//   every evaluation string's token count, id hash, first and last 64 ids), and the token counts and
//   id hashes of models/*/REFERENCE.json (the perplexity references' inputs).
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "core/mapped_file.hpp"
#include "io/unicode.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::shared_path;

std::string ids_sha256(const std::vector<std::int32_t>& ids) {
  // sha256 of the ids as little-endian int32 (this machine is little-endian; x86-64 / aarch64).
  return test::sha256_hex(ids.data(), ids.size() * sizeof(std::int32_t));
}

std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

struct RefCase {
  std::string name;
  std::string reference;  // relative to ../shared
  std::function<std::unique_ptr<io::Tokenizer>()> load;
  std::string kind;       // describe()
};

// Keeps gtest from dumping the struct's bytes into test names.
void PrintTo(const RefCase& c, std::ostream* os) { *os << c.name; }

std::unique_ptr<io::Tokenizer> load_opt_data_folder() {
  // The folder has no tokenizer_config.json; these are facebook/opt-350m's (what the reference used).
  io::TokenizerFiles f;
  f.vocab_json = shared_path("data/tokenizers/opt/vocab.json");
  f.merges_txt = shared_path("data/tokenizers/opt/merges.txt");
  f.config_overrides = {{"add_bos_token", true}, {"bos_token", "</s>"}, {"eos_token", "</s>"},
                        {"unk_token", "</s>"},   {"pad_token", "<pad>"}};
  return io::load_tokenizer_files(f);
}

std::function<std::unique_ptr<io::Tokenizer>()> dir_loader(std::string rel) {
  return [rel] { return io::load_tokenizer(shared_path(rel)); };
}

const std::vector<RefCase>& ref_cases() {
  static const std::vector<RefCase> cases = {
      {"opt", "data/tokenizers/opt/REFERENCE.json", load_opt_data_folder, "gpt2-bpe"},
      {"opt_tiny_model_dir", "data/tokenizers/opt/REFERENCE.json", dir_loader("models/opt-tiny"), "gpt2-bpe"},
      {"gpt2", "data/tokenizers/gpt2/REFERENCE.json", dir_loader("data/tokenizers/gpt2"), "gpt2-bpe"},
      {"llama2", "data/tokenizers/llama2/REFERENCE.json", dir_loader("data/tokenizers/llama2"), "sentencepiece"},
      {"llama3", "data/tokenizers/llama3/REFERENCE.json", dir_loader("data/tokenizers/llama3"), "tokenizer.json:BPE"},
      {"qwen3", "data/tokenizers/qwen3/REFERENCE.json", dir_loader("data/tokenizers/qwen3"), "tokenizer.json:BPE"},
      {"TinyStories656K", "models/TinyStories-656K/TOKENIZER_REFERENCE.json", dir_loader("models/TinyStories-656K"),
       "tokenizer.json:BPE"},
      {"stories260K", "models/stories260K/TOKENIZER_REFERENCE.json", dir_loader("models/stories260K/hf"),
       "tokenizer.json:BPE"},
      {"aidreams260K", "models/aidreams260K/TOKENIZER_REFERENCE.json", dir_loader("models/aidreams260K/hf"),
       "tokenizer.json:BPE"},
  };
  return cases;
}

// Tricky strings where we knowingly differ from the reference, per case, with the reason.
// Currently none: every tricky string of every reference matches.
const std::map<std::string, std::set<std::string>> kKnownDifferences = {};

const io::Tokenizer& cached_tokenizer(const RefCase& c) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<io::Tokenizer>> cache;
  std::lock_guard lock(mu);
  auto& slot = cache[c.name];
  if (!slot) slot = c.load();
  return *slot;
}

json read_json(const std::filesystem::path& p) { return json::parse(core::read_file(p)); }

io::Dataset eval_dataset(const std::string& eval_name) {
  if (eval_name == "wikitext2_test") return io::Dataset::WikiText2;
  if (eval_name == "ptb_valid") return io::Dataset::PTB;
  if (eval_name == "c4_train_first1000") return io::Dataset::C4;
  throw std::runtime_error("unknown eval entry " + eval_name);
}

std::filesystem::path eval_file(io::Dataset d) {
  switch (d) {
    case io::Dataset::WikiText2: return shared_path("data/wikitext2/wiki.test.raw");
    case io::Dataset::PTB: return shared_path("data/ptb/ptb.valid.txt");
    default: return shared_path("data/c4/c4-train.00000-of-01024.first1000.jsonl");
  }
}

class TokenizerReference : public ::testing::TestWithParam<RefCase> {};

// decode(ids) gives the tricky string back (HF decode with skip_special_tokens): every tokenizer kind's
// decoder, split multi-byte characters and the leading space after BOS. Strings with literal special
// tokens ("</s>", "<|endoftext|>", ...) or characters the vocabulary lacks (<unk>, TinyStories-656K's
// "="), which decode skips, are left out, and so are those a normalizer changes (NFC composes
// decomposed accents), which no decoder can give back.
TEST_P(TokenizerReference, DecodeGivesTheTrickyStringsBack) {
  const RefCase& c = GetParam();
  const io::Tokenizer& tok = cached_tokenizer(c);
  const json ref = read_json(shared_path(c.reference));
  int checked = 0;
  for (const auto& t : ref.at("tricky")) {
    const std::string text = t.at("text").get<std::string>();
    if (text.find('<') != std::string::npos && text.find('>') != std::string::npos) continue;
    const auto pieces = t.at("pieces").get<std::vector<std::string>>();
    if (std::find(pieces.begin(), pieces.end(), "<unk>") != pieces.end()) continue;
    const auto ids = t.at("ids").get<std::vector<std::int32_t>>();
    const std::string got = tok.decode(ids);
    if (got != text && io::nfc(text) == got) continue;  // the NFC normalizer (Qwen3) composed it
    EXPECT_EQ(got, text) << c.name << " tricky string " << t.at("name").get<std::string>();
    ++checked;
  }
  EXPECT_GE(checked, 15) << c.name;  // TinyStories-656K lacks many characters: 17 of 42
}

TEST_P(TokenizerReference, EveryTrickyStringMatches) {
  const RefCase& c = GetParam();
  const io::Tokenizer& tok = cached_tokenizer(c);
  const json ref = read_json(shared_path(c.reference));
  const auto known_it = kKnownDifferences.find(c.name);
  ASSERT_EQ(ref.at("tricky").size(), 42u);
  for (const auto& t : ref.at("tricky")) {
    const std::string name = t.at("name");
    const auto want = t.at("ids").get<std::vector<std::int32_t>>();
    const auto got = tok.encode(t.at("text").get<std::string>());
    if (known_it != kKnownDifferences.end() && known_it->second.count(name)) {
      EXPECT_NE(got, want) << name << " is listed as a known difference but now matches";
      continue;
    }
    EXPECT_EQ(got, want) << c.name << " tricky string " << name;
  }
}

TEST_P(TokenizerReference, EvaluationStringsMatch) {
  const RefCase& c = GetParam();
  const io::Tokenizer& tok = cached_tokenizer(c);
  const json ref = read_json(shared_path(c.reference));
  ASSERT_FALSE(ref.at("eval").empty());
  for (const auto& [eval_name, e] : ref.at("eval").items()) {
    const io::Dataset d = eval_dataset(eval_name);
    const std::string text = io::build_eval_text(d, eval_file(d));
    ASSERT_EQ(test::sha256_hex(text.data(), text.size()), e.at("string").at("sha256_utf8")) << eval_name;
    ASSERT_EQ(code_points(text), e.at("string").at("chars").get<std::size_t>()) << eval_name;

    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ speed    ] %s %s: %zu chars -> %zu ids in %.3f s (%.2f M chars/s)\n", c.name.c_str(),
                eval_name.c_str(), code_points(text), ids.size(), sec, code_points(text) / sec / 1e6);

    EXPECT_EQ(ids.size(), e.at("n_tokens").get<std::size_t>()) << eval_name;
    EXPECT_EQ(ids_sha256(ids), e.at("sha256_ids_int32le")) << eval_name;
    const auto first = e.at("first_64").get<std::vector<std::int32_t>>();
    const auto last = e.at("last_64").get<std::vector<std::int32_t>>();
    ASSERT_GE(ids.size(), 64u);
    EXPECT_EQ(std::vector<std::int32_t>(ids.begin(), ids.begin() + 64), first) << eval_name;
    EXPECT_EQ(std::vector<std::int32_t>(ids.end() - 64, ids.end()), last) << eval_name;
  }
}

TEST_P(TokenizerReference, SpecialTokensAndDescription) {
  const RefCase& c = GetParam();
  const io::Tokenizer& tok = cached_tokenizer(c);
  EXPECT_EQ(tok.describe(), c.kind);
  const json ref = read_json(shared_path(c.reference));
  // The empty string gives exactly the special tokens of the default call: BOS or nothing.
  const auto empty_ids = ref.at("tricky").at(0).at("ids").get<std::vector<std::int32_t>>();
  ASSERT_EQ(ref.at("tricky").at(0).at("name"), "empty");
  if (empty_ids.empty()) {
    EXPECT_FALSE(tok.bos_id().has_value());
  } else {
    ASSERT_EQ(empty_ids.size(), 1u);
    EXPECT_EQ(tok.bos_id(), empty_ids[0]);
  }
  // add_special_tokens = false drops exactly that prefix.
  for (const auto& t : ref.at("tricky")) {
    const std::string text = t.at("text");
    auto with = tok.encode(text, true);
    const auto without = tok.encode(text, false);
    with.erase(with.begin(), with.begin() + static_cast<std::ptrdiff_t>(empty_ids.size()));
    EXPECT_EQ(without, with) << t.at("name");
  }
  EXPECT_GT(tok.vocab_size(), 255);
  EXPECT_FALSE(tok.id_to_token(0).empty());
  EXPECT_TRUE(tok.id_to_token(static_cast<std::int32_t>(tok.vocab_size())).empty());
}

INSTANTIATE_TEST_SUITE_P(Golden, TokenizerReference, ::testing::ValuesIn(ref_cases()),
                         [](const auto& info) { return info.param.name; });

// models/*/REFERENCE.json: the token counts and id hashes the perplexity references were computed on,
// through load_tokenizer(model dir) exactly as the CLI loads it (c4 keeps the first 256 * seqlen ids).
TEST(ModelReference, PerplexityInputsMatch) {
  for (const char* model : {"opt-tiny", "TinyStories-656K", "stories260K", "aidreams260K"}) {
    const json ref = read_json(shared_path(std::string("models/") + model + "/REFERENCE.json"));
    const auto dir = shared_path(std::string("models/") + model) / ref.at("model_dir").get<std::string>();
    const auto tok = io::load_tokenizer(dir);
    ASSERT_FALSE(ref.at("ppl").empty());
    for (const auto& [key, e] : ref.at("ppl").items()) {
      const io::Dataset d = io::parse_dataset(e.at("dataset").get<std::string>());
      const std::string text = io::build_eval_text(d, shared_path("data/" + e.at("data").get<std::string>()));
      auto ids = tok->encode(text);
      if (d == io::Dataset::C4) ids.resize(std::min(ids.size(), 256 * e.at("seqlen").get<std::size_t>()));
      EXPECT_EQ(ids.size(), e.at("tokens").get<std::size_t>()) << model << " " << key;
      EXPECT_EQ(ids_sha256(ids), e.at("ids_sha256")) << model << " " << key;
    }
  }
}

// The SentencePiece tokenizer encodes long texts in chunks cut before "\n"; the ids must equal one
// sentencepiece call on the whole text.
TEST(SentencePieceChunking, EqualsOneCallOnLongTexts) {
  const auto model = shared_path("data/tokenizers/llama2/tokenizer.model");
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model.string()).ok());
  const auto tok = io::load_tokenizer(model.parent_path());
  for (const char* rel : {"text/tinyshakespeare/input.txt", "text/gutenberg-swanns-way/pg7178.txt"}) {
    std::string text = io::build_eval_text(io::Dataset::Text, shared_path("data/" + std::string(rel)));
    std::size_t cut = 150000;
    while ((static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
    std::vector<int> want;
    ASSERT_TRUE(sp.Encode(text, &want).ok());
    want.insert(want.begin(), sp.bos_id());
    const auto got = tok->encode(text);
    EXPECT_EQ(std::vector<int>(got.begin(), got.end()), want) << rel;
  }
}

// tokenizer_config.json's added_tokens_decoder over a tokenizer.model (llava-hf's Llama-2 tokenizer with
// <image> = 32000, <pad> = 32001): the added tokens are split out first and every other segment is
// encoded alone, dummy prefix included, as llava-hf's fast tokenizer gives ("▁" = 29871 after <image>).
TEST(SentencePieceAddedTokens, LlavaImageTokenSplitsTheText) {
  const fs::path dir = test::make_temp_dir("spadded");
  fs::copy_file(shared_path("data/tokenizers/llama2/tokenizer.model"), dir / "tokenizer.model");
  const json config = {{"added_tokens_decoder",
                        {{"32000", {{"content", "<image>"}, {"special", true}}},
                         {"32001", {{"content", "<pad>"}, {"special", true}}},
                         {"32002", {{"content", "<note>"}, {"special", false}}}}}};
  core::write_text_atomic(dir / "tokenizer_config.json", config.dump());
  const auto tok = io::load_tokenizer(dir);
  EXPECT_EQ(tok->vocab_size(), 32003);
  EXPECT_EQ(tok->id_to_token(32000), "<image>");
  const std::vector<std::int32_t> ids = tok->encode("USER: <image><image>\nWhat");
  EXPECT_EQ(ids, (std::vector<std::int32_t>{1, 3148, 1001, 29901, 29871, 32000, 32000, 29871, 13, 5618}));
  EXPECT_EQ(tok->decode(ids), "USER:  \nWhat");  // special added tokens skipped, the rest decoded together
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{5618, 32002, 5618}), "What<note>What");
  core::write_text_atomic(dir / "tokenizer_config.json", R"({"added_tokens_decoder": {"x": {"content": "<a>"}}})");
  try {
    io::load_tokenizer(dir);
    FAIL() << "a non-integer id accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("added_tokens_decoder \"x\": id (expected an integer"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace latentllm
