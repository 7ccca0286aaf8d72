// The images of a LLaVA prompt, shared by `generate --image` and `serve`'s chat images: each image
// preprocessed by the checkpoint's processor (LLaVA-1.5: one CLIPImageProcessor tile; NeXT: the anyres
// tiles and the image's size), its token count, and the prompt's "<image>" placeholders expanded to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "latentllm/image.hpp"
#include "latentllm/multimodal.hpp"

namespace latentllm::cli {

// The model's inputs for a prompt's images, in order. `inputs` view `pixels`: move it, never copy it.
struct LlavaImages {
  std::vector<std::vector<float>> pixels;  // each [n_tiles, 3, S, S]
  std::vector<model::ImageInput> inputs;
  std::vector<std::int64_t> counts;        // the image tokens each takes

  LlavaImages() = default;
  LlavaImages(LlavaImages&&) = default;
  LlavaImages& operator=(LlavaImages&&) = default;
  LlavaImages(const LlavaImages&) = delete;
  LlavaImages& operator=(const LlavaImages&) = delete;
};

LlavaImages preprocess_llava_images(const model::LlavaModel& lm, const image::ProcessorConfig& processor,
                                    const std::vector<image::RgbImage>& images);

// The number of "<image>" placeholders in text.
std::int64_t count_image_placeholders(const std::string& text);

// `text` with its k-th "<image>" expanded to counts[k] image tokens (as many placeholders as counts).
std::string expand_images(const std::string& text, const std::vector<std::int64_t>& counts);

}  // namespace latentllm::cli
