// Unicode helpers for the tokenizers and dataset readers: UTF-8 decoding/validation, the whitespace
// sets that Oniguruma (HF tokenizers) and Python use, GPT-2's byte-to-unicode map, and NFC.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace latentllm::io {

// Byte offset of the first invalid UTF-8 sequence in `s` (overlongs, surrogates and code points above
// U+10FFFF are invalid), or nullopt if `s` is valid UTF-8.
std::optional<std::size_t> find_invalid_utf8(std::string_view s);

// Throws FormatError "<origin>: invalid UTF-8 at byte N" if `s` is not valid UTF-8.
void check_utf8(std::string_view s, std::string_view origin);

// Decodes the code point starting at s[i] (s must be valid UTF-8) and advances i past it.
char32_t next_code_point(std::string_view s, std::size_t& i);

// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(std::string& out, char32_t cp);

// Byte length of the UTF-8 sequence whose lead byte is `lead`.
inline std::size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Unicode White_Space, the meaning of \s in Oniguruma and Python `regex` (HF tokenizers' regexes):
// U+0009-000D, U+0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000.
// Notably U+0085 is whitespace and U+FEFF / U+180E are not.
bool is_white_space(char32_t cp);

// Python's str.isspace() (what str.strip() removes): White_Space plus U+001C-001F.
bool is_python_space(char32_t cp);

// Python str.strip() with no argument: removes leading and trailing is_python_space characters.
std::string_view python_strip(std::string_view s);

// GPT-2 bytes_to_unicode(): the printable character (UTF-8 encoded) that byte-level BPE uses for
// each byte value (printable Latin-1 bytes map to themselves, the others to U+0100 + n).
const std::array<std::string, 256>& byte_level_alphabet();

// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical composition,
// UAX #15), using the tables in unicode_nfc_data.cpp. `s` must be valid UTF-8.
std::string nfc(std::string_view s);

// The Unicode version of the NFC tables.
const char* nfc_unicode_version();

}  // namespace latentllm::io
