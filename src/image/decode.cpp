// image::decode_image: the format from the signature, the size limits shared by the decoders.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "image/decoders.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"

namespace latentllm::image {
namespace detail {

void check_image_size(std::int64_t width, std::int64_t height, const std::string& name, std::int64_t max_pixels) {
  if (width <= 0 || width > kMaxImageSide) {
    throw FormatError(fmt::format("{}: image width (expected 1 to {}, got {})", name, kMaxImageSide, width));
  }
  if (height <= 0 || height > kMaxImageSide) {
    throw FormatError(fmt::format("{}: image height (expected 1 to {}, got {})", name, kMaxImageSide, height));
  }
  if (width * height > max_pixels) {
    throw FormatError(fmt::format("{}: image size {}x{} (expected at most {} pixels, got {})", name, width, height,
                                  max_pixels, width * height));
  }
}

}  // namespace detail

namespace {

constexpr std::uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr std::uint8_t kJpegSignature[3] = {0xff, 0xd8, 0xff};  // SOI and the first marker's 0xff

bool starts_with(std::span<const std::uint8_t> bytes, std::span<const std::uint8_t> magic) {
  return bytes.size() >= magic.size() && std::equal(magic.begin(), magic.end(), bytes.begin());
}

// The first bytes of an unrecognised file, in hex, for the error message.
std::string leading_bytes(std::span<const std::uint8_t> bytes) {
  if (bytes.empty()) return "an empty file";
  std::string s;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i) {
    s += fmt::format("{}{:02x}", i ? " " : "", bytes[i]);
  }
  return s;
}

}  // namespace

RgbImage decode_image(std::span<const std::uint8_t> bytes, const std::string& name, std::int64_t max_pixels) {
  if (starts_with(bytes, kPngSignature)) return detail::decode_png(bytes, name, max_pixels);
  if (starts_with(bytes, kJpegSignature)) return detail::decode_jpeg(bytes, name, max_pixels);
  throw FormatError(fmt::format("{}: unknown image format (expected a PNG or JPEG signature, got {})", name,
                                leading_bytes(bytes)));
}

RgbImage load_image(const std::filesystem::path& path) {
  const std::string bytes = core::read_file(path);
  return decode_image(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), path.string());
}

}  // namespace latentllm::image
