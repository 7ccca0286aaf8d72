// The decoders of Hugging Face tokenizers (tokenizers' Rust crate, src/decoders): how token strings
// become text in tokenizer.decode(ids). Each decoder rewrites the list of token strings
// (decode_chain); the tokenizer joins the final list with "" (HfTokenizer::decode).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace latentllm::io {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// ByteLevel: every character of the joined tokens back to its byte (byte_level_alphabet), the bytes
// as UTF-8 with invalid sequences replaced by U+FFFD (String::from_utf8_lossy); one token out.
std::unique_ptr<Decoder> make_byte_level_decoder();
// Replace: every occurrence of the literal `pattern` in each token by `content`.
std::unique_ptr<Decoder> make_replace_decoder(std::string pattern, std::string content);
// ByteFallback: runs of "<0xHH>" tokens become their bytes when those are valid UTF-8, else one
// U+FFFD per byte token.
std::unique_ptr<Decoder> make_byte_fallback_decoder();
// Fuse: all tokens joined into one.
std::unique_ptr<Decoder> make_fuse_decoder();
// Strip: up to `start` leading and `stop` trailing characters equal to `content` removed from each token.
std::unique_ptr<Decoder> make_strip_decoder(char32_t content, int start, int stop);
// Metaspace: `replacement` -> " " in each token, except in the first, where it is dropped unless the
// prepend scheme is "never" (`strip_first` false).
std::unique_ptr<Decoder> make_metaspace_decoder(std::string replacement, bool strip_first);
std::unique_ptr<Decoder> make_sequence_decoder(std::vector<std::unique_ptr<Decoder>> parts);

// `bytes` as UTF-8, each maximal invalid subsequence replaced by U+FFFD (Rust's from_utf8_lossy,
// Python's errors="replace").
std::string utf8_lossy(std::string_view bytes);

}  // namespace latentllm::io
