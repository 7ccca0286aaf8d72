// CLIP image preprocessing (image::preprocess) at LLaVA-1.5's geometry: shortest edge 336, crop 336x336,
// BICUBIC, with and without LLaVA's pad-to-square, from decoded RGB images of typical photo sizes
// (synthetic gradients with noise, in memory). Rates are images per second (items/s).
#include <benchmark/benchmark.h>

#include <random>

#include "latentllm/image.hpp"

namespace {

using namespace latentllm;

image::RgbImage synthetic(int height, int width) {
  image::RgbImage img{height, width, std::vector<std::uint8_t>(std::size_t(height) * width * 3)};
  std::mt19937 rng(27);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) img.pixel(y, x)[c] = static_cast<std::uint8_t>((x * (c + 1) + y * 2 + rng() % 32) & 255);
    }
  }
  return img;
}

// LLaVA-1.5 (llava-hf/llava-1.5-7b-hf preprocessor_config.json): CLIP ViT-L/14-336.
image::ProcessorConfig llava15() {
  image::ProcessorConfig c;
  c.shortest_edge = 336;
  c.crop_height = c.crop_width = 336;
  return c;
}

void BM_ClipPreprocess(benchmark::State& state) {
  const image::RgbImage img = synthetic(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  image::ProcessorConfig config = llava15();
  config.pad_to_square = state.range(2) != 0;
  for (auto _ : state) {
    const image::PixelValues px = image::preprocess(img, config);  // [3, 336, 336]
    benchmark::DoNotOptimize(px.data.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ClipPreprocess)
    ->Args({480, 640, 0})->Args({480, 640, 1})->Args({1080, 1920, 0})->Args({336, 336, 0})
    ->ArgNames({"h", "w", "pad"})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
