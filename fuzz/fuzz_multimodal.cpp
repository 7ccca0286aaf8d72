// Fuzz target: a LLaVA checkpoint's JSON inputs and a ScienceQA folder's, each parsed on its own:
// config.json -> LlavaConfig (model::parse_llava_config: text_config through the language family's
// parser, vision_config, vision_feature_layer, NeXT's image_grid_pinpoints), preprocessor_config.json ->
// image::ProcessorConfig, and problems.json + pid_splits.json -> eval::scienceqa::load_problems.
// Input: the four files, kSplit-separated, in that order.
#include <cstdint>

#include "support.hpp"
#include "io/json_keys.hpp"
#include "latentllm/image.hpp"
#include "latentllm/io.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/scienceqa.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace latentllm;
  const auto parts = fuzz::split_input(data, size, 4);
  const auto config = fuzz::write_scratch("config.json", parts[0]);
  const auto processor = fuzz::write_scratch("preprocessor_config.json", parts[1]);
  const auto problems = fuzz::write_scratch("sqa/problems.json", parts[2]);
  fuzz::write_scratch("sqa/pid_splits.json", parts[3]);
  fuzz::accept_typed_errors([&] {
    const model::LlavaConfig c = model::parse_llava_config(io::load_json_file(config), config.string());
    // What LlavaModel relies on after a successful parse.
    const model::VisionConfig& v = c.vision;
    if (v.hidden_size <= 0 || v.num_attention_heads <= 0 || v.hidden_size % v.num_attention_heads != 0 ||
        v.patch_size <= 0 || v.image_size % v.patch_size != 0 || c.text.hidden_size <= 0 ||
        c.vision_feature_layers.empty() || c.features_per_image() <= 0) {
      __builtin_trap();
    }
    for (const int k : c.feature_layers())
      if (k < 0 || k > v.num_hidden_layers) __builtin_trap();
  });
  fuzz::accept_typed_errors([&] {
    const image::ProcessorConfig p = image::load_processor_config(processor);
    if ((p.do_center_crop && (p.crop_height <= 0 || p.crop_width <= 0)) ||
        (p.do_resize && p.shortest_edge <= 0 && (p.size_height <= 0 || p.size_width <= 0))) {
      __builtin_trap();
    }
  });
  fuzz::accept_typed_errors([&] {
    for (const auto& p : eval::scienceqa::load_problems(problems.parent_path(), "val")) {
      if (p.choices.size() < 2 || p.choices.size() > 5 || p.answer < 0 ||
          p.answer >= static_cast<int>(p.choices.size()) || p.grade < 1 || p.grade > 12) {
        __builtin_trap();
      }
    }
  });
  return 0;
}
