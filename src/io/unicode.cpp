#include "io/unicode.hpp"

#include <fmt/format.h>

#include "latentllm/error.hpp"

namespace latentllm::io {

std::optional<std::size_t> find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    char32_t cp, min_cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F, min_cp = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F, min_cp = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07, min_cp = 0x10000;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}

void check_utf8(std::string_view s, std::string_view origin) {
  if (auto bad = find_invalid_utf8(s)) {
    throw FormatError(fmt::format("{}: invalid UTF-8 at byte {}", origin, *bad));
  }
}

char32_t next_code_point(std::string_view s, std::size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char c = p[i];
  if (c < 0x80) {
    ++i;
    return c;
  }
  const std::size_t len = utf8_length(c);
  char32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
  i += len;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_white_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_python_space(char32_t cp) { return is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string_view python_strip(std::string_view s) {
  std::size_t begin = 0, end = s.size();
  while (begin < end) {
    std::size_t i = begin;
    if (!is_python_space(next_code_point(s, i))) break;
    begin = i;
  }
  while (end > begin) {
    std::size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    std::size_t i = start;
    if (!is_python_space(next_code_point(s, i))) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

const std::array<std::string, 256>& byte_level_alphabet() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(t[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

}  // namespace latentllm::io
