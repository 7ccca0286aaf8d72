// A Hugging Face fast tokenizer with a BPE model, run as tokenizers' TokenizerImpl::encode does:
//   1. split added tokens with normalized=false out of the raw text;
//   2. normalize every other piece, then split added tokens with normalized=true out of it (matched
//      against their normalized content, e.g. "<unk>" -> "▁<unk>" under Prepend("▁"));
//   3. pre-tokenize, 4. BPE every word (with a per-call word cache), 5. post-process (special ids
//      around the sequence, e.g. TemplateProcessing "<s> $A").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "io/bpe_model.hpp"
#include "io/hf_decoder.hpp"
#include "io/hf_components.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::io {

struct HfTokenizerParts {
  std::string kind;                          // describe()
  std::vector<AddedToken> added_tokens;
  std::unique_ptr<Normalizer> normalizer;    // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null: the whole piece is one word
  std::unique_ptr<BpeModel> model;
  std::vector<std::int32_t> prefix_ids, suffix_ids;  // added around the ids when add_special_tokens
  std::string origin;                        // the file, for messages
  // decode(): the decoder (null: tokens joined by " ", as tokenizers does without one), or, when the
  // file's decoder is not supported, why (decode() throws it; encoding does not need the decoder).
  std::unique_ptr<Decoder> decoder;
  std::string decoder_error;
};

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(HfTokenizerParts parts);

  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const override;
  std::string describe() const override { return parts_.kind; }
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::optional<std::int32_t> bos_id() const override;
  std::string id_to_token(std::int32_t id) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;

 private:
  std::vector<Piece> split_and_normalize(std::string_view text) const;

  HfTokenizerParts parts_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  // Keyed by id: ids need not be dense, and a file with one id near kMaxTokenId must not cost gigabytes.
  std::unordered_map<std::int32_t, std::string> id_to_token_;
  std::int64_t vocab_size_ = 0;  // largest id + 1
  std::unordered_set<std::int32_t> special_ids_;  // added tokens with special = true (skipped by decode)
};

}  // namespace latentllm::io
