// LLaVA-NeXT's anyres geometry against hand computations with transformers' formulas
// (image_processing_utils.select_best_resolution / get_patch_output_size, modeling_llava_next.unpad_image,
// pack_image_features, processing_llava_next._get_number_of_features), preprocess_anyres's padding and
// tile order on synthetic images, and its pixels against LlavaNextImageProcessor's (PIL path) for the
// golden images (tests/data/golden/anyres, scripts/gen_anyres_golden.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/image.hpp"
#include "latentllm/multimodal.hpp"
#include "model/llava_next.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

using image::RgbImage;
using Pins = std::vector<std::pair<int, int>>;

// llava-v1.6-vicuna-7b: S = 336, p = 14 (p_n = 24), LlavaNextConfig's default pinpoints.
const Pins kV16 = {{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}};
// The tiny fixtures: S = 64, p = 16 (p_n = 4).
const Pins kTiny = {{64, 64}, {64, 128}, {128, 64}, {128, 128}};

// A config.json in the shape of llava-hf/llava-v1.6-vicuna-7b-hf's: nested configs without their classes'
// default values, the pinpoints given.
TEST(LlavaNextGeometry, ParsesAV16ShapedConfig) {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "architectures": ["LlavaNextForConditionalGeneration"], "model_type": "llava_next", "ignore_index": -100,
    "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
    "image_token_index": 32000, "projector_hidden_act": "gelu", "tie_word_embeddings": false,
    "use_image_newline_parameter": true, "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
    "text_config": {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096, "model_type": "llama",
                    "pad_token_id": 0, "rms_norm_eps": 1e-05, "vocab_size": 32064},
    "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                      "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                      "patch_size": 14, "projection_dim": 768}})");
  const model::LlavaConfig c = model::parse_llava_config(doc, "config.json");
  EXPECT_TRUE(c.anyres());
  EXPECT_EQ(c.image_grid_pinpoints, kV16);
  EXPECT_EQ(c.text.hidden_size, 4096);
  EXPECT_EQ(c.text.num_hidden_layers, 32);
  EXPECT_EQ(c.vision.num_patches(), 576);
  EXPECT_EQ(c.feature_layers(), std::vector<int>({23}));
  EXPECT_EQ(model::llava_next_num_image_tokens(336, 336, c), 1176);
}

model::LlavaConfig next_config(int S, int p, const Pins& pins) {
  model::LlavaConfig c;
  c.architecture = "LlavaNextForConditionalGeneration";
  c.vision.image_size = S;
  c.vision.patch_size = p;
  c.image_grid_pinpoints = pins;
  return c;
}

TEST(LlavaNextGeometry, SelectBestResolution) {
  // 336×336 on v1.6: every pinpoint keeps all 112896 pixels (scale ≥ 1); wasted 672·336 − 112896 = 112896
  // for [336, 672] and [672, 336] (the first wins the tie), more for the others.
  EXPECT_EQ(image::select_best_resolution(336, 336, kV16), std::pair(336, 672));
  // 480×640: [336, 672] scale min(672/640, 336/480) = 0.7 → 448·336 = 150528; [672, 672] scale 1.05
  // → 672·504 ≥ 480·640, effective 307200 (the whole image): the largest.
  EXPECT_EQ(image::select_best_resolution(480, 640, kV16), std::pair(672, 672));
  // 1000×300: [1008, 336] scale min(336/300, 1008/1000) = 1.008 → 302·1008 ≥ 300000: the whole image;
  // [672, 336] scale 0.672 → 201·672 = 135072.
  EXPECT_EQ(image::select_best_resolution(1000, 300, kV16), std::pair(1008, 336));
  // 64×64 on the tiny pinpoints: [64, 64] wastes 0.
  EXPECT_EQ(image::select_best_resolution(64, 64, kTiny), std::pair(64, 64));
  // 100×50: [128, 64] scale 1.28 → 64·128 ≥ 5000 (whole image, wasted 3192); [128, 128] the same
  // effective, wasted 11384; [64, 64] and [64, 128] scale 0.64 → 32·64 = 2048.
  EXPECT_EQ(image::select_best_resolution(100, 50, kTiny), std::pair(128, 64));
  // 30×100: [64, 128] scale min(1.28, 2.13) = 1.28 → 128·38 ≥ 3000 (whole image, wasted 5192).
  EXPECT_EQ(image::select_best_resolution(30, 100, kTiny), std::pair(64, 128));
  // 64×96 (a scienceqa-shapes val image): [64, 128] scale 1 → 96·64 = 6144, the whole image.
  EXPECT_EQ(image::select_best_resolution(64, 96, kTiny), std::pair(64, 128));
  EXPECT_THROW(image::select_best_resolution(10, 10, Pins{}), ConfigError);
}

TEST(LlavaNextGeometry, PatchOutputSize) {
  // 480×640 → [672, 672]: scale_w = 672/640 = 1.05 < scale_h = 672/480 = 1.4, so the width takes 672
  // and the height min(ceil(480·1.05), 672) = 504.
  EXPECT_EQ(image::patch_output_size(480, 640, {672, 672}), std::pair(504, 672));
  // 1000×300 → [1008, 336]: scale_h = 1.008 < scale_w = 1.12: height 1008, width ceil(302.4) = 303.
  EXPECT_EQ(image::patch_output_size(1000, 300, {1008, 336}), std::pair(1008, 303));
  // 30×100 → [64, 128]: scale_w = 1.28 < 2.13: height ceil(30·1.28 = 38.4) = 39.
  EXPECT_EQ(image::patch_output_size(30, 100, {64, 128}), std::pair(39, 128));
  // 64×96 → [64, 128]: scale_h = 1 < 1.33: width min(ceil(96), 128) = 96.
  EXPECT_EQ(image::patch_output_size(64, 96, {64, 128}), std::pair(64, 96));
  // 336×336 → [336, 672]: equal scales go to the else branch: height 336, width 336.
  EXPECT_EQ(image::patch_output_size(336, 336, {336, 672}), std::pair(336, 336));
}

TEST(LlavaNextGeometry, UnpadWindows) {
  // 480×640 on a 48×48 grid: aspect 640/480 > 1, new_height = int(round(480·48/640, 7)) = 36,
  // padding (48 − 36) // 2 = 6: rows 6..42.
  const model::UnpadWindow a = model::llava_next_unpad(480, 640, 48, 48);
  EXPECT_EQ(a.row0, 6);
  EXPECT_EQ(a.row1, 42);
  EXPECT_EQ(a.cols(), 48);
  // 1000×300 on 72×24: aspect 0.3 < 1/3, new_width = int(round(300·72/1000 = 21.6, 7)) = 21, padding
  // (24 − 21) // 2 = 1 on each side: 22 columns kept (the odd one stays).
  const model::UnpadWindow b = model::llava_next_unpad(1000, 300, 72, 24);
  EXPECT_EQ(b.col0, 1);
  EXPECT_EQ(b.col1, 23);
  EXPECT_EQ(b.rows(), 72);
  // 336×336 on 24×48: aspect 1 < 2, new_width = 24, padding 12: columns 12..36.
  const model::UnpadWindow c = model::llava_next_unpad(336, 336, 24, 48);
  EXPECT_EQ(c.col0, 12);
  EXPECT_EQ(c.col1, 36);
  // 30×100 on 4×8: aspect 3.33 > 2, new_height = int(round(30·8/100 = 2.4, 7)) = 2, padding 1: rows 1..3.
  const model::UnpadWindow d = model::llava_next_unpad(30, 100, 4, 8);
  EXPECT_EQ(d.row0, 1);
  EXPECT_EQ(d.row1, 3);
  // The rounding to 7 decimals matters: 88×55 on 24×24, 55·(24/88) is 14.999999999999998 in double;
  // int(round(x, 7)) = 15, padding (24 − 15) // 2 = 4: columns 4..20 (a plain int() would give 14 and 5..19).
  const model::UnpadWindow r = model::llava_next_unpad(88, 55, 24, 24);
  EXPECT_EQ(r.col0, 4);
  EXPECT_EQ(r.col1, 20);
  // Aspects equal (100×50 on 8×4): the else branch, new_width = int(round(50·8/100, 7)) = 4, nothing cut.
  const model::UnpadWindow e = model::llava_next_unpad(100, 50, 8, 4);
  EXPECT_EQ(e.rows(), 8);
  EXPECT_EQ(e.cols(), 4);
}

TEST(LlavaNextGeometry, ImageTokenCounts) {
  const model::LlavaConfig v16 = next_config(336, 14, kV16);
  // base p_n² = 576, plus rows·(cols + 1) of the unpadded grid (a newline per row):
  EXPECT_EQ(model::llava_next_num_image_tokens(336, 336, v16), 576 + 24 * 25);   // 1176
  EXPECT_EQ(model::llava_next_num_image_tokens(480, 640, v16), 576 + 36 * 49);   // 2340
  EXPECT_EQ(model::llava_next_num_image_tokens(1000, 300, v16), 576 + 72 * 23);  // 2232
  const model::LlavaConfig tiny = next_config(64, 16, kTiny);
  EXPECT_EQ(model::llava_next_num_image_tokens(64, 64, tiny), 16 + 4 * 5);    // 36: grid 1×1, 4×4
  EXPECT_EQ(model::llava_next_num_image_tokens(100, 50, tiny), 16 + 8 * 5);   // 56: grid 2×1, 8×4
  EXPECT_EQ(model::llava_next_num_image_tokens(30, 100, tiny), 16 + 2 * 9);   // 34: grid 1×2, rows 1..3
  EXPECT_EQ(model::llava_next_num_image_tokens(64, 96, tiny), 16 + 4 * 7);    // 44: grid 1×2, columns 1..7
  EXPECT_EQ(model::llava_next_grid(100, 50, tiny), std::pair(2, 1));
}

// Features numbered by row (column 0 = the row index) through pack: S = 32, p = 8 (p_n = 4), one
// pinpoint [32, 64], an image of 16×64: grid 1×2, a 4×8 map, aspect 4 > 2, new_height =
// int(round(16·8/64, 7)) = 2, padding 1: rows 1 and 2 of the map, each of 8 columns then a newline.
TEST(LlavaNextGeometry, PackOrdersBaseGridRowsAndNewlines) {
  const model::LlavaConfig c = next_config(32, 8, {{32, 64}});
  MatrixF f(3 * 16, 2);  // [(1 + 2)·p_n², d]
  for (int i = 0; i < f.rows(); ++i) f.row(i) << static_cast<float>(i), 0.0f;
  const std::vector<float> newline = {-1.0f, 7.0f};
  MatrixF out;
  model::llava_next_pack(f, 16, 64, c, newline, out);
  ASSERT_EQ(out.rows(), 16 + 2 * 9);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out(i, 0), i);  // the base tile first, unchanged
  // Map position (r, q) = tile 1 + q / 4, its feature r·4 + q mod 4: row 16 is (1, 0) → 16 + 4 = 20,
  // row 19 is (1, 3) → 23, row 20 is (1, 4) → the second tile's 32 + 4 = 36, row 24 the newline,
  // row 25 is (2, 0) → 16 + 8 = 24, row 32 is (2, 7) → 32 + 8 + 3 = 43, row 33 the newline.
  EXPECT_EQ(out(16, 0), 20);
  EXPECT_EQ(out(19, 0), 23);
  EXPECT_EQ(out(20, 0), 36);
  EXPECT_EQ(out(24, 0), -1.0f);
  EXPECT_EQ(out(24, 1), 7.0f);
  EXPECT_EQ(out(25, 0), 24);
  EXPECT_EQ(out(32, 0), 43);
  EXPECT_EQ(out(33, 0), -1.0f);
}

image::ProcessorConfig tiny_processor() {
  image::ProcessorConfig p;
  p.image_processor_type = "LlavaNextImageProcessor";
  p.shortest_edge = 64;
  p.crop_height = p.crop_width = 64;
  p.image_grid_pinpoints = kTiny;
  return p;
}

RgbImage pattern(int h, int w) {
  RgbImage img{h, w, std::vector<std::uint8_t>(std::size_t(h) * w * 3)};
  for (std::size_t i = 0; i < img.data.size(); ++i) img.data[i] = static_cast<std::uint8_t>((i * 37 + i / 7) % 251);
  return img;
}

// preprocess()'s value of one 8-bit sample of channel ch.
float normalized(std::uint8_t v, int ch, const image::ProcessorConfig& p) {
  const float x = static_cast<float>(static_cast<double>(v) * p.rescale_factor);
  return (x - static_cast<float>(p.image_mean[ch])) / static_cast<float>(p.image_std[ch]);
}

// 30×100 → best [64, 128], resized to 39×128, padded with 12 zero rows above and 13 below
// (divmod(64 − 39, 2) = (12, 1)), cut into two 64×64 tiles after the base image.
TEST(LlavaNextGeometry, AnyresPadsCentredAndTilesRowByRow) {
  const image::ProcessorConfig p = tiny_processor();
  const RgbImage img = pattern(30, 100);
  const image::AnyresPixels a = image::preprocess_anyres(img, p);
  EXPECT_EQ(a.image_height, 30);
  EXPECT_EQ(a.image_width, 100);
  EXPECT_EQ(std::pair(a.best_height, a.best_width), std::pair(64, 128));
  EXPECT_EQ(std::pair(a.grid_height, a.grid_width), std::pair(1, 2));
  ASSERT_EQ(a.num_tiles(), 3);
  ASSERT_EQ(a.data.size(), std::size_t(3) * 3 * 64 * 64);
  const RgbImage resized = image::resize(img, 39, 128, p.resample);
  const std::size_t plane = 64 * 64, tile = 3 * plane;
  for (int t = 1; t <= 2; ++t) {
    for (int ch = 0; ch < 3; ++ch) {
      for (int y = 0; y < 64; ++y) {
        for (int x = 0; x < 64; ++x) {
          const bool inside = y >= 12 && y < 51;
          const std::uint8_t v = inside ? resized.pixel(y - 12, x + 64 * (t - 1))[ch] : 0;
          ASSERT_EQ(a.data[t * tile + ch * plane + std::size_t(y) * 64 + x], normalized(v, ch, p))
              << "tile " << t << " channel " << ch << " at " << y << "," << x;
        }
      }
    }
  }
  // The base image: resized (squashed) to 64×64, then the CLIP steps.
  const image::PixelValues base = image::preprocess(image::resize(img, 64, 64, p.resample), p);
  EXPECT_TRUE(std::equal(base.data.begin(), base.data.end(), a.data.begin()));
}

TEST(LlavaNextGeometry, AnyresNeedsPinpointsInCropMultiples) {
  image::ProcessorConfig p = tiny_processor();
  p.image_grid_pinpoints = {{100, 64}};
  EXPECT_THROW(image::preprocess_anyres(pattern(10, 10), p), ConfigError);
  p.image_grid_pinpoints.clear();
  EXPECT_THROW(image::preprocess_anyres(pattern(10, 10), p), ConfigError);
}

// Bit for bit as the Python processor: the sha256 of the float32 bytes [n_tiles, 3, h, w].
TEST(LlavaNextGeometry, AnyresPixelsMatchThePythonProcessor) {
  const auto dir = test_data_path("golden/anyres");
  const nlohmann::json index = nlohmann::json::parse(core::read_file(dir / "index.json"));
  ASSERT_GE(index.at("cases").size(), 30u);
  for (const nlohmann::json& c : index.at("cases")) {
    const std::string name = c.at("image"), variant = c.at("variant");
    SCOPED_TRACE(name + " " + variant);
    const image::ProcessorConfig p = image::parse_processor_config(index.at("variants").at(variant), variant);
    const std::string rgb = core::read_file(test_data_path("golden/images") / (name + ".rgb"));
    RgbImage img{c.at("height").get<int>(), c.at("width").get<int>(), {rgb.begin(), rgb.end()}};
    const image::AnyresPixels a = image::preprocess_anyres(img, p);
    EXPECT_EQ(a.best_height, c.at("best")[0].get<int>());
    EXPECT_EQ(a.best_width, c.at("best")[1].get<int>());
    ASSERT_EQ(a.num_tiles(), c.at("n_tiles").get<int>());
    EXPECT_EQ(a.tile_height, c.at("tile")[0].get<int>());
    for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(a.data[i], c.at("first")[i].get<float>());
    EXPECT_EQ(sha256_hex(a.data.data(), a.data.size() * sizeof(float)), c.at("sha256").get<std::string>());
  }
}

}  // namespace
}  // namespace latentllm::test
