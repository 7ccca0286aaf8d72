// The format decoders behind image::decode_image (one file each) and what they share.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "latentllm/image.hpp"

namespace latentllm::image::detail {

// FormatError unless width and height are within kMaxImageSide and their product within max_pixels;
// called from the header, before the pixels are allocated.
void check_image_size(std::int64_t width, std::int64_t height, const std::string& name, std::int64_t max_pixels);

RgbImage decode_png(std::span<const std::uint8_t> bytes, const std::string& name, std::int64_t max_pixels);
RgbImage decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name, std::int64_t max_pixels);

}  // namespace latentllm::image::detail
