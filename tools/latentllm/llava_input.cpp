// The images of a LLaVA prompt (llava_input.hpp).
#include "llava_input.hpp"

namespace latentllm::cli {

LlavaImages preprocess_llava_images(const model::LlavaModel& lm, const image::ProcessorConfig& processor,
                                    const std::vector<image::RgbImage>& images) {
  LlavaImages out;
  out.pixels.resize(images.size());  // sized first: the inputs view these buffers
  for (std::size_t k = 0; k < images.size(); ++k) {
    if (lm.config().anyres()) {
      image::AnyresPixels any = image::preprocess_anyres(images[k], processor);
      out.pixels[k] = std::move(any.data);
      out.inputs.push_back({out.pixels[k], any.num_tiles(), any.image_height, any.image_width});
    } else {
      out.pixels[k] = image::preprocess(images[k], processor).data;
      out.inputs.push_back({out.pixels[k], 1, 0, 0});
    }
    out.counts.push_back(lm.image_tokens(out.inputs.back()));
  }
  return out;
}

std::int64_t count_image_placeholders(const std::string& text) {
  std::int64_t found = 0;
  for (auto i = text.find(model::kImageToken); i != std::string::npos; i = text.find(model::kImageToken, i + 1))
    ++found;
  return found;
}

std::string expand_images(const std::string& text, const std::vector<std::int64_t>& counts) {
  std::string out;
  std::size_t pos = 0;
  for (const std::int64_t n : counts) {
    const std::size_t at = text.find(model::kImageToken, pos);
    out += text.substr(pos, at - pos) + model::expand_image_tokens(model::kImageToken, n);
    pos = at + model::kImageToken.size();
  }
  return out + text.substr(pos);
}

}  // namespace latentllm::cli
