// Fuzz target: PNG and JPEG decoding (src/image: the signature check, libpng and libjpeg behind their
// longjmp error handlers, the size limits, the conversions to RGB), through image::decode_image.
// Input: the bytes of one image file. Images of more than 2^22 pixels are refused from their header (the
// size check is what runs for them): a tiny file may declare 2^28 pixels that libjpeg then fills in, a
// legitimate decode taking longer than the fuzzer's per-input time limit.
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
  });
  return 0;
}
