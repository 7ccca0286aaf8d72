// LLaVA-NeXT's image packing (HF modeling_llava_next.py), used by LlavaModel (llava.cpp) for a
// LlavaNextForConditionalGeneration checkpoint: the anyres tile grid, unpad_image's window and
// pack_image_features. Glossary as multimodal.hpp; p_n = S / p patches per tile side, g_h × g_w the
// tile grid, d the text hidden size.
#pragma once

#include <cstdint>
#include <span>

#include "io/json_keys.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::model {

// image_grid_pinpoints of a NeXT config.json: LlavaNextConfig's default when absent; ConfigError
// "<origin>: image_grid_pinpoints (expected ..., got ...)" unless a non-empty list of [height, width]
// pairs, each a multiple of vision_config.image_size ("missing key" when the default is not).
std::vector<std::pair<int, int>> parse_llava_next_pinpoints(const io::JsonKeys& k, std::int64_t image_size);

// The tile grid (g_h, g_w) of an image of height × width: select_best_resolution over the pinpoints,
// divided by S (get_anyres_image_grid_shape).
std::pair<int, int> llava_next_grid(int height, int width, const LlavaConfig& c);

// unpad_image's kept window of the (rows × cols) feature map of an image of height × width:
// [row0, row1) × [col0, col1).
struct UnpadWindow {
  int row0 = 0, row1 = 0, col0 = 0, col1 = 0;
  int rows() const { return row1 - row0; }
  int cols() const { return col1 - col0; }
};
UnpadWindow llava_next_unpad(int height, int width, int rows, int cols);

// pack_image_features for one image: f: [(1 + g_h·g_w)·p_n², d] the projected features of its tiles
// (the base image first), newline: [d] -> out: [p_n² + rows·(cols + 1), d], the base features then the
// unpadded grid row by row, each row followed by image_newline.
void llava_next_pack(const MatrixF& f, int height, int width, const LlavaConfig& c, std::span<const float> newline,
                     MatrixF& out);

}  // namespace latentllm::model
