// LLaVA's ScienceQA protocol (`eval --protocol llava`) where it differs from the earlier one (`generate`):
// each divergence with the example that shows it, the upstream outcome from LLaVA's own code
// (llava/eval/eval_science_qa.py, scripts/convert_sqa_to_llava*.py, llava/eval/model_vqa_science.py,
// llava/mm_utils.py), and which preprocessing pads the image to a square.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "latentllm/image.hpp"
#include "latentllm/scienceqa.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace sqa = eval::scienceqa;
namespace fs = std::filesystem;

// eval_science_qa.py rewrites no newline: "A\nB" is neither a letter nor "X. ", and has no
// "The answer is": FAILED (-1); the earlier parser read the newline as ". " and took A.
TEST(ScienceQaLlava, ParserNewlineIsNotASentenceEnd) {
  EXPECT_EQ(sqa::parse_answer_llava("A\nB", 3), -1);
  EXPECT_EQ(sqa::parse_answer("A\nB", 3), 0);
}

// "B\nThe answer is C.": not "B. " (the 2nd and 3rd characters are "\nT"), so the regex decides: C.
TEST(ScienceQaLlava, ParserAnswerIsAfterANewline) {
  EXPECT_EQ(sqa::parse_answer_llava("B\nThe answer is C.", 3), 2);
  EXPECT_EQ(sqa::parse_answer("B\nThe answer is C.", 3), 1);
}

// r'The answer is ([A-Z]).' needs one more character after the letter: "The answer is C" at the end of
// the reply does not match.
TEST(ScienceQaLlava, ParserAnswerIsNeedsACharacterAfter) {
  EXPECT_EQ(sqa::parse_answer_llava("The answer is C", 3), -1);
  EXPECT_EQ(sqa::parse_answer("The answer is C", 3), 2);
  EXPECT_EQ(sqa::parse_answer_llava("The answer is C.", 3), 2);
  EXPECT_EQ(sqa::parse_answer_llava("The answer is C\n", 3), -1);  // '.' is any character but a newline
}

// len(findall(...)) must be 1: two matches are FAILED upstream, the first one earlier.
TEST(ScienceQaLlava, ParserTwoAnswersAreUnparsable) {
  EXPECT_EQ(sqa::parse_answer_llava("The answer is A. The answer is B.", 3), -1);
  EXPECT_EQ(sqa::parse_answer("The answer is A. The answer is B.", 3), 0);
}

// The rest of the parser: a bare letter, "X. ", get_pred_idx's range over the problem's choices, [A-Z].
TEST(ScienceQaLlava, ParserLettersAndRange) {
  EXPECT_EQ(sqa::parse_answer_llava("B", 2), 1);
  EXPECT_EQ(sqa::parse_answer_llava("C", 2), -1);           // not among options[:len(choices)]
  EXPECT_EQ(sqa::parse_answer_llava("A. Because", 4), 0);
  EXPECT_EQ(sqa::parse_answer_llava("A.", 4), -1);          // shorter than 3 characters and not a letter
  EXPECT_EQ(sqa::parse_answer_llava("The answer is F.", 5), -1);  // [A-Z] matches, F is no option
  EXPECT_EQ(sqa::parse_answer_llava("b", 2), -1);
  EXPECT_EQ(sqa::parse_answer_llava("", 2), -1);
}

sqa::Problem problem(std::string hint, std::string question, std::vector<std::string> choices, bool image) {
  sqa::Problem p;
  p.pid = "1";
  p.hint = std::move(hint);
  p.question = std::move(question);
  p.choices = std::move(choices);
  if (image) p.image = "images/test/1/image.png";
  return p;
}

// The question file's input is `input.replace("  ", " ").strip()` (one pass, as str.replace does), then
// model_vqa_science.py strips it again after removing "<image>". The expected messages are what LLaVA's
// own functions (create_one_example_chatbot, then model_vqa_science.py's steps) give for these problems.
TEST(ScienceQaLlava, PromptNormalisation) {
  const sqa::Problem p = problem("  ", "Which  is   bigger?  ", {"a  cat", "a dog "}, true);
  EXPECT_EQ(sqa::llava_user_message(p),
            "<image>\nContext: N/A\nQuestion: Which is  bigger? \nOptions: (A) a cat (B) a dog\n"
            "Answer with the option's letter from the given choices directly.");
  // The earlier protocol kept the doubled spaces and the option's trailing space.
  EXPECT_EQ(sqa::user_message(p),
            "<image>\nContext: N/A\nQuestion: Which  is   bigger?  \nOptions: (A) a  cat (B) a dog \n"
            "Answer with the option's letter from the given choices directly.");
  // A clean problem gives the same message under both.
  const sqa::Problem q = problem("A hint.", "Which is bigger?", {"cat", "dog"}, false);
  EXPECT_EQ(sqa::llava_user_message(q), sqa::user_message(q));
  // A literal <image> in the text is removed as model_vqa_science.py's replace does, after the spaces were
  // normalised: its two neighbours stay.
  const sqa::Problem r = problem("", "Look at <image> here", {"x", "y"}, false);
  EXPECT_EQ(sqa::llava_user_message(r), "Context: N/A\nQuestion: Look at  here\nOptions: (A) x (B) y\n"
                                        "Answer with the option's letter from the given choices directly.");
}

TEST(ScienceQaLlava, Protocols) {
  EXPECT_EQ(sqa::parse_protocol("llava"), sqa::Protocol::Llava);
  EXPECT_EQ(sqa::protocol_name(sqa::Protocol::Llava), "llava");
  EXPECT_EQ(sqa::default_max_new_tokens(sqa::Protocol::Llava), 1024);  // model_vqa_science.py's max_new_tokens
  EXPECT_EQ(sqa::default_max_new_tokens(sqa::Protocol::Generate), 3);
  EXPECT_EQ(sqa::Options{}.protocol, sqa::Protocol::Llava);
}

// A checkpoint directory with the fixture's preprocessor_config.json edited and config.json given.
fs::path checkpoint(const std::string& tag, const nlohmann::json& processor_edits, const nlohmann::json& config) {
  const fs::path dir = make_temp_dir(tag);
  nlohmann::json pp = nlohmann::json::parse(read_bytes(shared_path("models/llava-shapes-tiny/preprocessor_config.json")));
  for (const auto& [k, v] : processor_edits.items()) pp[k] = v;
  std::ofstream(dir / "preprocessor_config.json") << pp.dump();
  std::ofstream(dir / "config.json") << config.dump();
  return dir;
}

// mm_utils.process_images pads when config.json says image_aspect_ratio "pad" (LLaVA's own checkpoints);
// llava-hf's LlavaImageProcessor pads when do_pad; CLIPImageProcessor never does.
TEST(ScienceQaLlava, PadToSquareFromTheCheckpoint) {
  using nlohmann::json;
  const json llava = {{"architectures", {"LlavaForConditionalGeneration"}}};
  EXPECT_FALSE(image::load_checkpoint_processor(checkpoint("pad-none", json::object(), llava)).pad_to_square);
  json pad = llava;
  pad["image_aspect_ratio"] = "pad";
  EXPECT_TRUE(image::load_checkpoint_processor(checkpoint("pad-config", json::object(), pad)).pad_to_square);
  json square = llava;
  square["image_aspect_ratio"] = "square";
  EXPECT_FALSE(image::load_checkpoint_processor(checkpoint("pad-square", json::object(), square)).pad_to_square);
  const json hf = {{"image_processor_type", "LlavaImageProcessor"}, {"do_pad", true}};
  EXPECT_TRUE(image::load_checkpoint_processor(checkpoint("pad-hf", hf, llava)).pad_to_square);
  const json hf_off = {{"image_processor_type", "LlavaImageProcessor"}, {"do_pad", false}};
  EXPECT_FALSE(image::load_checkpoint_processor(checkpoint("pad-hf-off", hf_off, llava)).pad_to_square);
  const json clip = {{"do_pad", true}};  // not a CLIPImageProcessor key
  EXPECT_FALSE(image::load_checkpoint_processor(checkpoint("pad-clip", clip, llava)).pad_to_square);

  // Padding is expand2square with the mean colour int(mean · 255) = (122, 116, 104), then CLIP's steps.
  image::RgbImage img{3, 5, {}};
  for (int i = 0; i < 3 * 5 * 3; ++i) img.data.push_back(static_cast<std::uint8_t>(i * 5));
  image::ProcessorConfig c = image::load_checkpoint_processor(checkpoint("pad-hf2", hf, llava));
  image::ProcessorConfig plain = c;
  plain.pad_to_square = false;
  EXPECT_EQ(image::preprocess(img, c).data, image::preprocess(image::expand_to_square(img, {122, 116, 104}), plain).data);
  EXPECT_NE(image::preprocess(img, c).data, image::preprocess(img, plain).data);
}

}  // namespace
}  // namespace latentllm::test
