// image::decode_data_url: the images of OpenAI chat requests, base64 in a data URL, decoded in memory.
#include <array>
#include <string>

#include <fmt/format.h>

#include "latentllm/error.hpp"
#include "latentllm/image.hpp"

namespace latentllm::image {
namespace {

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The 6-bit value of each character, -1 outside the alphabet.
constexpr std::array<int, 256> decoding_table() {
  std::array<int, 256> t{};
  for (int& v : t) v = -1;
  for (std::size_t i = 0; i < kAlphabet.size(); ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int>(i);
  return t;
}

// What an error message shows of a URL: its start, at most 40 characters.
std::string shown(std::string_view url) {
  constexpr std::size_t kShown = 40;
  return url.size() <= kShown ? fmt::format("\"{}\"", url) : fmt::format("\"{}...\"", url.substr(0, kShown));
}

}  // namespace

std::vector<std::uint8_t> decode_base64(std::string_view text, const std::string& name) {
  static constexpr std::array<int, 256> kTable = decoding_table();
  std::size_t n = text.size();
  while (n > 0 && text.size() - n < 2 && text[n - 1] == '=') --n;  // up to two '=' of padding
  if (n % 4 == 1) {
    throw FormatError(fmt::format("{}: base64 data (expected 4 characters per 3 bytes, got {} characters, one "
                                  "dangling)", name, n));
  }
  std::vector<std::uint8_t> out;
  out.reserve(n / 4 * 3 + 2);
  std::uint32_t acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int v = kTable[static_cast<unsigned char>(text[i])];
    if (v < 0) {
      throw FormatError(fmt::format("{}: base64 data (expected A-Z, a-z, 0-9, + or / before the '=' padding, got "
                                    "byte 0x{:02x} at offset {})", name, static_cast<unsigned char>(text[i]), i));
    }
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>(acc >> bits));
      acc &= (1u << bits) - 1;
    }
  }
  return out;
}

RgbImage decode_data_url(std::string_view url, const std::string& name, std::int64_t max_pixels) {
  constexpr std::string_view kScheme = "data:", kBase64 = ";base64,";
  const std::size_t comma = url.find(',');
  const bool data = url.substr(0, kScheme.size()) == kScheme;
  if (!data || comma == std::string_view::npos || comma < kBase64.size() - 1 ||
      url.substr(comma + 1 - kBase64.size(), kBase64.size()) != kBase64) {
    throw ConfigError(fmt::format("{}: image URL (expected a data URL, data:image/png;base64,... or "
                                  "data:image/jpeg;base64,...; no URL is fetched, got {})", name, shown(url)));
  }
  const std::vector<std::uint8_t> bytes = decode_base64(url.substr(comma + 1), name);
  return decode_image(bytes, name, max_pixels);
}

}  // namespace latentllm::image
