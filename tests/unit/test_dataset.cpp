// Evaluation strings (GPTQ protocol) and JSON-lines calibration documents.
#include <gtest/gtest.h>

#include <fstream>

#include "latentllm/dataset.hpp"
#include "latentllm/error.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;

std::string sha(const std::string& s) { return test::sha256_hex(s.data(), s.size()); }

std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

fs::path write_temp(const std::string& name, const std::string& content) {
  static const fs::path dir = test::make_temp_dir("dataset");
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

// Validation and test halves of blank-line-separated stories: the first half and the rest, each
// joined by "\n\n", and nothing lost or shared between them.
TEST(EvalText, StoryHalvesSplitAtTheMiddleStory) {
  const fs::path f = write_temp("stories.txt", "one a.\nmore.\n\ntwo.\n\nthree.\n\nfour.\n\nfive.\n");
  EXPECT_EQ(io::build_eval_text(io::Dataset::StoriesValid, f), "one a.\nmore.\n\ntwo.");
  EXPECT_EQ(io::build_eval_text(io::Dataset::StoriesTest, f), "three.\n\nfour.\n\nfive.\n");
  const fs::path one = write_temp("one-story.txt", "only one story.\n");
  EXPECT_THROW(io::build_eval_text(io::Dataset::StoriesTest, one), FormatError);
  EXPECT_EQ(io::parse_dataset("tinystories-test"), io::Dataset::StoriesTest);
  EXPECT_EQ(io::dataset_name(io::Dataset::StoriesValid), "tinystories-valid");
}

// The shared file: stories 1–116 (validation, first "Spot. Spot saw the shiny car") and 117–232
// (test), which together are the whole file.
TEST(EvalText, SharedTinyStoriesHalvesAre116StoriesEach) {
  const fs::path f = test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt");
  const std::string valid = io::build_eval_text(io::Dataset::StoriesValid, f);
  const std::string test = io::build_eval_text(io::Dataset::StoriesTest, f);
  const auto stories = [](const std::string& s) {
    std::size_t n = 1;
    for (std::size_t p = s.find("\n\n"); p != std::string::npos; p = s.find("\n\n", p + 2)) ++n;
    return n;
  };
  EXPECT_EQ(stories(valid), 116u);
  EXPECT_EQ(stories(test), 116u);
  EXPECT_EQ(valid.rfind("Spot. Spot saw the shiny car", 0), 0u);
  EXPECT_EQ(valid + "\n\n" + test, io::build_eval_text(io::Dataset::Text, f));
}

// The reference strings of ../shared/data/tokenizers/README.md.
TEST(EvalText, WikiText2MatchesHfRows) {
  const std::string s = io::build_eval_text(io::Dataset::WikiText2, test::shared_path("data/wikitext2/wiki.test.raw"));
  EXPECT_EQ(code_points(s), 1294336u);
  EXPECT_EQ(s.size(), 1296370u);
  EXPECT_EQ(sha(s), "696cca6b65a171b0a358a4be6732cdfdf2dd6164a32e20fd70e3c13fc4dfae83");
}

TEST(EvalText, PtbMatchesStrippedSentences) {
  const std::string s = io::build_eval_text(io::Dataset::PTB, test::shared_path("data/ptb/ptb.valid.txt"));
  EXPECT_EQ(s.size(), 393041u);
  EXPECT_EQ(sha(s), "1f1d25ca87ab412ae012d63a2fe28b14820ea6e64cd51046339e5dbf0361a6c7");
}

TEST(EvalText, C4JoinsTheFirstDocuments) {
  const auto file = test::shared_path("data/c4/c4-train.00000-of-01024.first1000.jsonl");
  const std::string s = io::build_eval_text(io::Dataset::C4, file);
  EXPECT_EQ(code_points(s), 2190456u);
  EXPECT_EQ(sha(s), "409f11b44890b5704864b9a38f4ad419440dfbfd91dd811b53b4e5d3a48a8ae8");
  const auto docs = io::read_jsonl_texts(file, 0);
  ASSERT_EQ(docs.size(), 1000u);
  EXPECT_EQ(docs[0].rfind("Beginners BBQ Class Taking Place in Missoula!", 0), 0u);
  EXPECT_EQ(io::read_jsonl_texts(file, 3).size(), 3u);
}

TEST(EvalText, SmallFilesFollowThePythonConstruction) {
  // wikitext2: rows keep their "\n", whitespace-only rows become "", then "\n\n".join.
  EXPECT_EQ(io::build_eval_text(io::Dataset::WikiText2, write_temp("w.raw", " \n = A = \n \n text \n")),
            "\n\n = A = \n\n\n\n\n text \n");
  // ptb: strip every line (Python text mode: "\r\n" and "\r" end lines too), then " ".join.
  EXPECT_EQ(io::build_eval_text(io::Dataset::PTB, write_temp("p.txt", "  x y \r\n z\rlast")), "x y z last");
  // text: the file as it is.
  EXPECT_EQ(io::build_eval_text(io::Dataset::Text, write_temp("t.txt", "a\r\nb \n")), "a\r\nb \n");
  // c4: at most 1100 documents.
  std::string many;
  for (int i = 0; i < 1105; ++i) many += "{\"text\": \"d" + std::to_string(i) + "\", \"url\": \"u\"}\n";
  const std::string c4 = io::build_eval_text(io::Dataset::C4, write_temp("many.jsonl", many));
  EXPECT_EQ(c4.substr(0, 6), "d0 d1 ");
  EXPECT_EQ(c4.substr(c4.size() - 6), " d1099");
}

// c4-heldout: the last 100 documents, joined as c4; on the shared file the documents 901-1000.
TEST(EvalText, C4HeldoutJoinsTheLastDocuments) {
  std::string many;
  for (int i = 0; i < 130; ++i) many += "{\"text\": \"d" + std::to_string(i) + "\"}\n";
  const std::string held = io::build_eval_text(io::Dataset::C4Heldout, write_temp("held.jsonl", many));
  EXPECT_EQ(held.substr(0, 8), "d30 d31 ");
  EXPECT_EQ(held.substr(held.size() - 5), " d129");
  const auto file = test::shared_path("data/c4/c4-train.00000-of-01024.first1000.jsonl");
  const auto docs = io::read_jsonl_texts(file, 0);
  std::string want = docs[900];
  for (std::size_t i = 901; i < docs.size(); ++i) want += " " + docs[i];
  EXPECT_EQ(io::build_eval_text(io::Dataset::C4Heldout, file), want);
}

TEST(Jsonl, SkipsBlankLinesAndReportsBadLines) {
  const auto ok = write_temp("ok.jsonl", "{\"text\": \"one\"}\n\n  \n{\"text\": \"two \\u00e9\"}\n");
  EXPECT_EQ(io::read_jsonl_texts(ok, 0), (std::vector<std::string>{"one", "two \u00e9"}));
  try {
    io::read_jsonl_texts(write_temp("bad.jsonl", "{\"text\": \"one\"}\n{\"text\": \"two\"}\n{\"text\": oops}\n"), 0);
    FAIL() << "bad JSON accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:3:"), std::string::npos) << e.what();
  }
  try {
    io::read_jsonl_texts(write_temp("notext.jsonl", "{\"body\": \"x\"}\n"), 0);
    FAIL() << "missing text accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("notext.jsonl:1:"), std::string::npos) << e.what();
  }
  EXPECT_THROW(io::read_jsonl_texts(write_temp("num.jsonl", "{\"text\": 3}\n"), 0), FormatError);
}

TEST(EvalText, EmptyInvalidAndMissingFiles) {
  for (io::Dataset d : {io::Dataset::WikiText2, io::Dataset::PTB, io::Dataset::C4, io::Dataset::Text}) {
    try {
      io::build_eval_text(d, write_temp("empty.txt", ""));
      ADD_FAILURE() << "empty file accepted for " << io::dataset_name(d);
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("empty.txt: empty dataset"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(io::build_eval_text(io::Dataset::WikiText2, write_temp("blank.txt", " \n \n")), FormatError);
  EXPECT_THROW(io::build_eval_text(io::Dataset::Text, write_temp("latin1.txt", "caf\xE9\n")), FormatError);
  EXPECT_THROW(io::build_eval_text(io::Dataset::Text, write_temp("x", "") / "missing"), IoError);
}

TEST(Dataset, ParseNames) {
  EXPECT_EQ(io::parse_dataset("wikitext2"), io::Dataset::WikiText2);
  EXPECT_EQ(io::parse_dataset("ptb"), io::Dataset::PTB);
  EXPECT_EQ(io::parse_dataset("c4"), io::Dataset::C4);
  EXPECT_EQ(io::parse_dataset("text"), io::Dataset::Text);
  EXPECT_EQ(io::parse_dataset("c4-heldout"), io::Dataset::C4Heldout);
  for (io::Dataset d : {io::Dataset::WikiText2, io::Dataset::PTB, io::Dataset::C4, io::Dataset::Text,
                        io::Dataset::StoriesValid, io::Dataset::StoriesTest, io::Dataset::C4Heldout}) {
    EXPECT_EQ(io::parse_dataset(io::dataset_name(d)), d);
  }
  EXPECT_THROW(io::parse_dataset("wikitext103"), ConfigError);
}

}  // namespace
}  // namespace latentllm
