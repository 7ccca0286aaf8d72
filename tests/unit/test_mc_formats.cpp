// The zero-shot task readers (include/latentllm/mc.hpp): each published layout on hand-made lines gives
// the requests lm-eval's task config makes of it (lm_eval/tasks/<task>: doc_to_text, doc_to_choice,
// doc_to_target, target_delimiter " "), auto detection, and the "Zero-shot multiple choice" catalogue.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "errors_doc.hpp"
#include "latentllm/mc.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace mc = eval::mc;
namespace fs = std::filesystem;
using json = nlohmann::json;

mc::Item item(const std::string& line, const std::string& format = "auto") {
  const json doc = json::parse(line);
  return mc::parse_item(doc, format == "auto" ? mc::detect_format(doc) : format, "t.jsonl:1");
}

// The requests of an item: (context, continuation) per alternative.
std::vector<std::pair<std::string, std::string>> requests(const mc::Item& it) {
  std::vector<std::pair<std::string, std::string>> r;
  for (int i = 0; i < it.alternatives(); ++i) r.emplace_back(it.context(i), it.continuation(i));
  return r;
}

TEST(McFormats, Arc) {
  const mc::Item it = item(R"({"id": "x", "question": "Which is a liquid?", "choices": {"text": ["ice", "water", "steam"],
                               "label": ["A", "B", "C"]}, "answerKey": "B"})");
  EXPECT_EQ(mc::detect_format(json::parse(R"({"question": "q", "choices": {}, "answerKey": "A"})")), "arc");
  EXPECT_EQ(requests(it), (std::vector<std::pair<std::string, std::string>>{
                              {"Question: Which is a liquid?\nAnswer:", " ice"},
                              {"Question: Which is a liquid?\nAnswer:", " water"},
                              {"Question: Which is a liquid?\nAnswer:", " steam"}}));
  EXPECT_EQ(it.choices, (std::vector<std::string>{"ice", "water", "steam"}));
  EXPECT_EQ(it.gold, 1);
  // Numeric labels ("1".."4") as some ARC items have.
  EXPECT_EQ(item(R"({"question": "q", "choices": {"text": ["a", "b"], "label": ["1", "2"]}, "answerKey": "2"})").gold, 1);
}

TEST(McFormats, HellaSwag) {
  // ctx = ctx_a + " " + ctx_b.capitalize(); query = preprocess(activity_label + ": " + ctx); endings preprocessed
  // (strip, " [title]" -> ". ", [..] removed, "  " -> " ").
  const mc::Item it = item(R"({"activity_label": "Baking cookies", "ctx_a": "A woman puts flour in a bowl.",
                               "ctx_b": "she THEN", "endings": ["adds eggs [title] and  stirs.", " bakes it. ",
                               "[step] flies away.", "sings."], "label": "1"})");
  EXPECT_EQ(it.context(0), "Baking cookies: A woman puts flour in a bowl. She then");
  EXPECT_EQ(it.choices, (std::vector<std::string>{"adds eggs. and stirs.", "bakes it.", " flies away.", "sings."}));
  EXPECT_EQ(it.continuation(2), "  flies away.");
  EXPECT_EQ(it.gold, 1);
  EXPECT_EQ(item(R"({"activity_label": "a", "ctx_a": "b", "ctx_b": "", "endings": ["x", "y"], "label": 0})").context(0),
            "a: b");
}

TEST(McFormats, Piqa) {
  const mc::Item it = item(R"({"goal": "Dry wet shoes", "sol1": "Stuff them with paper.", "sol2": "Fill them with water.", "label": 0})");
  EXPECT_EQ(requests(it), (std::vector<std::pair<std::string, std::string>>{
                              {"Question: Dry wet shoes\nAnswer:", " Stuff them with paper."},
                              {"Question: Dry wet shoes\nAnswer:", " Fill them with water."}}));
  EXPECT_EQ(it.gold, 0);
}

// Partial scoring: the option goes into the context, the rest of the sentence is the shared continuation.
TEST(McFormats, WinoGrande) {
  const mc::Item it = item(R"({"sentence": "The trophy did not fit in the suitcase because the _ was too big.",
                               "option1": "trophy", "option2": "suitcase", "answer": "1"})");
  EXPECT_EQ(requests(it), (std::vector<std::pair<std::string, std::string>>{
                              {"The trophy did not fit in the suitcase because the trophy", " was too big."},
                              {"The trophy did not fit in the suitcase because the suitcase", " was too big."}}));
  EXPECT_EQ(it.choices, (std::vector<std::string>{"The trophy did not fit in the suitcase because the trophy",
                                                  "The trophy did not fit in the suitcase because the suitcase"}));
  EXPECT_EQ(it.gold, 0);
  EXPECT_EQ(item(R"({"sentence": "_ ran.", "option1": "A", "option2": "B", "answer": "2"})").gold, 1);
}

TEST(McFormats, BoolQ) {
  const std::string ctx = "Water boils at 100 C at sea level.\nQuestion: does water boil at 100 c?\nAnswer:";
  const mc::Item sg = item(R"({"question": "does water boil at 100 c", "passage": "Water boils at 100 C at sea level.", "label": 1})");
  EXPECT_EQ(requests(sg), (std::vector<std::pair<std::string, std::string>>{{ctx, " no"}, {ctx, " yes"}}));
  EXPECT_EQ(sg.gold, 1);
  // google/boolq's layout: answer true / false.
  EXPECT_EQ(item(R"({"question": "q", "passage": "p", "answer": false})").gold, 0);
}

TEST(McFormats, OpenBookQa) {
  const mc::Item it = item(R"({"id": "7", "question_stem": "The sun is responsible for", "choices": {"text":
                               ["puppies learning", "plants sprouting"], "label": ["A", "B"]}, "answerKey": " B"})");
  EXPECT_EQ(requests(it), (std::vector<std::pair<std::string, std::string>>{
                              {"The sun is responsible for", " puppies learning"},
                              {"The sun is responsible for", " plants sprouting"}}));
  EXPECT_EQ(it.gold, 1);  // answerKey.lstrip()
}

TEST(McFormats, GenericAndFiles) {
  const mc::Item it = item(R"({"context": "2 + 2 =", "choices": ["4", "5"], "gold": 0, "target_delimiter": ""})");
  EXPECT_EQ(requests(it), (std::vector<std::pair<std::string, std::string>>{{"2 + 2 =", "4"}, {"2 + 2 =", "5"}}));
  const fs::path f = make_temp_dir("mc-file") / "task.jsonl";
  std::ofstream(f) << R"({"goal": "g1", "sol1": "a", "sol2": "b", "label": 1})" << "\n\n"
                   << R"({"goal": "g2", "sol1": "c", "sol2": "d", "label": 0})" << "\n";
  const auto items = mc::read_items(f);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[1].context(0), "Question: g2\nAnswer:");
  EXPECT_EQ(mc::read_items(f, "piqa", 1).size(), 1u);
}

// The TinyStories task: four choices, the true next sentence among them at the drawn gold position, the
// context the story's first sentences; the same items for the same seed.
TEST(McFormats, TinyStoriesNextSentence) {
  const fs::path f = make_temp_dir("mc-ts") / "stories.txt";
  std::ofstream out(f);
  for (int s = 0; s < 6; ++s) {
    for (int k = 0; k < 5; ++k) out << "Story " << s << " line " << k << (k % 2 ? "! " : ". ");
    out << "\n<|endoftext|>\n";
  }
  out.close();
  const auto items = mc::tinystories_next_sentence(f, 7);
  ASSERT_EQ(items.size(), 6u);
  for (std::size_t s = 0; s < items.size(); ++s) {
    const mc::Item& it = items[s];
    ASSERT_EQ(it.alternatives(), 4);
    EXPECT_EQ(it.context(0), "Story " + std::to_string(s) + " line 0. Story " + std::to_string(s) + " line 1!");
    EXPECT_EQ(it.choices[static_cast<std::size_t>(it.gold)], "Story " + std::to_string(s) + " line 2.");
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(it.choices[static_cast<std::size_t>(i)].ends_with(" line 2."));
      EXPECT_EQ(it.continuation(i), " " + it.choices[static_cast<std::size_t>(i)]);
    }
  }
  const auto again = mc::tinystories_next_sentence(f, 7);
  for (std::size_t s = 0; s < items.size(); ++s) EXPECT_EQ(again[s].choices, items[s].choices);
}

TEST(ErrorsDoc, ZeroShotMultipleChoice) {
  const auto file = [](const std::string& body, const std::string& format = "auto") {
    return lib([=] {
      const fs::path f = make_temp_dir("mc-err") / "task.jsonl";
      std::ofstream(f) << body;
      (void)mc::read_items(f, format);
    });
  };
  const std::string stories = "'" + shared_path("models/stories260K/hf").string() + "'";
  check_section("Zero-shot multiple choice (`latentllm eval --task mc`, `eval::mc`)",
                {
                    {"mc-open", {lib([] { (void)mc::read_items("/nonexistent/task.jsonl"); })}},
                    {"mc-json", {file("{\n")}},
                    {"mc-empty", {file("\n\n")}},
                    {"mc-detect", {file(R"({"text": "x"})")}},
                    {"mc-format", {file("{}", "mmlu")}},
                    {"mc-key", {file(R"({"goal": "g", "sol1": 1, "sol2": "b", "label": 0})"),
                                file(R"({"context": "c", "choices": ["a"], "gold": 0})")}},
                    {"mc-gold", {file(R"({"context": "c", "choices": ["a", "b"], "gold": 2})"),
                                 file(R"({"question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "E"})"),
                                 file(R"({"sentence": "_ x", "option1": "a", "option2": "b", "answer": "3"})")}},
                    {"mc-blank", {file(R"({"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"})")}},
                    {"mc-options", {cli("eval --task mc --model " + stories + " --data x.jsonl --split val"),
                                    cli("eval --task mc --model " + stories + " --data x.jsonl --protocol llava"),
                                    cli("eval --task scienceqa --model " + stories + " --data x --format arc")}},
                    {"mc-prefix", {lib([] {
                       // stories260K's weights with a config without eos_token_id, GPT-2's tokenizer (no BOS).
                       const fs::path dir = make_temp_dir("mc-err-prefix");
                       const fs::path src = shared_path("models/stories260K/hf");
                       json c = json::parse(read_bytes(src / "config.json"));
                       c.erase("eos_token_id");
                       c.erase("bos_token_id");
                       std::ofstream(dir / "config.json") << c.dump();
                       fs::create_symlink(src / "model.safetensors", dir / "model.safetensors");
                       const auto m = model::Model::load(dir);
                       const auto tok = io::load_tokenizer(shared_path("data/tokenizers/gpt2"));
                       (void)mc::encode_pair(*tok, *m, "", " x", {});
                     })}},
                    {"mc-long", {lib([] {
                       const auto m = model::Model::load(shared_path("models/stories260K/hf"));
                       const std::vector<std::int32_t> ctx = {1}, cont(600, 5);
                       (void)mc::loglikelihood(*m, ctx, cont);
                     })}},
                    {"mc-stories", {lib([] {
                       const fs::path f = make_temp_dir("mc-err-ts") / "s.txt";
                       std::ofstream(f) << "One. Two.\n<|endoftext|>\n";
                       (void)mc::tinystories_next_sentence(f);
                     })}},
                });
}

}  // namespace
}  // namespace latentllm::test
