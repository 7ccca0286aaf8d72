// CLIPImageProcessor.preprocess, the slow PIL path of transformers (image_processing_clip.py,
// image_transforms.py), step by step in the same dtypes: uint8 through resize and crop, float64 for
// the rescale cast to float32, float32 for the normalisation.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "latentllm/error.hpp"
#include "latentllm/image.hpp"

namespace latentllm::image {

std::pair<int, int> resize_output_size(int height, int width, const ProcessorConfig& config) {
  if (config.shortest_edge == 0) return {config.size_height, config.size_width};
  const int s = config.shortest_edge;
  const bool portrait = width <= height;
  const std::int64_t short_side = portrait ? width : height;
  const std::int64_t long_side = portrait ? height : width;
  // Python's int(s * long / short): an exact integer product, a true division, truncation.
  const int new_long = static_cast<int>(static_cast<double>(s * long_side) / static_cast<double>(short_side));
  return portrait ? std::pair{new_long, s} : std::pair{s, new_long};
}

RgbImage center_crop(const RgbImage& in, int height, int width) {
  // Padding needed only when the image is smaller: ceil(pad / 2) before, so that the crop offsets
  // (H − h) // 2 (floor, negative) plus the padding come to 0 on a padded side.
  const int pad_top = height > in.height ? (height - in.height + 1) / 2 : 0;
  const int pad_left = width > in.width ? (width - in.width + 1) / 2 : 0;
  const int top = pad_top > 0 ? 0 : (in.height - height) / 2;
  const int left = pad_left > 0 ? 0 : (in.width - width) / 2;
  RgbImage out;
  out.height = height;
  out.width = width;
  out.data.assign(std::size_t(height) * width * 3, 0);
  for (int y = 0; y < height; ++y) {
    const int sy = y + top - pad_top;  // source row, outside the image in the padding
    if (sy < 0 || sy >= in.height) continue;
    for (int x = 0; x < width; ++x) {
      const int sx = x + left - pad_left;
      if (sx >= 0 && sx < in.width) std::memcpy(out.pixel(y, x), in.pixel(sy, sx), 3);
    }
  }
  return out;
}

RgbImage expand_to_square(const RgbImage& in, std::array<std::uint8_t, 3> fill) {
  if (in.height == in.width) return in;
  const int s = std::max(in.height, in.width);
  if (std::int64_t{s} * s > kMaxImagePixels) {
    throw ConfigError(fmt::format("image {}x{}: padded to a square of {}x{} (expected at most {} pixels, got {})",
                                  in.width, in.height, s, s, kMaxImagePixels, std::int64_t{s} * s));
  }
  RgbImage out;
  out.height = out.width = s;
  out.data.resize(std::size_t(s) * s * 3);
  for (std::size_t i = 0; i < std::size_t(s) * s; ++i) std::memcpy(&out.data[i * 3], fill.data(), 3);
  const int top = (s - in.height) / 2, left = (s - in.width) / 2;
  for (int y = 0; y < in.height; ++y) {
    std::memcpy(out.pixel(top + y, left), in.pixel(y, 0), std::size_t(in.width) * 3);
  }
  return out;
}

namespace {

// LLaVA's background: tuple(int(x * 255) for x in image_processor.image_mean).
std::array<std::uint8_t, 3> mean_colour(const ProcessorConfig& config) {
  std::array<std::uint8_t, 3> fill{};
  for (int c = 0; c < 3; ++c) {
    fill[c] = static_cast<std::uint8_t>(std::clamp(static_cast<int>(config.image_mean[c] * 255), 0, 255));
  }
  return fill;
}

}  // namespace

PixelValues preprocess(const RgbImage& image, const ProcessorConfig& config) {
  RgbImage img = config.pad_to_square ? expand_to_square(image, mean_colour(config)) : image;
  if (config.do_resize) {
    const auto [h, w] = resize_output_size(img.height, img.width, config);
    img = resize(img, h, w, config.resample);
  }
  if (config.do_center_crop) img = center_crop(img, config.crop_height, config.crop_width);
  // normalize: mean and std as float32 arrays (np.array(mean, dtype=image.dtype)).
  std::array<float, 3> mean{}, std{};
  for (int c = 0; c < 3; ++c) {
    mean[c] = static_cast<float>(config.image_mean[c]);
    std[c] = static_cast<float>(config.image_std[c]);
  }
  PixelValues out;
  out.height = img.height;
  out.width = img.width;
  out.data.resize(std::size_t(3) * img.height * img.width);
  const std::size_t plane = std::size_t(img.height) * img.width;
  for (std::size_t i = 0; i < plane; ++i) {
    for (int c = 0; c < 3; ++c) {
      const std::uint8_t v = img.data[i * 3 + c];
      // rescale: image.astype(np.float64) * scale, then .astype(np.float32).
      float x = config.do_rescale ? static_cast<float>(static_cast<double>(v) * config.rescale_factor)
                                  : static_cast<float>(v);
      if (config.do_normalize) x = (x - mean[c]) / std[c];
      out.data[c * plane + i] = x;  // channels first
    }
  }
  return out;
}

}  // namespace latentllm::image
