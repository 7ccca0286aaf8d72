// The pipeline stages of a Hugging Face tokenizer (tokenizers' Rust crate semantics): added-token
// splitting, normalizers and pre-tokenizers. tokenizer_json.cpp builds them from tokenizer.json,
// bpe_gpt2.cpp from vocab.json + merges.txt.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/regex.hpp"

namespace latentllm::io {

// A piece of the text on its way through the pipeline (tokenizers' PreTokenizedString split).
struct Piece {
  std::string text;
  std::int32_t added_id = -1;  // >= 0: an added token, final
  bool at_start = false;       // starts at offset 0 of the original text (Metaspace prepend_scheme "first")
};

// One entry of tokenizer.json "added_tokens" (or a GPT-2 special token).
struct AddedToken {
  std::string content;
  std::int32_t id = -1;
  bool special = false;
  bool normalized = false;  // matched in the normalized text, against its normalized content
  bool lstrip = false, rstrip = false;
};

// Splits added tokens out of a piece: leftmost-longest, non-overlapping matches (tokenizers'
// AddedVocabulary::find_matches with an Aho-Corasick LeftmostLongest automaton).
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is matched literally and yields `tokens[i]` (its flags, id).
  AddedTokenMatcher(std::vector<std::string> patterns, std::vector<AddedToken> tokens);
  bool empty() const { return patterns_.empty(); }
  // Appends the pieces of `in` (non-empty ones) to `out`.
  void split(Piece&& in, std::vector<Piece>& out) const;

 private:
  std::vector<std::string> patterns_;
  std::vector<AddedToken> tokens_;
  std::vector<std::vector<std::size_t>> by_first_byte_;  // candidates per first byte, longest first
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the non-empty sub-pieces of `in` (not an added token) to `out`.
  virtual void split(Piece&& in, std::vector<Piece>& out) const = 0;
};

std::unique_ptr<Normalizer> make_sequence_normalizer(std::vector<std::unique_ptr<Normalizer>> parts);
std::unique_ptr<Normalizer> make_prepend_normalizer(std::string prepend);
// `regex` null: replace every occurrence of the literal `pattern`.
std::unique_ptr<Normalizer> make_replace_normalizer(std::string pattern, std::unique_ptr<Regex> regex,
                                                    std::string content);
std::unique_ptr<Normalizer> make_nfc_normalizer();

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class PrependScheme { Always, First, Never };

std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts);
std::unique_ptr<PreTokenizer> make_split_pre_tokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior,
                                                       bool invert);
// Byte-level: optional prefix space, optional GPT-2 regex split, then every byte mapped to its
// printable character (byte_level_alphabet()).
std::unique_ptr<PreTokenizer> make_byte_level_pre_tokenizer(bool add_prefix_space, bool use_regex);
std::unique_ptr<PreTokenizer> make_metaspace_pre_tokenizer(std::string replacement, PrependScheme scheme, bool split);

// The GPT-2 pre-tokenization pattern (tokenizers' ByteLevel regex).
extern const char kGpt2Pattern[];

// Applies `matches` (sorted, non-overlapping byte ranges of `text`) with a split behavior, as
// tokenizers' NormalizedString::split; returns the kept ranges, empty ones dropped.
std::vector<MatchRange> apply_split_behavior(std::size_t text_size, const std::vector<MatchRange>& matches,
                                             SplitBehavior behavior, bool invert);

}  // namespace latentllm::io
