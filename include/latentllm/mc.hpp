// Zero-shot multiple choice by lm-evaluation-harness's protocol (`latentllm eval --task mc`): each choice
// is scored by the sum of its continuation tokens' log-likelihood given the context (lm-eval's
// `loglikelihood` requests, HFLM._encode_pair's split of the context's trailing spaces); acc = argmax of
// the sums, acc_norm = argmax of the sums divided by each choice's length in characters (lm-eval's
// `acc_norm`), each with the standard error of the mean (lm-eval's mean_stderr: sample stdev / √n).
// Readers for the published jsonl layouts of ARC, HellaSwag, PIQA, WinoGrande (partial scoring),
// BoolQ and OpenBookQA, written as lm-eval's task configs prompt them, and a next-sentence task built
// from TinyStories stories.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::eval::mc {

// One question: N alternatives, each scored as loglik(continuation | context). The usual item has one
// context and continuation_i = target_delimiter + choice_i; WinoGrande's partial scoring has one context
// per option and the same continuation.
struct Item {
  std::vector<std::string> contexts;       // [N], or [1] shared by every choice
  std::vector<std::string> continuations;  // [N] (delimiter included), or [1] shared by every context
  std::vector<std::string> choices;        // [N] what acc_norm's length counts (lm-eval's doc_to_choice)
  int gold = 0;
  int alternatives() const { return static_cast<int>(choices.size()); }
  std::string context(int i) const { return contexts.size() == 1 ? contexts[0] : contexts[static_cast<std::size_t>(i)]; }
  std::string continuation(int i) const {
    return continuations.size() == 1 ? continuations[0] : continuations[static_cast<std::size_t>(i)];
  }
};

// The layouts `--format` names: generic ({"context", "choices", "gold"[, "target_delimiter"]}), arc, hellaswag,
// piqa, winogrande, boolq, openbookqa; auto picks one from the keys of the first line.
const std::vector<std::string>& format_names();

// The items of a jsonl file in `format` (one JSON object per non-empty line), the first `limit` when > 0.
// FormatError "<file>:<line>: <key> (expected X, got Y)" for a line that is not the layout; ConfigError for
// an unknown format, or an auto format that no layout fits.
std::vector<Item> read_items(const std::filesystem::path& file, std::string format = "auto", int limit = 0);
// One line of a layout (read_items' parser; `where` names it in errors).
Item parse_item(const nlohmann::json& doc, const std::string& format, const std::string& where);
// The layout auto detection would choose for this object ("" when none fits).
std::string detect_format(const nlohmann::json& doc);

// The TinyStories next-sentence task: for each story of the file (stories separated by "<|endoftext|>"
// lines) with at least min_sentences sentences, the context is its first half of sentences (at least two),
// the true continuation its next sentence, and three distractors are sentences at the same position of
// other stories drawn by a seeded Fisher-Yates; the gold position is drawn too (core::uniform_below: the same
// items on every platform). At most `limit` items when > 0.
std::vector<Item> tinystories_next_sentence(const std::filesystem::path& stories, std::uint64_t seed = 1234,
                                            int limit = 0, int min_sentences = 4);

struct Options {
  // lm-eval's add_bos_token model argument: true / false set the tokenizer's special tokens (BOS) on every
  // encoding; unset (HFLM's current default) leaves the tokenizer's own default call, i.e. BOS where the
  // model's tokenizer adds it.
  std::optional<bool> add_bos;
};

struct ItemResult {
  std::vector<double> loglik;  // [N] Σ log p(continuation token | prefix) in double
  std::vector<int> tokens;     // [N] continuation tokens scored
  std::vector<std::vector<std::int32_t>> context_ids, continuation_ids;  // [N] encode_pair's ids
  int pred = 0, pred_norm = 0;
  bool correct = false, correct_norm = false;
};

struct Result {
  std::vector<ItemResult> items;
  double acc = 0, acc_stderr = 0, acc_norm = 0, acc_norm_stderr = 0;
  double seconds = 0;
};

using ProgressFn = std::function<void(int done, int total, double seconds)>;

// lm-eval's _encode_pair: the context's trailing whitespace (str.rstrip) moves to the continuation; the continuation's
// ids are those of encode(context + continuation) after the first len(encode(context)) ids. An empty
// context is the tokenizer's BOS (else EOS) alone, lm-eval's prefix token. Returns {context ids,
// continuation ids}.
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> encode_pair(const io::Tokenizer& tok,
                                                                             const model::Model& m,
                                                                             const std::string& context,
                                                                             const std::string& continuation,
                                                                             const Options& opt);

// Σ log p(continuation | context) of one pair (the last max_position_embeddings + 1 tokens, as lm-eval
// truncates from the left), in double from the model's float logits.
double loglikelihood(const model::Model& m, std::span<const std::int32_t> context,
                     std::span<const std::int32_t> continuation);

// Scores every item; acc and acc_norm with their standard errors (NaN stderr for fewer than 2 items).
Result evaluate(const model::Model& m, const io::Tokenizer& tok, const std::vector<Item>& items, const Options& opt,
                const ProgressFn& progress = {});

}  // namespace latentllm::eval::mc
