// ScienceQA evaluation (eval::scienceqa, `latentllm eval --task scienceqa`) and `latentllm generate --image`
// on ../shared/models/llava-shapes-tiny with ../shared/data/scienceqa-shapes, against the fixture's
// REFERENCE.json (an independent float64 transcription of the HF model and of LLaVA's evaluation): the
// prompts and their token ids, the option letters' ids, LLaVA's answer parser, the accuracy per category of
// both protocols on val and the per-problem answers; and the "Multimodal evaluation" catalogue of
// docs/ERRORS.md.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "errors_doc.hpp"
#include "latentllm/error.hpp"
#include "latentllm/image.hpp"
#include "latentllm/io.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/scienceqa.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
namespace sqa = eval::scienceqa;
using json = nlohmann::json;

fs::path fixture() { return shared_path("models/llava-shapes-tiny"); }
fs::path data() { return shared_path("data/scienceqa-shapes"); }
std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

const json& reference() {
  static const json r = [] {
    std::ifstream in(fixture() / "REFERENCE.json");
    return json::parse(in);
  }();
  return r;
}

const std::vector<sqa::Problem>& val() {
  static const std::vector<sqa::Problem> p = sqa::load_problems(data(), "val");
  return p;
}

const sqa::Problem& problem(const std::string& pid) {
  for (const auto& p : val())
    if (p.pid == pid) return p;
  throw std::runtime_error("no problem " + pid);
}

// stdout of `latentllm <args>` (stderr dropped); fails the test on a non-zero exit status.
std::string run_cli(const std::string& args) {
  std::string out;
  const int rc = run_command(cli_path().string() + " " + args + " 2>/dev/null", out);
  EXPECT_EQ(rc, 0) << args << "\n" << out;
  return out;
}

json eval_json(const std::string& protocol) {
  return json::parse(run_cli("eval --task scienceqa --model " + q(fixture()) + " --data " + q(data()) +
                             " --split val --protocol " + protocol + " --json --quiet"));
}

TEST(ScienceQa, LoadsTheValSplit) {
  ASSERT_EQ(val().size(), 500u);
  const json& counts = reference().at("val").at("counts");
  std::map<std::string, int> n;
  for (const auto& p : val())
    for (const auto& c : sqa::categories(p)) ++n[c];
  for (const auto& [c, v] : counts.items())
    if (c != "all") {
      EXPECT_EQ(n[c], v.get<int>()) << c;
    }
  EXPECT_EQ(val().front().pid, "500001");
  EXPECT_EQ(sqa::load_problems(data(), "val", 7).size(), 7u);
}

// The prompt text and its ids equal the reference's, for an image problem and a text problem.
TEST(ScienceQa, PromptsMatchTheReference) {
  const auto tok = io::load_tokenizer(fixture());
  for (const json& e : reference().at("examples")) {
    const sqa::Problem& p = problem(e.at("pid").get<std::string>());
    const std::string prompt = model::vicuna_v1_prompt(sqa::user_message(p));
    EXPECT_EQ(prompt, e.at("prompt").get<std::string>());
    EXPECT_EQ(tok->encode(model::expand_image_tokens(prompt, 16)),
              e.at("input_ids").get<std::vector<std::int32_t>>()) << p.pid;
  }
}

// Letter ids found from the tokenizer (the fixture has no "▁A" piece: the bare letters).
TEST(ScienceQa, LetterTokenIds) {
  const auto tok = io::load_tokenizer(fixture());
  const auto ids = sqa::letter_token_ids(*tok, 4);
  const json& ref = reference().at("answer_token_ids");
  EXPECT_EQ(ids, (std::vector<std::int32_t>{ref.at("A"), ref.at("B"), ref.at("C"), ref.at("D")}));
}

// Where the vocabulary has a space-prefixed letter (Llama's SentencePiece "▁A", GPT-2's "ĠA"), that is the
// letter the model answers with after "ASSISTANT:".
TEST(ScienceQa, LetterTokenIdsWithSpacePrefixedPieces) {
  io::TokenizerFiles llama;
  llama.sentencepiece_model = shared_path("data/tokenizers/llama2/tokenizer.model");
  io::TokenizerFiles gpt2;
  gpt2.vocab_json = shared_path("data/tokenizers/gpt2/encoder.json");
  gpt2.merges_txt = shared_path("data/tokenizers/gpt2/vocab.bpe");
  const std::vector<std::pair<io::TokenizerFiles, std::string>> cases = {{llama, "\u2581"}, {gpt2, "\u0120"}};
  for (const auto& [files, prefix] : cases) {
    const auto tok = io::load_tokenizer_files(files);
    const auto ids = sqa::letter_token_ids(*tok);
    ASSERT_EQ(ids.size(), 5u);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(tok->id_to_token(ids[i]), prefix + std::string(1, char('A' + i)));
  }
}

// eval_science_qa.py's rules: exact letter, "X. ...", "The answer is X"; a letter past the choices or
// anything else is -1.
TEST(ScienceQa, ParsesRepliesAsLlava) {
  EXPECT_EQ(sqa::parse_answer("A", 3), 0);
  EXPECT_EQ(sqa::parse_answer(" C ", 3), 2);
  EXPECT_EQ(sqa::parse_answer(" C \n", 3), -1);  // "C ." after the newline rule, as LLaVA's
  EXPECT_EQ(sqa::parse_answer("B. a circle", 2), 1);
  EXPECT_EQ(sqa::parse_answer("B\nbecause", 2), 1);  // newline read as ". "
  EXPECT_EQ(sqa::parse_answer("I think. The answer is D.", 4), 3);
  EXPECT_EQ(sqa::parse_answer("The answer is C", 3), 2);
  EXPECT_EQ(sqa::parse_answer("D", 3), -1);
  EXPECT_EQ(sqa::parse_answer("", 3), -1);
  EXPECT_EQ(sqa::parse_answer("a", 3), -1);
  EXPECT_EQ(sqa::parse_answer("AB", 3), -1);
  EXPECT_EQ(sqa::parse_answer("B.", 3), -1);  // "X. " needs the space, as LLaVA's
}

TEST(ScienceQa, PromptOfATextProblemHasNoImage) {
  sqa::Problem p;
  p.question = "Which is a colour?";
  p.choices = {"red", "cup"};
  p.hint = "  The ball is red. ";
  EXPECT_EQ(sqa::user_message(p), "Context: The ball is red.\nQuestion: Which is a colour?\nOptions: (A) red (B) cup\n"
                                  "Answer with the option's letter from the given choices directly.");
  p.hint = "";
  EXPECT_NE(sqa::user_message(p).find("Context: N/A\n"), std::string::npos);
  EXPECT_EQ(model::expand_image_tokens("a<image>b<image>", 2), "a<image><image>b<image><image>");
}

// The target: both protocols reproduce REFERENCE.json's accuracy in every category and the examples'
// answers.
void expect_reference_accuracy(const json& r, const json& ref_acc, const std::string& what) {
  const json& ref = reference().at("val");
  EXPECT_EQ(r.at("problem_count"), 500);
  EXPECT_EQ(r.at("unparsable"), 0);
  for (const auto& [c, v] : ref_acc.items()) {
    const std::string key = c == "all" ? "AVG" : c;
    EXPECT_NEAR(r.at("accuracy_percent").at(key).get<double>(), v.get<double>(), 0.005) << what << " " << c;
    EXPECT_EQ(r.at("counts").at(key), ref.at("counts").at(c)) << c;
  }
  std::map<std::string, json> preds;
  for (const json& p : r.at("predictions")) preds[p.at("pid")] = p;
  EXPECT_EQ(preds.size(), 500u);
  for (const json& e : reference().at("examples")) {
    const json& p = preds.at(e.at("pid").get<std::string>());
    const int letter = e.at("dense_prediction").get<std::string>()[0] - 'A';
    EXPECT_EQ(p.at("pred"), letter) << what << " " << e.at("pid");
    EXPECT_EQ(p.at("correct"), letter == p.at("answer").get<int>());
  }
  EXPECT_GT(r.at("problems_per_s").get<double>(), 0);
}

TEST(ScienceQaCli, LoglikMatchesTheReference) {
  const json r = eval_json("loglik");
  EXPECT_EQ(r.at("protocol"), "loglik");
  EXPECT_EQ(r.at("task"), "scienceqa");
  expect_reference_accuracy(r, reference().at("val").at("dense_accuracy"), "loglik");
}

// LLaVA's own protocol, the default: the fixture answers with one letter and EOS, so the reply to EOS,
// the normalised prompt (the fixture's problems have no doubled spaces) and the upstream parser give the
// reference's greedy figures.
TEST(ScienceQaCli, LlavaProtocolMatchesTheReference) {
  const json r = json::parse(run_cli("eval --task scienceqa --model " + q(fixture()) + " --data " + q(data()) +
                                     " --split val --json --quiet"));
  EXPECT_EQ(r.at("protocol"), "llava");
  expect_reference_accuracy(r, reference().at("val").at("greedy_accuracy"), "llava");
}

// The two ways a checkpoint asks for LLaVA's pad to square (config.json image_aspect_ratio "pad", llava-hf's
// LlavaImageProcessor do_pad) give the same predictions; the fixture's non-square images then change.
TEST(ScienceQaCli, PadToSquareFromEitherFile) {
  const auto copy = [](const std::string& tag, const json& config_edits, const json& processor_edits) {
    const fs::path dir = make_temp_dir(tag);
    for (const auto& e : fs::directory_iterator(fixture()))
      if (e.path().filename() != "config.json" && e.path().filename() != "preprocessor_config.json")
        fs::create_symlink(e.path(), dir / e.path().filename());
    json c = json::parse(read_bytes(fixture() / "config.json")), p = json::parse(read_bytes(fixture() / "preprocessor_config.json"));
    for (const auto& [k, v] : config_edits.items()) c[k] = v;
    for (const auto& [k, v] : processor_edits.items()) p[k] = v;
    std::ofstream(dir / "config.json") << c.dump();
    std::ofstream(dir / "preprocessor_config.json") << p.dump();
    return dir;
  };
  const auto replies = [](const fs::path& dir) {
    const json r = json::parse(run_cli("eval --task scienceqa --model " + q(dir) + " --data " + q(data()) +
                                       " --split val --protocol loglik --max-problems 80 --json --quiet"));
    std::vector<int> preds;
    for (const json& p : r.at("predictions")) preds.push_back(p.at("pred"));
    return preds;
  };
  const auto by_config = replies(copy("sqa-pad-config", {{"image_aspect_ratio", "pad"}}, json::object()));
  const auto by_processor =
      replies(copy("sqa-pad-hf", json::object(), {{"image_processor_type", "LlavaImageProcessor"}, {"do_pad", true}}));
  EXPECT_EQ(by_config, by_processor);
  EXPECT_NE(by_config, replies(fixture()));  // the fixture was trained on unpadded images: padding changes answers
  EXPECT_EQ(replies(copy("sqa-pad-off", json::object(), {{"image_processor_type", "LlavaImageProcessor"}})),
            replies(fixture()));
}

TEST(ScienceQaCli, GenerateMatchesTheReference) {
  const json r = eval_json("generate");
  expect_reference_accuracy(r, reference().at("val").at("greedy_accuracy"), "generate");
  for (const json& e : reference().at("examples")) {
    for (const json& p : r.at("predictions"))
      if (p.at("pid") == e.at("pid")) {
        EXPECT_EQ(p.at("reply"), e.at("greedy_text"));
      }
  }
}

TEST(ScienceQaCli, PrintsTheTable) {
  const std::string out = run_cli("eval --task scienceqa --model " + q(fixture()) + " --data " + q(data()) +
                                  " --protocol loglik --max-problems 20 --quiet");
  expect_contains(out, {"NAT", "SOC", "LAN", "TXT", "IMG", "NO", "G1-6", "G7-12", "Avg", "20 problems"});
}

// The fixture with one more language-model tensor than its config uses: refused, and evaluated unchanged
// with --allow-unused-tensors (the option reaches the LLaVA loader).
TEST(ScienceQaCli, AllowUnusedTensorsReachesTheLoader) {
  const fs::path dir = make_temp_dir("sqa-unused");
  for (const auto& f : fs::directory_iterator(fixture()))
    if (f.path().filename() != "model.safetensors") fs::copy_file(f.path(), dir / f.path().filename());
  const io::SafetensorsFile src(fixture() / "model.safetensors");
  std::vector<std::vector<float>> values;
  std::vector<io::TensorToWrite> out;
  values.reserve(src.tensors().size() + 1);
  for (const TensorView& t : src.tensors()) {
    values.push_back(t.to_f32());
    out.push_back({t.name, t.dtype, t.shape, values.back()});
  }
  values.push_back(std::vector<float>(4, 0.5f));
  out.push_back({"language_model.model.layers.2.mlp.up_proj.weight", DType::F32, {4}, values.back()});
  io::write_safetensors(dir / "model.safetensors", out);
  const std::string args = "eval --task scienceqa --data " + q(data()) + " --max-problems 40 --protocol loglik --json";
  std::string refused;
  EXPECT_EQ(run_command(cli_path().string() + " " + args + " --model " + q(dir), refused), 1);
  expect_contains(refused, {"stored tensors not used", "--allow-unused-tensors"});
  const json a = json::parse(run_cli(args + " --quiet --allow-unused-tensors --model " + q(dir)));
  const json b = json::parse(run_cli(args + " --quiet --model " + q(fixture())));
  EXPECT_EQ(a.at("accuracy_percent"), b.at("accuracy_percent"));
}

// `generate --image` with a val problem's image and user message gives the reference's greedy tokens;
// --raw-prompt with the whole prompt gives the same; a text-only problem needs no image.
TEST(GenerateImage, GreedyAnswerMatchesTheReference) {
  for (const json& e : reference().at("examples")) {
    const sqa::Problem& p = problem(e.at("pid").get<std::string>());
    std::string message = sqa::user_message(p);
    std::string image;
    if (p.image) {
      message = message.substr(std::string("<image>\n").size());  // the template puts it first
      image = " --image " + q(*p.image);
    }
    const fs::path prompt_file = make_temp_dir("gen-image") / "prompt.txt";
    std::ofstream(prompt_file) << message;
    const std::string common = "generate --model " + q(fixture()) + image +
                               " --temperature 0 --max-new-tokens 3 --json --quiet --prompt \"$(cat " +
                               q(prompt_file) + ")\"";
    const json r = json::parse(run_cli(common));
    EXPECT_EQ(r.at("prompt_tokens"), e.at("input_ids")) << p.pid;
    EXPECT_EQ(r.at("tokens"), e.at("greedy_tokens")) << p.pid;
    EXPECT_EQ(r.at("text"), e.at("greedy_text")) << p.pid;
    std::ofstream(prompt_file) << e.at("prompt").get<std::string>();
    const json raw = json::parse(run_cli(common + " --raw-prompt"));
    EXPECT_EQ(raw.at("tokens"), e.at("greedy_tokens")) << p.pid;
  }
}

// Several --image: one placeholder each, in order, as the library's prefill takes several images; the
// template and --raw-prompt give the same prompt, and the greedy tokens are the library's.
TEST(GenerateImage, SeveralImagesOnePlaceholderEach) {
  const fs::path a = data() / "images" / "val" / "500007" / "image.png";
  const fs::path b = data() / "images" / "val" / "500003" / "image.png";
  const std::string common = "generate --model " + q(fixture()) + " --image " + q(a) + " --image " + q(b) +
                             " --temperature 0 --max-new-tokens 3 --json --quiet ";
  const json r = json::parse(run_cli(common + "--prompt 'Which picture has more shapes?'"));
  EXPECT_EQ(r.at("images"), json::array({a.string(), b.string()}));
  const model::LlavaModel lm = model::LlavaModel::load(fixture());
  const auto ids = r.at("prompt_tokens").get<std::vector<std::int32_t>>();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), static_cast<std::int32_t>(lm.config().image_token_index)),
            2 * lm.config().features_per_image());
  const auto processor = image::load_processor_config(fixture() / "preprocessor_config.json");
  const std::vector<float> pa = image::preprocess(image::load_image(a), processor).data;
  const std::vector<float> pb = image::preprocess(image::load_image(b), processor).data;
  const std::vector<model::ImageInput> images = {{pa, 1, 0, 0}, {pb, 1, 0, 0}};
  const auto eos = static_cast<std::int32_t>(lm.config().text.eos_token_id.value_or(-1));
  EXPECT_EQ(r.at("tokens").get<std::vector<std::int32_t>>(), lm.generate_greedy(ids, images, 3, eos));
  const std::string raw = model::vicuna_v1_prompt("<image>\n<image>\nWhich picture has more shapes?");
  const fs::path prompt_file = make_temp_dir("gen-images") / "prompt.txt";
  std::ofstream(prompt_file) << raw;
  const json rr = json::parse(run_cli(common + "--raw-prompt --prompt \"$(cat " + q(prompt_file) + ")\""));
  EXPECT_EQ(rr.at("prompt_tokens"), r.at("prompt_tokens"));
  EXPECT_EQ(rr.at("tokens"), r.at("tokens"));
}

// ---- docs/ERRORS.md ----------------------------------------------------------------------------------

// A ScienceQA folder with one problem (pid "1", split val) changed by `edit`, and an empty test split.
fs::path data_with(const std::function<void(json&)>& edit, bool with_image_file = false) {
  const fs::path dir = make_temp_dir("sqa-data");
  json p = {{"question", "Which?"}, {"choices", {"a", "b"}}, {"answer", 1}, {"hint", ""}, {"image", nullptr},
            {"grade", "grade2"}, {"subject", "natural science"}, {"split", "val"}};
  edit(p);
  std::ofstream(dir / "problems.json") << json{{"1", p}}.dump();
  std::ofstream(dir / "pid_splits.json") << json{{"train", json::array()}, {"val", {"1"}}, {"test", json::array()}};
  if (with_image_file) {
    fs::create_directories(dir / "images" / "val" / "1");
    fs::copy_file(data() / "images" / "val" / "500007" / "image.png", dir / "images" / "val" / "1" / "image.png");
  }
  return dir;
}

CaseFn load(const fs::path& dir, const std::string& split = "val") {
  return lib([dir, split] { (void)sqa::load_problems(dir, split); });
}

CaseFn eval_cli(const std::string& args) {
  return cli("eval --task scienceqa --model " + q(fixture()) + " --data " + q(data()) + " " + args);
}

TEST(ErrorsDoc, MultimodalEvaluation) {
  const fs::path no_problems = data_with([](json&) {});
  fs::remove(no_problems / "problems.json");
  const fs::path no_splits = data_with([](json&) {});
  fs::remove(no_splits / "pid_splits.json");
  const fs::path bad_pid = data_with([](json&) {});
  std::ofstream(bad_pid / "pid_splits.json") << R"({"val": ["2"]})";
  const std::string image = " --image " + q(data() / "images" / "val" / "500007" / "image.png");
  check_section(
      "Multimodal evaluation (`latentllm eval`, `eval::scienceqa`, `latentllm generate --image`)",
      {
          {"sqa-files", {load(no_problems), load(no_splits)}},
          {"sqa-split", {load(data(), "holdout")}},
          {"sqa-split-empty", {load(data(), "test")}},
          {"sqa-pid", {load(bad_pid)}},
          {"sqa-problem",
           {load(data_with([](json& p) { p["choices"] = {"only"}; })),
            load(data_with([](json& p) { p["answer"] = 2; })),
            load(data_with([](json& p) { p["grade"] = "grade13"; })),
            load(data_with([](json& p) { p.erase("question"); }))}},
          {"sqa-image", {load(data_with([](json& p) { p["image"] = "image.png"; }))}},
          {"sqa-not-llava", {cli("eval --task scienceqa --model " + q(shared_path("models/stories260K/hf")) +
                                 " --data " + q(data()))}},
          {"sqa-protocol", {lib([] { (void)sqa::parse_protocol("mc"); })}},
          {"sqa-budget", {eval_cli("--max-memory 100M")}},
          {"sqa-options", {eval_cli("--max-problems=-1"), eval_cli("--protocol generate --max-new-tokens 0"),
                           eval_cli("--protocol loglik --max-new-tokens 5")}},
          {"gen-image-model",
           {cli("generate --model " + q(shared_path("models/stories260K/hf")) + image + " --prompt hi")}},
          {"gen-image-placeholders",
           {cli("generate --model " + q(fixture()) + image + " --raw-prompt --prompt hi"),
            cli("generate --model " + q(fixture()) + image + " --prompt '<image> hi'")}},
      });
  // A problem with its image file evaluates (the error above is the file's absence alone).
  EXPECT_EQ(sqa::load_problems(data_with([](json& p) { p["image"] = "image.png"; }, true), "val").size(), 1u);
}

}  // namespace
}  // namespace latentllm::test
