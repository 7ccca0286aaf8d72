// ScienceQA multiple-choice evaluation of a LLaVA model, as LLaVA-1.5 runs it
// (llava/eval/model_vqa_science.py with --single-pred-prompt and conv-mode vicuna_v1, scored by
// llava/eval/eval_science_qa.py): the data in the official layout (problems.json, pid_splits.json,
// images/<split>/<pid>/<image>), the prompt, the answer parser, two protocols and the accuracy by
// category of the ScienceQA paper (Table 4 of LLaVA). docs/LMM.md describes the protocol.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "latentllm/image.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::eval::scienceqa {

// One problem of problems.json (the fields the evaluation reads).
struct Problem {
  std::string pid;
  std::string question;
  std::vector<std::string> choices;  // 2..5 (letters A..E)
  int answer = 0;                    // index into choices
  std::string hint;                  // "" when there is none
  std::string subject;               // "natural science", "social science", "language science"
  int grade = 0;                     // N of "gradeN"
  std::optional<std::filesystem::path> image;  // the image file, when the problem has one
};

// The problems of `split` (a key of pid_splits.json), in its order, the first max_problems when > 0.
// A problem's image is data/images/<its split field, else split>/<pid>/<image>. Throws IoError for a
// missing problems.json, pid_splits.json or image file, FormatError for a malformed problem, ConfigError
// for a split that is not in pid_splits.json or is empty (docs/ERRORS.md, "ScienceQA evaluation").
std::vector<Problem> load_problems(const std::filesystem::path& data, const std::string& split, int max_problems = 0);

// ConfigError "<dir>/config.json: not a LLaVA checkpoint (expected architectures
// LlavaForConditionalGeneration for --task scienceqa, got X)" unless dir holds one (model::is_llava_config).
void require_llava(const std::filesystem::path& dir);

// The categories a problem counts in: its subject (NAT, SOC, LAN), its context (TXT: hint non-empty,
// IMG: has an image, NO: neither; TXT and IMG may both hold) and its grade (G1-6, G7-12).
std::vector<std::string> categories(const Problem& p);
// The categories in the order of LLaVA's Table 4, then "AVG" (all problems).
const std::vector<std::string>& category_names();

// The user message of model_vqa_science.py's --single-pred-prompt (the prompt is
// model::vicuna_v1_prompt of it): "<image>\n" first when the problem has
// an image, "Context: <hint stripped, or N/A>\nQuestion: <question>\nOptions: (A) c0 (B) c1 ...\nAnswer
// with the option's letter from the given choices directly."
std::string user_message(const Problem& p);
// The user message of LLaVA's own pipeline, byte for byte: the question file's CQM input of
// scripts/convert_sqa_to_llava.py ("Context: <hint stripped, or N/A>\nQuestion: <question>\nOptions: (A)
// c0 (B) c1 ...\n" with every "  " replaced by " " once, as str.replace does, then stripped), then
// model_vqa_science.py's `.replace('<image>', '').strip()`, "<image>\n" first when the problem has an
// image, and "\nAnswer with the option's letter from the given choices directly." appended.
std::string llava_user_message(const Problem& p);
// The protocol generate's parse of a reply (newlines read as ". "): the stripped reply is a letter A..E;
// it starts with "X. "; or it holds "The answer is X". The index of the letter when it is among the
// problem's n_choices options, else -1 (unparsable or out of range: counted wrong).
int parse_answer(std::string_view reply, int n_choices);
// eval_science_qa.py's parse, exactly: the reply is one of A..E; or it is at least 3 characters, its first
// one of A..E and its 2nd and 3rd ". "; or re.findall(r'The answer is ([A-Z]).') finds exactly one match
// (the '.' any character but a newline). Then get_pred_idx: the letter's index when it is among the first
// n_choices of A..E, else -1. Newlines are not rewritten: "A\nB" is -1, "B\nThe answer is C." is C.
int parse_answer_llava(std::string_view reply, int n_choices);

enum class Protocol {
  Llava,     // LLaVA's own: its prompt normalisation, greedy decoding to EOS (at most 1024 tokens), its parser
  Generate,  // greedy decoding of a few tokens (3), stopped at EOS, parsed with newlines read as ". "
  Loglik,    // argmax of the last prompt position's logits over the option letters' token ids
};
Protocol parse_protocol(const std::string& name);  // "llava" | "generate" | "loglik"; ConfigError otherwise
std::string_view protocol_name(Protocol p);
// The reply's length limit of a protocol when --max-new-tokens is not given: LLaVA's 1024
// (model_vqa_science.py's max_new_tokens), 3 for generate (a letter and EOS fit), 0 for loglik.
int default_max_new_tokens(Protocol p);

// The token id a model answers letter L with after "ASSISTANT:": the last token of tokenizing
// "ASSISTANT: L" (a "▁L" / "ĠL" piece where the vocabulary has one, else the bare letter), checked to
// decode to the letter alone. ConfigError when no single token does.
std::vector<std::int32_t> letter_token_ids(const io::Tokenizer& tok, int n_letters = 5);

struct Prediction {
  std::string pid;
  int pred = -1;     // index into choices; -1 = unparsable
  int answer = 0;
  bool correct = false;
  std::string reply;  // the decoded reply (generate), or the letter chosen (loglik)
};

struct Options {
  Protocol protocol = Protocol::Llava;
  // The reply's length limit (llava, generate), 0 for the protocol's default; a reply also stops at any EOS
  // id and where the prompt and reply fill max_position_embeddings.
  int max_new_tokens = 0;
};

struct Result {
  std::vector<Prediction> predictions;
  std::map<std::string, int> correct;  // per category name (category_names), "AVG" = all
  std::map<std::string, int> count;
  int unparsable = 0;
  double seconds = 0;
  // Accuracy in percent of a category; NaN when it has no problem.
  double accuracy(const std::string& category) const;
};

// Called after each problem this process evaluates: i problems done of n, seconds since the start.
// Under K ranks i is the whole run's estimate from this rank's share (its fraction done of its share,
// times n: the ranks go at about one pace), n when the share is done; with one rank it is exact.
using ProgressFn = std::function<void(int i, int n, double seconds)>;

// Runs the evaluation. The image preprocessing is the checkpoint's preprocessor_config.json (`processor`);
// the prompt is BOS + vicuna_v1_prompt(user_message) with "<image>" expanded to the model's
// features per image. Works on any LLaVA checkpoint LlavaModel loads (dense or latent language model).
// Under K ranks (dist) each rank evaluates a contiguous share of the problems (dist::share_of, fixed
// by their number and K), the outcomes are gathered in rank order, and every rank returns the Result of
// all of them in problem order: the same predictions and counts for any K and any thread count (a
// collective: every rank calls it with the same problems). `seconds` is the whole run's time.
Result evaluate(const model::LlavaModel& m, const io::Tokenizer& tok, const image::ProcessorConfig& processor,
                const std::vector<Problem>& problems, const Options& opt, const ProgressFn& progress = {});

// A multimodal calibration set (compress --calib scienceqa; the paper calibrates LLaVA on 64 ScienceQA
// train samples): problems of a split, each prompt (as evaluate builds it) with its image one sequence
// of its own length, for calib::PipelineOptions::lengths and input_embeddings.
struct CalibrationSet {
  std::vector<std::int32_t> ids;  // [Σ lengths] the prompts one after another, image tokens expanded
  std::vector<int> lengths;       // tokens of each
  MatrixF embeddings;             // [Σ lengths, d] the language model's layer-0 input, image features in place
  std::vector<std::string> pids;  // the problems, in the order drawn
  int images = 0;                 // of which with an image
  // Every image's preprocessed tiles, one after another ([tiles, C, S, S]: the vision tower's and the
  // projector's calibration inputs, compress --components), and each sequence's image in them.
  std::vector<float> pixels;
  int tiles = 0;
  struct Image {
    int first_tile = 0, n_tiles = 0;  // none when n_tiles = 0
    int height = 0, width = 0;        // NeXT: the original size
  };
  std::vector<Image> image_of;  // [sequences]
};
// n problems of `split` drawn without replacement by a seeded Fisher-Yates (the same on every platform),
// embedded through m's vision tower and projector (m may hold its language model lazily). ConfigError
// when the split has fewer than n problems; the errors of load_problems.
CalibrationSet calibration_set(const model::LlavaModel& m, const io::Tokenizer& tok,
                               const image::ProcessorConfig& processor, const std::filesystem::path& data,
                               const std::string& split, int n, std::uint64_t seed);
// Recomputes set.embeddings with m's vision tower and projector as they are now (after compress
// --components compressed them: the language model then calibrates on the features it will be given).
void embed_calibration(const model::LlavaModel& m, CalibrationSet& set);

}  // namespace latentllm::eval::scienceqa
