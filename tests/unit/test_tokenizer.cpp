// Tokenizer components on tiny synthetic inputs (regex whitespace, BPE merge order, unknown handling,
// added tokens, split behaviors, Metaspace, NFC, UTF-8), and one test per loader failure mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "io/bpe_model.hpp"
#include "io/hf_components.hpp"
#include "io/regex.hpp"
#include "io/unicode.hpp"
#include "latentllm/error.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::int32_t>;

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream f(p, std::ios::binary);
  f << content;
}

std::vector<std::string> matches(const io::Regex& re, const std::string& text) {
  std::vector<io::MatchRange> m;
  re.find_all(text, m);
  std::vector<std::string> out;
  for (const auto& [b, e] : m) out.push_back(text.substr(b, e - b));
  return out;
}

TEST(Regex, WhitespaceIsUnicodeWhiteSpace) {
  const io::Regex ws("^\\s$", false, "test");
  for (const char* s : {" ", "\t", "\n", "\u0085", "\u00a0", "\u2028", "\u3000", "\u2009"}) {
    EXPECT_EQ(matches(ws, s).size(), 1u) << "should be \\s: " << s;
  }
  // PCRE2's UCP \s would match U+180E; Oniguruma's (White_Space) does not, nor U+FEFF / U+200B.
  for (const char* s : {"\ufeff", "\u180e", "\u200b", "a"}) EXPECT_TRUE(matches(ws, s).empty()) << s;
  const io::Regex non_ws("^[^\\s]$", false, "test");
  EXPECT_EQ(matches(non_ws, "\u180e").size(), 1u);
  EXPECT_TRUE(matches(non_ws, "\u0085").empty());
}

TEST(Regex, Gpt2PatternSplits) {
  const io::Regex re(io::kGpt2Pattern, false, "test");
  EXPECT_EQ(matches(re, "Hello world's  x1234 ?!"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " x", "1234", " ?!"}));
  // " \ufeffA": U+FEFF is not whitespace, so the space joins it as punctuation-like text.
  EXPECT_EQ(matches(re, "x \ufeffA"), (std::vector<std::string>{"x", " \ufeff", "A"}));
  // " \u0085b": U+0085 is whitespace.
  EXPECT_EQ(matches(re, "a \u0085b"), (std::vector<std::string>{"a", " ", "\u0085", "b"}));
}

TEST(Regex, RejectsUnsupportedEscapesAndBadPatterns) {
  EXPECT_THROW(io::Regex("\\h+", false, "test"), FormatError);
  EXPECT_THROW(io::Regex("[\\S]", false, "test"), FormatError);
  EXPECT_THROW(io::Regex("(unclosed", false, "test"), FormatError);
  EXPECT_EQ(io::rewrite_whitespace_classes("[^\\s\\p{L}]", "t").find("\\s"), std::string::npos);
}

io::Vocab vocab_of(std::initializer_list<const char*> tokens) {
  io::Vocab v;
  std::int32_t id = 0;
  for (const char* t : tokens) v.emplace(t, id++);
  return v;
}

TEST(BpeModel, MergesByRankThenLeftmost) {
  // "b c" has the best rank, so "abc" = a + bc, then "a bc".
  io::BpeModel m(vocab_of({"a", "b", "c", "ab", "bc", "abc", "aa"}), {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}},
                 {}, "test");
  Ids out;
  m.tokenize("abc", out);
  EXPECT_EQ(out, (Ids{5}));
  out.clear();
  m.tokenize("aaa", out);  // equal ranks: the leftmost pair first -> "aa" "a"
  EXPECT_EQ(out, (Ids{6, 0}));
  out.clear();
  m.tokenize("cab", out);
  EXPECT_EQ(out, (Ids{2, 3}));
}

TEST(BpeModel, ByteFallbackAndFusedUnknowns) {
  io::BpeOptions opt;
  opt.unk_token = "<unk>";
  opt.byte_fallback = true;
  opt.fuse_unk = true;
  io::BpeModel with_bytes(vocab_of({"<unk>", "a", "<0xC3>", "<0xA9>"}), {}, opt, "test");
  Ids out;
  with_bytes.tokenize("a\u00e9a\u65e5", out);  // é -> its two bytes; 日 has no byte pieces -> <unk>
  EXPECT_EQ(out, (Ids{1, 2, 3, 1, 0}));

  io::BpeModel fused(vocab_of({"<unk>", "a"}), {}, opt, "test");
  out.clear();
  fused.tokenize("a\u65e5\u672ca", out);
  EXPECT_EQ(out, (Ids{1, 0, 1}));
  opt.fuse_unk = false;
  io::BpeModel unfused(vocab_of({"<unk>", "a"}), {}, opt, "test");
  out.clear();
  unfused.tokenize("a\u65e5\u672ca", out);
  EXPECT_EQ(out, (Ids{1, 0, 0, 1}));
}

TEST(BpeModel, IgnoreMergesTakesWholeWords) {
  io::BpeOptions opt;
  opt.ignore_merges = true;
  io::BpeModel m(vocab_of({"a", "b", "c", "ab", "abc"}), {{"a", "b"}}, opt, "test");
  Ids out;
  m.tokenize("abc", out);  // no merge reaches "abc", but it is in the vocabulary
  EXPECT_EQ(out, (Ids{4}));
  out.clear();
  m.tokenize("abcc", out);
  EXPECT_EQ(out, (Ids{3, 2, 2}));
}

TEST(BpeModel, MergeOutsideVocabularyIsFormatError) {
  EXPECT_THROW(io::BpeModel(vocab_of({"a", "b"}), {{"a", "b"}}, {}, "merges.txt"), FormatError);
  io::BpeOptions opt;
  opt.unk_token = "<unk>";
  EXPECT_THROW(io::BpeModel(vocab_of({"a"}), {}, opt, "tokenizer.json"), FormatError);
}

std::vector<std::string> texts(const std::vector<io::Piece>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(p.added_id >= 0 ? "[" + p.text + "]" : p.text);
  return out;
}

TEST(AddedTokens, LeftmostLongestWithStrip) {
  io::AddedToken a{"<a>", 7}, ab{"<a><b>", 8}, m{"<m>", 9};
  m.lstrip = true;
  m.rstrip = true;
  io::AddedTokenMatcher matcher({a.content, ab.content, m.content}, {a, ab, m});
  std::vector<io::Piece> out;
  matcher.split(io::Piece{"x<a><b>y<a>z  <m>  w", -1, true}, out);
  EXPECT_EQ(texts(out), (std::vector<std::string>{"x", "[<a><b>]", "y", "[<a>]", "z", "[  <m>  ]", "w"}));
  EXPECT_TRUE(out[0].at_start);
  EXPECT_FALSE(out[2].at_start);
}

TEST(SplitBehavior, MatchesTokenizersDocumentation) {
  // tokenizers' docs: "the-final--countdown" split on "-".
  const std::string s = "the-final--countdown";
  const std::vector<io::MatchRange> dashes = {{3, 4}, {9, 10}, {10, 11}};
  auto run = [&](io::SplitBehavior b) {
    std::vector<std::string> out;
    for (const auto& [x, y] : io::apply_split_behavior(s.size(), dashes, b, false)) out.push_back(s.substr(x, y - x));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(run(io::SplitBehavior::Removed), (V{"the", "final", "countdown"}));
  EXPECT_EQ(run(io::SplitBehavior::Isolated), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(run(io::SplitBehavior::MergedWithPrevious), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(run(io::SplitBehavior::MergedWithNext), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(run(io::SplitBehavior::Contiguous), (V{"the", "-", "final", "--", "countdown"}));
}

TEST(PreTokenizers, MetaspaceAndByteLevel) {
  auto meta = io::make_metaspace_pre_tokenizer("\u2581", io::PrependScheme::First, true);
  std::vector<io::Piece> out;
  meta->split(io::Piece{"Hey  friend", -1, true}, out);
  EXPECT_EQ(texts(out), (std::vector<std::string>{"\u2581Hey", "\u2581", "\u2581friend"}));
  out.clear();
  meta->split(io::Piece{"later", -1, false}, out);  // "first": only at the start of the text
  EXPECT_EQ(texts(out), (std::vector<std::string>{"later"}));

  auto byte_level = io::make_byte_level_pre_tokenizer(false, true);
  out.clear();
  byte_level->split(io::Piece{"a b\n\u00e9", -1, true}, out);
  EXPECT_EQ(texts(out), (std::vector<std::string>{"a", "\u0120b", "\u010a", "\u00c3\u00a9"}));
}

TEST(Unicode, NfcComposesReordersAndExcludes) {
  EXPECT_EQ(io::nfc("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(io::nfc("\u212b"), "\u00c5");                      // singleton decomposition
  EXPECT_EQ(io::nfc("\u1100\u1161\u11a8"), "\uac01");          // Hangul L V T
  EXPECT_EQ(io::nfc("a\u0301\u0328"), "\u0105\u0301");         // ogonek (202) sorts before acute (230)
  EXPECT_EQ(io::nfc("\u1e0b\u0323"), "\u1e0d\u0307");
  EXPECT_EQ(io::nfc("\u0344"), "\u0308\u0301");                // composition exclusion
  EXPECT_EQ(io::nfc("plain ascii"), "plain ascii");
}

TEST(Unicode, Utf8ValidationAndPythonStrip) {
  EXPECT_FALSE(io::find_invalid_utf8("ok \u00e9\U0001F642").has_value());
  EXPECT_EQ(io::find_invalid_utf8("ab\xC0\x80"), 2u);          // overlong
  EXPECT_EQ(io::find_invalid_utf8("\xED\xA0\x80"), 0u);        // surrogate
  EXPECT_EQ(io::find_invalid_utf8("a\xF4\x90\x80\x80"), 1u);   // above U+10FFFF
  EXPECT_EQ(io::find_invalid_utf8("abc\xE2\x82"), 3u);         // truncated
  EXPECT_EQ(io::python_strip(" \t\x1c a b \u3000\u0085\n"), "a b");
  EXPECT_EQ(io::python_strip("\ufeffa\u200b"), "\ufeffa\u200b");  // not Python whitespace
  EXPECT_EQ(io::python_strip("   "), "");
}

// ---- loaders -------------------------------------------------------------------------------

fs::path gpt2_dir(const std::string& tag) {
  const fs::path dir = test::make_temp_dir(tag);
  write_file(dir / "vocab.json", R"({"h": 0, "e": 1, "he": 2, "\u0120": 3, "\u0120h": 4, "<|endoftext|>": 5, "</s>": 6})");
  write_file(dir / "merges.txt", "#version: 0.2\nh e\n\u0120 h\n");
  return dir;
}

TEST(Gpt2Loader, EncodesAndSplitsSpecialTokens) {
  const fs::path dir = gpt2_dir("gpt2");
  auto tok = io::load_tokenizer(dir);
  EXPECT_EQ(tok->describe(), "gpt2-bpe");
  EXPECT_EQ(tok->encode("he h<|endoftext|>h"), (Ids{2, 4, 5, 0}));
  EXPECT_FALSE(tok->bos_id().has_value());
  EXPECT_THROW(tok->encode("bad \xFF utf8"), FormatError);
  // OPT-style config: BOS "</s>" prepended and split out of the text.
  write_file(dir / "tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "</s>", "eos_token": "</s>",
                                               "unk_token": "</s>"})");
  tok = io::load_tokenizer(dir);
  EXPECT_EQ(tok->bos_id(), 6);
  EXPECT_EQ(tok->encode("he</s>he"), (Ids{6, 2, 6, 2}));
  const Ids plain = tok->encode("<|endoftext|>", false);  // no longer special: plain text
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 5), 0);
}

TEST(Gpt2Loader, Failures) {
  const fs::path dir = gpt2_dir("gpt2bad");
  fs::remove(dir / "merges.txt");
  try {
    io::load_tokenizer(dir);
    FAIL() << "missing merges.txt accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("merges.txt"), std::string::npos) << e.what();
  }
  write_file(dir / "merges.txt", "#version: 0.2\nh e\nthree tokens here\n");
  try {
    io::load_tokenizer(dir);
    FAIL() << "malformed merges accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("merges.txt:3"), std::string::npos) << e.what();
  }
  write_file(dir / "merges.txt", "#version: 0.2\nh x\n");
  EXPECT_THROW(io::load_tokenizer(dir), FormatError);  // merge part not in the vocabulary
  write_file(dir / "merges.txt", "#version: 0.2\nh e\n");
  write_file(dir / "vocab.json", R"({"h": 0, "e": )");
  try {
    io::load_tokenizer(dir);
    FAIL() << "corrupt vocab.json accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("vocab.json"), std::string::npos) << e.what();
  }
  write_file(dir / "vocab.json", R"({"h": 0, "e": "one"})");
  EXPECT_THROW(io::load_tokenizer(dir), FormatError);
}

std::string tokenizer_json(const std::string& model_type, const std::string& normalizer) {
  return R"({"version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": true},
                     {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
    "normalizer": )" + normalizer + R"(,
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": null,
    "model": {"type": ")" + model_type + R"(", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
              "vocab": {"<unk>": 0, "<s>": 1, "\u2581": 2, "a": 3, "b": 4, "\u2581a": 5},
              "merges": [["\u2581", "a"]]}})";
}

const char* kLlamaNormalizer =
    R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                           {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})";

TEST(TokenizerJson, NormalizedAddedTokensAndTemplate) {
  const fs::path dir = test::make_temp_dir("tokjson");
  write_file(dir / "tokenizer.json", tokenizer_json("BPE", kLlamaNormalizer));
  auto tok = io::load_tokenizer(dir);
  EXPECT_EQ(tok->describe(), "tokenizer.json:BPE");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->encode(""), (Ids{1}));
  EXPECT_EQ(tok->encode("a b"), (Ids{1, 5, 2, 4}));
  // "<unk>" is normalized=true: it matches "▁<unk>" in the normalized text, absorbing the space.
  EXPECT_EQ(tok->encode("a <unk>b"), (Ids{1, 5, 0, 4}));
  // "<s>" is not normalized: split from the raw text; each side gets its own "▁" prefix.
  EXPECT_EQ(tok->encode("a<s>b", false), (Ids{5, 1, 2, 4}));
  // Unknown characters without byte pieces: one fused <unk>.
  EXPECT_EQ(tok->encode("\u65e5\u672c", false), (Ids{2, 0}));
}

TEST(TokenizerJson, Failures) {
  const fs::path dir = test::make_temp_dir("tokjsonbad");
  auto expect_format_error = [&](const std::string& content, const std::string& needle) {
    write_file(dir / "tokenizer.json", content);
    try {
      io::load_tokenizer(dir);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const FormatError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("tokenizer.json"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  expect_format_error(tokenizer_json("WordPiece", "null"), "WordPiece");
  expect_format_error(tokenizer_json("BPE", R"({"type": "NFKC"})"), "NFKC");
  expect_format_error(R"({"model": )", "invalid JSON");
  expect_format_error(R"({"version": "1.0"})", "model");
}

TEST(Loader, EmptyDirectoryAndBadSentencePiece) {
  const fs::path dir = test::make_temp_dir("tokempty");
  try {
    io::load_tokenizer(dir);
    FAIL() << "empty directory accepted";
  } catch (const FormatError& e) {
    const std::string what = e.what();
    for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model"}) {
      EXPECT_NE(what.find(name), std::string::npos) << what;
    }
  }
  write_file(dir / "tokenizer.model", "this is not a protobuf");
  try {
    io::load_tokenizer(dir);
    FAIL() << "garbage tokenizer.model accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.model"), std::string::npos) << e.what();
  }
  EXPECT_THROW(io::load_tokenizer(dir / "does-not-exist"), IoError);
}

}  // namespace
}  // namespace latentllm
