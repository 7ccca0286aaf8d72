// PCRE2 (UTF + UCP, JIT) for the Oniguruma-syntax patterns of Hugging Face tokenizers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace latentllm::io {

// Byte range [first, second) of a match.
using MatchRange = std::pair<std::size_t, std::size_t>;

class Regex {
 public:
  // Compiles `pattern` (Oniguruma / HF tokenizers syntax; literal text when `literal`). \s and \S are
  // rewritten to Unicode White_Space, as Oniguruma means them: PCRE2's UCP \s also matches U+180E.
  // Throws FormatError "<origin>: ..." if the pattern does not compile or uses an unsupported escape.
  Regex(std::string_view pattern, bool literal, const std::string& origin);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every non-overlapping match in `text` (valid UTF-8), left to right, to `out`.
  // Thread-safe (per-call match data).
  void find_all(std::string_view text, std::vector<MatchRange>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The pattern with \s / \S replaced by explicit White_Space classes (exposed for tests).
std::string rewrite_whitespace_classes(std::string_view pattern, const std::string& origin);

}  // namespace latentllm::io
