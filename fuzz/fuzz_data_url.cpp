// Fuzz target: the images of chat requests (`latentllm serve`), image::decode_data_url: the data URL's
// scheme and ";base64," header, the base64 decoder (alphabet, padding, dangling characters), then the
// PNG / JPEG decoding the image target covers in depth.
// Input: the URL's text. Images of more than 2^22 pixels are refused from their header, as in the image
// target.
#include <cstdint>
#include <string_view>

#include "latentllm/image.hpp"
#include "support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace latentllm;
  const std::string_view url(reinterpret_cast<const char*>(data), size);
  fuzz::accept_typed_errors([&] {
    // The base64 decoder alone: any text decodes to at most 3 bytes per 4 characters, or is refused.
    const std::vector<std::uint8_t> bytes = image::decode_base64(url, "input");
    if (bytes.size() > size / 4 * 3 + 2) __builtin_trap();
  });
  fuzz::accept_typed_errors([&] {
    const image::RgbImage img = image::decode_data_url(url, "input", std::int64_t{1} << 22);
    if (img.height < 1 || img.width < 1 || img.data.size() != std::size_t(img.height) * img.width * 3) __builtin_trap();
  });
  return 0;
}
