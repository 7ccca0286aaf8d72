#include "io/hf_decoder.hpp"

#include <array>
#include <cstdint>
#include <optional>

#include "io/unicode.hpp"

namespace latentllm::io {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence at s[i], or of its maximal invalid subpart (0 if the lead byte
// itself is invalid): the Unicode "substitution of maximal subparts" practice Rust and Python follow.
std::size_t utf8_sequence(std::string_view s, std::size_t i, bool& valid) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  valid = false;
  if (c < 0x80) {
    valid = true;
    return 1;
  }
  std::size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 1;  // C0, C1, F5..FF, a stray continuation byte
  }
  std::size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) return k;
    const unsigned char x = b(i + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) return k;
  }
  valid = true;
  return need + 1;
}

class ByteLevelDecoder final : public Decoder {
 public:
  ByteLevelDecoder() {
    const auto& alphabet = byte_level_alphabet();
    for (int byte = 0; byte < 256; ++byte) {
      std::size_t i = 0;
      const char32_t cp = next_code_point(alphabet[static_cast<std::size_t>(byte)], i);
      if (cp < inverse_.size()) inverse_[cp] = static_cast<std::int16_t>(byte);
    }
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      // A token with a character outside the byte-level alphabet (an added token's text) is kept as it is.
      std::string mapped;
      bool all = true;
      for (std::size_t i = 0; i < t.size() && all;) {
        const char32_t cp = next_code_point(t, i);
        const std::int16_t byte = cp < inverse_.size() ? inverse_[cp] : -1;
        all = byte >= 0;
        mapped.push_back(static_cast<char>(byte));
      }
      bytes += all ? mapped : t;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }

 private:
  std::array<std::int16_t, 0x200> inverse_ = [] {
    std::array<std::int16_t, 0x200> a{};
    a.fill(-1);
    return a;
  }();
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) decode_one(t);
  }
  void decode_one(std::string& t) const {
    if (pattern_.empty()) return;
    std::string out;
    std::size_t pos = 0;
    for (std::size_t hit; (hit = t.find(pattern_, pos)) != std::string::npos; pos = hit + pattern_.size()) {
      out.append(t, pos, hit - pos).append(content_);
    }
    t = out.append(t, pos, std::string::npos);
  }

 private:
  std::string pattern_, content_;
};

// "<0xHH>" -> the byte.
std::optional<unsigned char> byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int h = hex(t[3]), l = hex(t[4]);
  if (h < 0 || l < 0) return std::nullopt;
  return static_cast<unsigned char>(h * 16 + l);
}

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    std::size_t n_bytes = 0;
    auto flush = [&] {
      if (n_bytes == 0) return;
      if (!find_invalid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (std::size_t i = 0; i < n_bytes; ++i) out.emplace_back(kReplacement);
      }
      bytes.clear();
      n_bytes = 0;
    };
    for (std::string& t : tokens) {
      if (const auto b = byte_token(t)) {
        bytes.push_back(static_cast<char>(*b));
        ++n_bytes;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, int start, int stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::size_t> starts;  // byte offset of each character, then t.size()
      std::vector<char32_t> cps;
      for (std::size_t i = 0; i < t.size();) {
        starts.push_back(i);
        cps.push_back(next_code_point(t, i));
      }
      starts.push_back(t.size());
      std::size_t a = 0, b = cps.size();
      while (a < b && static_cast<int>(a) < start_ && cps[a] == content_) ++a;
      while (b > a && static_cast<int>(cps.size() - b) < stop_ && cps[b - 1] == content_) --b;
      t = t.substr(starts[a], starts[b] - starts[a]);
    }
  }

 private:
  char32_t content_;
  int start_, stop_;
};

// tokenizers' Metaspace::decode_chain: in the first token every replacement character is dropped
// (unless the scheme is "never"), in the others it becomes " ".
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      ReplaceDecoder(replacement_, i == 0 && strip_first_ ? "" : " ").decode_one(tokens[i]);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    bool valid = false;
    const std::size_t n = utf8_sequence(bytes, i, valid);
    if (valid) {
      out.append(bytes.substr(i, n));
    } else {
      out.append(kReplacement);
    }
    i += n;
  }
  return out;
}

std::unique_ptr<Decoder> make_byte_level_decoder() { return std::make_unique<ByteLevelDecoder>(); }
std::unique_ptr<Decoder> make_replace_decoder(std::string pattern, std::string content) {
  return std::make_unique<ReplaceDecoder>(std::move(pattern), std::move(content));
}
std::unique_ptr<Decoder> make_byte_fallback_decoder() { return std::make_unique<ByteFallbackDecoder>(); }
std::unique_ptr<Decoder> make_fuse_decoder() { return std::make_unique<FuseDecoder>(); }
std::unique_ptr<Decoder> make_strip_decoder(char32_t content, int start, int stop) {
  return std::make_unique<StripDecoder>(content, start, stop);
}
std::unique_ptr<Decoder> make_metaspace_decoder(std::string replacement, bool strip_first) {
  return std::make_unique<MetaspaceDecoder>(std::move(replacement), strip_first);
}
std::unique_ptr<Decoder> make_sequence_decoder(std::vector<std::unique_ptr<Decoder>> parts) {
  return std::make_unique<SequenceDecoder>(std::move(parts));
}

}  // namespace latentllm::io
