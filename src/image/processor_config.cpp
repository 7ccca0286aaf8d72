// preprocessor_config.json -> image::ProcessorConfig, with transformers' defaults and size conventions
// (CLIPImageProcessor.__init__: get_size_dict(size, default_to_square=False) turns an integer size into
// {"shortest_edge": n}, get_size_dict(crop_size, default_to_square=True) an integer crop into n x n).
#include <string>

#include <fmt/format.h>

#include "io/json_keys.hpp"
#include "latentllm/error.hpp"
#include "latentllm/image.hpp"

namespace latentllm::image {
namespace {

using json = nlohmann::json;

bool positive_int(const json& v) {
  return v.is_number_integer() && v.get<std::int64_t>() > 0 && v.get<std::int64_t>() <= kMaxImageSide;
}

void parse_size(const io::JsonKeys& keys, ProcessorConfig& c) {
  const json* v = keys.find("size");
  if (v == nullptr) return;
  constexpr auto kExpected = R"(a positive integer, {"shortest_edge": n} or {"height": h, "width": w})";
  if (positive_int(*v)) {
    c.shortest_edge = v->get<int>();
  } else if (v->is_object() && v->contains("shortest_edge") && positive_int(v->at("shortest_edge"))) {
    c.shortest_edge = v->at("shortest_edge").get<int>();
  } else if (v->is_object() && v->contains("height") && v->contains("width") && positive_int(v->at("height")) &&
             positive_int(v->at("width"))) {
    c.shortest_edge = 0;
    c.size_height = v->at("height").get<int>();
    c.size_width = v->at("width").get<int>();
  } else {
    keys.fail("size", kExpected, v);
  }
}

void parse_crop_size(const io::JsonKeys& keys, ProcessorConfig& c) {
  const json* v = keys.find("crop_size");
  if (v == nullptr) return;
  if (positive_int(*v)) {
    c.crop_height = c.crop_width = v->get<int>();
  } else if (v->is_object() && v->contains("height") && v->contains("width") && positive_int(v->at("height")) &&
             positive_int(v->at("width"))) {
    c.crop_height = v->at("height").get<int>();
    c.crop_width = v->at("width").get<int>();
  } else {
    keys.fail("crop_size", R"(a positive integer or {"height": h, "width": w})", v);
  }
}

std::array<double, 3> parse_triple(const io::JsonKeys& keys, std::string_view key, std::array<double, 3> fallback,
                                   bool positive) {
  const json* v = keys.find(key);
  if (v == nullptr) return fallback;
  const auto ok = [&](const json& x) { return x.is_number() && (!positive || x.get<double>() > 0); };
  if (ok(*v)) return {v->get<double>(), v->get<double>(), v->get<double>()};
  if (!v->is_array() || v->size() != 3 || !ok((*v)[0]) || !ok((*v)[1]) || !ok((*v)[2])) {
    keys.fail(key, positive ? "3 positive numbers" : "3 numbers", v);
  }
  return {(*v)[0].get<double>(), (*v)[1].get<double>(), (*v)[2].get<double>()};
}

Resample parse_resample(const io::JsonKeys& keys) {
  const json* v = keys.find("resample");
  if (v == nullptr) return Resample::Bicubic;
  if (v->is_number_integer() && v->get<std::int64_t>() == 2) return Resample::Bilinear;
  if (v->is_number_integer() && v->get<std::int64_t>() == 3) return Resample::Bicubic;
  keys.fail("resample", "2 (BILINEAR) or 3 (BICUBIC)", v);
}

// LlavaNext's [[h, w], ...] (preprocess_anyres); LlavaNextImageProcessor's default when absent.
std::vector<std::pair<int, int>> parse_pinpoints(const io::JsonKeys& keys, bool llava_next) {
  const json* v = keys.find("image_grid_pinpoints");
  std::vector<std::pair<int, int>> out;
  if (v == nullptr) return llava_next ? default_grid_pinpoints() : out;
  if (v->is_array()) {
    for (const json& p : *v) {
      if (!p.is_array() || p.size() != 2 || !positive_int(p[0]) || !positive_int(p[1])) break;
      out.emplace_back(p[0].get<int>(), p[1].get<int>());
    }
    if (out.size() == v->size()) return out;
  }
  keys.fail("image_grid_pinpoints", "a list of [height, width] pairs of positive integers", v);
}

}  // namespace

ProcessorConfig parse_processor_config(const json& doc, const std::string& origin) {
  const io::JsonKeys keys(doc, origin);
  ProcessorConfig c;
  c.image_processor_type = keys.string_or("image_processor_type", c.image_processor_type);
  if (c.image_processor_type != "CLIPImageProcessor" && c.image_processor_type != "LlavaImageProcessor" &&
      c.image_processor_type != "LlavaNextImageProcessor") {
    keys.fail("image_processor_type", "CLIPImageProcessor, LlavaImageProcessor or LlavaNextImageProcessor",
              keys.find("image_processor_type"));
  }
  // LlavaImageProcessor's do_pad (default False) pads to a square; LlavaNext's do_pad pads a batch's tile
  // counts, a no-op on one image.
  if (c.image_processor_type == "LlavaImageProcessor") c.pad_to_square = keys.boolean_or("do_pad", false);
  c.do_convert_rgb = keys.boolean_or("do_convert_rgb", c.do_convert_rgb);
  c.do_resize = keys.boolean_or("do_resize", c.do_resize);
  parse_size(keys, c);
  c.resample = parse_resample(keys);
  c.do_center_crop = keys.boolean_or("do_center_crop", c.do_center_crop);
  parse_crop_size(keys, c);
  c.do_rescale = keys.boolean_or("do_rescale", c.do_rescale);
  c.rescale_factor = keys.positive_number_or("rescale_factor", c.rescale_factor);
  c.do_normalize = keys.boolean_or("do_normalize", c.do_normalize);
  c.image_mean = parse_triple(keys, "image_mean", c.image_mean, false);
  c.image_std = parse_triple(keys, "image_std", c.image_std, true);
  c.image_grid_pinpoints = parse_pinpoints(keys, c.image_processor_type == "LlavaNextImageProcessor");
  return c;
}

ProcessorConfig load_processor_config(const std::filesystem::path& path) {
  return parse_processor_config(io::load_json_file(path), path.string());
}

ProcessorConfig load_checkpoint_processor(const std::filesystem::path& dir) {
  ProcessorConfig c = load_processor_config(dir / "preprocessor_config.json");
  const json config = io::load_json_file(dir / "config.json");
  if (config.is_object()) {
    const auto it = config.find("image_aspect_ratio");
    if (it != config.end() && it->is_string() && it->get<std::string>() == "pad" &&
        c.image_processor_type != "LlavaNextImageProcessor")
      c.pad_to_square = true;
  }
  return c;
}

}  // namespace latentllm::image
