// io::TextStream: incremental detokenization by decoding the whole sequence at each token and
// returning the new suffix (O(n) per token, negligible next to a forward pass).
#include <string_view>

#include "latentllm/tokenizer.hpp"

namespace latentllm::io {
namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

TextStream::TextStream(const Tokenizer& tok, std::vector<std::int32_t> prefix)
    : tok_(tok), ids_(std::move(prefix)), prefix_text_(tok.decode(ids_)), full_(prefix_text_) {}

std::string TextStream::push(std::int32_t id) {
  ids_.push_back(id);
  full_ = tok_.decode(ids_);
  const std::size_t done = prefix_text_.size() + emitted_.size();
  std::size_t end = full_.size();
  // Bytes of a character split across tokens decode to U+FFFD until its last byte arrives.
  while (end >= done + kReplacement.size() && 
         std::string_view(full_).substr(end - kReplacement.size(), kReplacement.size()) == kReplacement) {
    end -= kReplacement.size();
  }
  if (end <= done) return {};
  std::string piece = full_.substr(done, end - done);
  emitted_ += piece;
  return piece;
}

std::string TextStream::finish() {
  const std::size_t done = prefix_text_.size() + emitted_.size();
  if (full_.size() <= done) return {};
  std::string piece = full_.substr(done);
  emitted_ += piece;
  return piece;
}

}  // namespace latentllm::io
