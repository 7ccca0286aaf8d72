// LLaVA-NeXT's "anyres" preprocessing, the slow PIL path of transformers' LlavaNextImageProcessor
// (image_processing_llava_next.py: get_image_patches, _resize_for_patching, _pad_for_patching,
// divide_to_patches, _preprocess) and its helpers in image_processing_utils.py (select_best_resolution,
// get_patch_output_size). The image stays uint8 through resizing, padding and tiling, as the numpy
// arrays do there; each tile then goes through the CLIP steps of preprocess().
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>

#include <fmt/format.h>

#include "latentllm/error.hpp"
#include "latentllm/image.hpp"

namespace latentllm::image {

const std::vector<std::pair<int, int>>& default_grid_pinpoints() {
  // LlavaNextImageProcessor.__init__'s default.
  static const std::vector<std::pair<int, int>> kDefault = {{336, 672}, {672, 336}, {672, 672}, {1008, 336},
                                                            {336, 1008}};
  return kDefault;
}

std::pair<int, int> select_best_resolution(int height, int width, std::span<const std::pair<int, int>> pinpoints) {
  if (pinpoints.empty()) {
    throw ConfigError("image_grid_pinpoints (expected at least one [height, width] pair, got none)");
  }
  std::pair<int, int> best = pinpoints.front();
  std::int64_t max_effective = 0;
  std::int64_t min_wasted = INT64_MAX;  // float("inf")
  for (const auto& [h, w] : pinpoints) {
    // Python: scale = min(width / original_width, height / original_height), true divisions in double;
    // int() truncates the products.
    const double scale = std::min(static_cast<double>(w) / width, static_cast<double>(h) / height);
    const auto down_w = static_cast<std::int64_t>(width * scale);
    const auto down_h = static_cast<std::int64_t>(height * scale);
    const std::int64_t effective = std::min(down_w * down_h, std::int64_t{width} * height);
    const std::int64_t wasted = std::int64_t{w} * h - effective;
    if (effective > max_effective || (effective == max_effective && wasted < min_wasted)) {
      max_effective = effective;
      min_wasted = wasted;
      best = {h, w};
    }
  }
  return best;
}

std::pair<int, int> patch_output_size(int height, int width, std::pair<int, int> target) {
  const auto [target_h, target_w] = target;
  const double scale_w = static_cast<double>(target_w) / width;
  const double scale_h = static_cast<double>(target_h) / height;
  if (scale_w < scale_h) return {std::min(static_cast<int>(std::ceil(height * scale_w)), target_h), target_w};
  return {target_h, std::min(static_cast<int>(std::ceil(width * scale_h)), target_w)};
}

namespace {

// _pad_for_patching: zeros around the resized image, paste_y, r_y = divmod(target_h − h, 2) (the odd
// row after the image), the same across.
RgbImage pad_for_patching(const RgbImage& in, int target_h, int target_w) {
  RgbImage out;
  out.height = target_h;
  out.width = target_w;
  out.data.assign(std::size_t(target_h) * target_w * 3, 0);
  const int top = (target_h - in.height) / 2, left = (target_w - in.width) / 2;
  for (int y = 0; y < in.height; ++y) {
    std::memcpy(out.pixel(top + y, left), in.pixel(y, 0), std::size_t(in.width) * 3);
  }
  return out;
}

// divide_to_patches' tile (i, j): rows i·h.., columns j·w.. of the padded image.
RgbImage tile(const RgbImage& in, int top, int left, int h, int w) {
  RgbImage out;
  out.height = h;
  out.width = w;
  out.data.resize(std::size_t(h) * w * 3);
  for (int y = 0; y < h; ++y) std::memcpy(out.pixel(y, 0), in.pixel(top + y, left), std::size_t(w) * 3);
  return out;
}

void append(AnyresPixels& out, const RgbImage& img, const ProcessorConfig& config) {
  ProcessorConfig clip = config;
  clip.pad_to_square = false;
  const PixelValues p = preprocess(img, clip);
  out.tile_height = p.height;
  out.tile_width = p.width;
  out.data.insert(out.data.end(), p.data.begin(), p.data.end());
}

}  // namespace

AnyresPixels preprocess_anyres(const RgbImage& image, const ProcessorConfig& config) {
  AnyresPixels out;
  out.image_height = image.height;
  out.image_width = image.width;
  std::tie(out.best_height, out.best_width) =
      select_best_resolution(image.height, image.width, config.image_grid_pinpoints);
  // divide_to_patches' patch_size is crop_size["height"]: square tiles.
  const int c = config.crop_height;
  if (out.best_height % c != 0 || out.best_width % c != 0) {
    throw ConfigError(fmt::format("image_grid_pinpoints (expected multiples of crop_size.height {}, got [{}, {}])", c,
                                  out.best_height, out.best_width));
  }
  out.grid_height = out.best_height / c;
  out.grid_width = out.best_width / c;
  // The base image: resize(image, (s, s)) with s = shortest_edge, or min(height, width) of size.
  const int s = config.shortest_edge > 0 ? config.shortest_edge : std::min(config.size_height, config.size_width);
  append(out, resize(image, s, s, config.resample), config);
  const auto [new_h, new_w] = patch_output_size(image.height, image.width, {out.best_height, out.best_width});
  const RgbImage padded =
      pad_for_patching(resize(image, new_h, new_w, config.resample), out.best_height, out.best_width);
  for (int i = 0; i < out.grid_height; ++i) {
    for (int j = 0; j < out.grid_width; ++j) append(out, tile(padded, i * c, j * c, c, c), config);
  }
  return out;
}

}  // namespace latentllm::image
