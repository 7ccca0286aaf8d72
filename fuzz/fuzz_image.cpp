// Fuzz target: PNG and JPEG decoding (src/image: the signature check, libpng and libjpeg behind their
// longjmp error handlers, the size limits, the conversions to RGB), through image::decode_image, then
// the CLIP preprocessing of the decoded image.
// Input: the bytes of one image file. Images of more than 2^22 pixels are refused from their header (the
// size check is what runs for them): a tiny file may declare 2^28 pixels that libjpeg then fills in, a
// legitimate decode taking longer than the fuzzer's per-input time limit.
#include <algorithm>
#include <cstdint>
#include <span>

#include "support.hpp"
#include "latentllm/image.hpp"

namespace {
constexpr std::int64_t kMaxFuzzPixels = std::int64_t{1} << 22;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace latentllm;
  fuzz::accept_typed_errors([&] {
    const image::RgbImage img = image::decode_image(std::span(data, size), "input", kMaxFuzzPixels);
    // What preprocessing relies on after a successful decode.
    if (img.height < 1 || img.width < 1 || img.height > image::kMaxImageSide || img.width > image::kMaxImageSide ||
        img.data.size() != std::size_t(img.height) * img.width * 3) {
      __builtin_trap();
    }
    // The CLIP preprocessing of what decoded (PIL's resampling in int32, the crop's padding), with a size
    // that upscales small images and downscales larger ones, BICUBIC or BILINEAR by the input's length.
    // Only up to 2^16 pixels: the code paths are the same for larger images, only slower.
    if (std::int64_t{img.height} * img.width > (std::int64_t{1} << 16)) return;
    image::ProcessorConfig config;
    config.shortest_edge = config.crop_height = config.crop_width = 24;
    config.resample = size % 2 ? image::Resample::Bilinear : image::Resample::Bicubic;
    config.pad_to_square = size % 3 == 0 && std::max(img.height, img.width) <= 2048;
    const auto [h, w] = image::resize_output_size(img.height, img.width, config);
    if (std::int64_t{h} * w > (std::int64_t{1} << 20)) return;  // a very thin image: time, not coverage
    const image::PixelValues px = image::preprocess(img, config);
    if (px.data.size() != std::size_t(3) * 24 * 24) __builtin_trap();
  });
  return 0;
}
