// The BPE model of Hugging Face tokenizers (models/bpe): vocabulary, ranked merges, unknown-token
// handling (byte_fallback, fuse_unk) and ignore_merges, with the exact merge order of the Rust
// implementation (lowest rank first, leftmost among equal ranks).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace latentllm::io {

// Hash map keyed by std::string that can be queried with a std::string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;  // characters not in the vocabulary become this token
  bool fuse_unk = false;                 // consecutive unknown characters give one unk token
  bool byte_fallback = false;            // unknown characters become <0xNN> byte tokens when all exist
  bool ignore_merges = false;            // a word found whole in the vocabulary is one token (Llama-3)
};

class BpeModel {
 public:
  // `merges` in rank order. Throws FormatError "<origin>: ..." when a merge part or its result is not
  // in the vocabulary, or the unk token is missing.
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
           const std::string& origin);

  // Appends the ids of one pre-tokenized word (valid UTF-8) to `out`.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  const Vocab& vocab() const { return vocab_; }

 private:
  struct Symbol {
    std::int32_t id;
    std::int32_t prev, next;  // neighbour indices, -1 at the ends
    bool removed;
  };
  struct Merge {
    std::int32_t rank, new_id;
  };
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  void initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  void merge_all(std::vector<Symbol>& symbols) const;

  Vocab vocab_;
  std::unordered_map<std::uint64_t, Merge> merges_;  // (left id, right id) -> rank, merged id
  BpeOptions options_;
  std::optional<std::int32_t> unk_id_;
  std::int32_t byte_ids_[256];  // <0xNN> ids for byte_fallback, -1 if absent
};

}  // namespace latentllm::io
