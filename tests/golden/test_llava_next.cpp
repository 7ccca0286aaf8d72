// LLaVA-NeXT (LlavaNextForConditionalGeneration) on ../shared/models/llava-shapes-tiny's trained weights
// re-packed as a NeXT checkpoint at test time: an image_newline tensor [d] added and config.json's
// architecture and image_grid_pinpoints set. Checks what follows from the LLaVA-1.5 weights: with the
// single pinpoint [64, 64] a 64×64 image gives two identical tiles, so the packed features are the
// LLaVA-1.5 features, then the same features row by row with image_newline after each row; with four
// pinpoints a scienceqa-shapes val image runs end to end with llava_next_num_image_tokens image tokens.
// Also the "LLaVA-NeXT inputs" catalogue of docs/ERRORS.md.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "errors_doc.hpp"
#include "latentllm/error.hpp"
#include "latentllm/image.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kImageToken = 2048;
const json kFourPinpoints = {{64, 64}, {64, 128}, {128, 64}, {128, 128}};

fs::path fixture() { return shared_path("models/llava-shapes-tiny"); }

json fixture_config() {
  std::ifstream in(fixture() / "config.json");
  return json::parse(in);
}

// newline[i] = 0.1·sin(i + 1): a fixed vector [d = 128] unlike any feature.
std::vector<float> newline_values() {
  std::vector<float> v(128);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * std::sin(static_cast<float>(i + 1));
  return v;
}

// The fixture as a NeXT checkpoint (hub key layout, or the newer one with `newer`), config.json patched
// with `patch` after the architecture and pinpoints; without image_newline unless `newline`.
fs::path repack(const json& pinpoints, bool newer = false, const json& patch = json::object(), bool newline = true) {
  const fs::path dir = make_temp_dir("llava-next");
  const io::SafetensorsFile src(fixture() / "model.safetensors");
  std::vector<std::vector<float>> values;
  std::vector<io::TensorToWrite> out;
  values.reserve(src.tensors().size() + 1);
  for (const TensorView& t : src.tensors()) {
    std::string name = t.name;
    if (newer) {
      if (name.starts_with("language_model.model.")) name = "model.language_model." + name.substr(21);
      else if (name.starts_with("language_model.lm_head.")) name = name.substr(15);
      else name = "model." + name;
    }
    values.push_back(t.to_f32());
    out.push_back({name, t.dtype, t.shape, values.back()});
  }
  values.push_back(newline_values());
  if (newline) out.push_back({newer ? "model.image_newline" : "image_newline", DType::F32, {128}, values.back()});
  io::write_safetensors(dir / "model.safetensors", out, {{"format", "pt"}});
  json config = fixture_config();
  config["architectures"] = {"LlavaNextForConditionalGeneration"};
  config["model_type"] = "llava_next";
  config["image_grid_pinpoints"] = pinpoints;
  config.merge_patch(patch);
  std::ofstream(dir / "config.json") << config.dump(1);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    fs::copy_file(fixture() / f, dir / f);
  return dir;
}

const model::LlavaModel& llava() {
  static const model::LlavaModel m = model::LlavaModel::load(fixture());
  return m;
}

const model::LlavaModel& next_four() {
  static const model::LlavaModel m = model::LlavaModel::load(repack(kFourPinpoints));
  return m;
}

image::ProcessorConfig next_processor(const json& pinpoints) {
  std::ifstream in(fixture() / "preprocessor_config.json");
  json p = json::parse(in);
  p["image_processor_type"] = "LlavaNextImageProcessor";
  p["image_grid_pinpoints"] = pinpoints;
  return image::parse_processor_config(p, "preprocessor_config.json");
}

model::ImageInput input_of(const image::AnyresPixels& a) {
  return {a.data, a.num_tiles(), a.image_height, a.image_width};
}

// REFERENCE.json's first example (val/500007, 70×52) with its run of image tokens resized to n.
std::vector<std::int32_t> prompt_with(std::int64_t n) {
  std::ifstream in(fixture() / "REFERENCE.json");
  const json r = json::parse(in);
  const auto ids = r.at("examples").at(0).at("input_ids").get<std::vector<std::int32_t>>();
  std::vector<std::int32_t> out;
  bool done = false;
  for (std::int32_t id : ids) {
    if (id != kImageToken) {
      out.push_back(id);
    } else if (!done) {
      out.insert(out.end(), static_cast<std::size_t>(n), kImageToken);
      done = true;
    }
  }
  return out;
}

TEST(LlavaNext, ConfigAndComponents) {
  const model::LlavaConfig& c = next_four().config();
  EXPECT_TRUE(c.anyres());
  EXPECT_EQ(c.text.multimodal_architecture, "LlavaNextForConditionalGeneration");
  ASSERT_EQ(c.image_grid_pinpoints.size(), 4u);
  EXPECT_EQ(c.image_grid_pinpoints[2], std::pair(128, 64));
  EXPECT_EQ(next_four().image_newline().size(), 128u);
  // image_newline counts with the projector.
  const auto& p = next_four().component_params();
  EXPECT_EQ(p[1].second, llava().component_params()[1].second + 128);
  EXPECT_EQ(p[0], llava().component_params()[0]);
  // The language model alone, as text-only commands load it.
  const auto lm = model::Model::load(repack(kFourPinpoints, true));
  EXPECT_EQ(lm->config().multimodal_architecture, "LlavaNextForConditionalGeneration");
  // Absent pinpoints take LlavaNextConfig's default, multiples of 336: not of this tower's 64.
  json doc = fixture_config();
  doc["architectures"] = {"LlavaNextForConditionalGeneration"};
  EXPECT_THROW(model::parse_llava_config(doc, "config.json"), ConfigError);
  doc["vision_config"]["image_size"] = 336;
  doc["vision_config"]["patch_size"] = 14;
  EXPECT_EQ(model::parse_llava_config(doc, "config.json").image_grid_pinpoints, image::default_grid_pinpoints());
}

// One pinpoint [64, 64] and a 64×64 image: the base image (resized to 64×64: unchanged) and the one
// tile (resized to fit 64×64: unchanged, no padding) are the same pixels. Packed: the 16 LLaVA-1.5
// features of those pixels, then the 4×4 grid (aspect 1 = 1: nothing unpadded) as 4 rows of 4 features
// and image_newline: 16 + 4·5 = 36 rows.
TEST(LlavaNext, SingleTileReducesToTheLlavaFeaturesAndNewlines) {
  const model::LlavaModel m = model::LlavaModel::load(repack({{64, 64}}));
  const image::RgbImage img = image::resize(
      image::load_image(shared_path("data/scienceqa-shapes/images/val/500007/image.png")), 64, 64,
      image::Resample::Bicubic);
  const image::AnyresPixels a = image::preprocess_anyres(img, next_processor({{64, 64}}));
  ASSERT_EQ(a.num_tiles(), 2);
  ASSERT_TRUE(std::equal(a.data.begin(), a.data.begin() + 3 * 64 * 64, a.data.begin() + 3 * 64 * 64));
  MatrixF base, f;  // [16, 128], [36, 128]
  llava().image_features(std::span<const float>(a.data).first(3 * 64 * 64), 1, base);
  m.image_features(input_of(a), f);
  ASSERT_EQ(f.rows(), 36);
  EXPECT_EQ(m.image_tokens(input_of(a)), 36);
  // The GEMMs block one image and a batch of two differently (and rows within a block): float rounding,
  // relative to the largest feature, as Llava.TwoImagesKeepTheirOrder.
  const float tol = 1e-5f * base.cwiseAbs().maxCoeff();
  EXPECT_LE((f.topRows(16) - base).cwiseAbs().maxCoeff(), tol);
  const auto newline = newline_values();
  for (int r = 0; r < 4; ++r) {
    for (int q = 0; q < 4; ++q) {
      EXPECT_LE((f.row(16 + 5 * r + q) - base.row(4 * r + q)).cwiseAbs().maxCoeff(), tol) << r << "," << q;
    }
    for (int i = 0; i < 128; ++i) EXPECT_EQ(f(16 + 5 * r + 4, i), newline[i]);
  }
  // The tokens before the first image token see only text: the same logits as LLaVA-1.5's.
  const auto ids = prompt_with(36);
  const model::ImageInput in[] = {input_of(a)};
  MatrixF next_logits, llava_logits;  // [T, V], [T', V]
  m.forward(ids, in, next_logits);
  const auto first = static_cast<int>(std::find(ids.begin(), ids.end(), kImageToken) - ids.begin());
  llava().forward(prompt_with(16), std::span<const float>(a.data).first(3 * 64 * 64), 1, llava_logits);
  EXPECT_LE((next_logits.topRows(first) - llava_logits.topRows(first)).cwiseAbs().maxCoeff(), 1e-5f);
}

// val/500007 is 70×52 (height 52): best [64, 128] (scale min(128/70, 64/52) = 1.23 keeps all 3640
// pixels; [64, 64] and [128, 64] scale 0.914 keep 64·47), grid 1×2, a 4×8 map; aspect 70/52 < 2,
// new_width = int(round(70·4/52 = 5.38, 7)) = 5, padding (8 − 5) // 2 = 1: columns 1..7, so
// 16 + 4·(6 + 1) = 44 image tokens.
TEST(LlavaNext, ValImageRunsEndToEnd) {
  const image::RgbImage img = image::load_image(shared_path("data/scienceqa-shapes/images/val/500007/image.png"));
  ASSERT_EQ(std::pair(img.height, img.width), std::pair(52, 70));
  const image::AnyresPixels a = image::preprocess_anyres(img, next_processor(kFourPinpoints));
  EXPECT_EQ(a.num_tiles(), 3);
  const model::ImageInput in[] = {input_of(a)};
  const std::int64_t n = model::llava_next_num_image_tokens(52, 70, next_four().config());
  EXPECT_EQ(n, 44);
  EXPECT_EQ(next_four().image_tokens(in[0]), n);
  const auto ids = prompt_with(n);
  MatrixF logits;  // [T, V]
  next_four().forward(ids, in, logits);
  ASSERT_EQ(logits.rows(), static_cast<Eigen::Index>(ids.size()));
  ASSERT_EQ(logits.cols(), 2049);
  EXPECT_TRUE(logits.allFinite());
  const auto greedy = next_four().generate_greedy(ids, in, 3, -1);
  EXPECT_EQ(greedy.size(), 3u);
  // The greedy first token is the argmax of the last position's logits.
  Eigen::Index best = 0;
  logits.row(logits.rows() - 1).maxCoeff(&best);
  EXPECT_EQ(greedy[0], best);
  // The newer key layout (model.image_newline) gives the same logits.
  const model::LlavaModel newer = model::LlavaModel::load(repack(kFourPinpoints, true));
  MatrixF b;
  newer.forward(ids, in, b);
  EXPECT_EQ((logits - b).cwiseAbs().maxCoeff(), 0.0f);
}

// LLaVA-1.5 through ImageInput: the same logits as the pixels shorthand.
TEST(LlavaNext, LlavaImageInputEqualsTheShorthand) {
  const image::AnyresPixels a = image::preprocess_anyres(
      image::load_image(shared_path("data/scienceqa-shapes/images/val/500007/image.png")), next_processor({{64, 64}}));
  const auto base = std::span<const float>(a.data).first(3 * 64 * 64);  // [1, 3, 64, 64]
  const model::ImageInput in[] = {{base, 1, 0, 0}};
  MatrixF x, y;  // [T, V]
  llava().forward(prompt_with(16), in, x);
  llava().forward(prompt_with(16), base, 1, y);
  EXPECT_EQ((x - y).cwiseAbs().maxCoeff(), 0.0f);
  EXPECT_EQ(llava().image_tokens(in[0]), 16);
}

// Two images of different sizes in one prompt: val/500007 (70×52, 44 tokens) and val/500003 (100×80:
// best [128, 128], scale 1.28 keeps all 8000 pixels while [64, 128] keeps 80·64; grid 2×2, an 8×8 map,
// aspect 1.25 > 1, new_height = int(round(80·8/100 = 6.4, 7)) = 6, padding 1: rows 1..7, 16 + 6·9 = 70
// tokens). Each image's tokens take its own features, in order: the positions up to the text after the
// first image see only that image (causal attention), so their logits are a one-image prompt's; the
// swapped order has the same total count and runs, with other logits.
TEST(LlavaNext, TwoImagesOfDifferentSizes) {
  const auto p = next_processor(kFourPinpoints);
  const image::AnyresPixels a =
      image::preprocess_anyres(image::load_image(shared_path("data/scienceqa-shapes/images/val/500007/image.png")), p);
  const image::AnyresPixels b =
      image::preprocess_anyres(image::load_image(shared_path("data/scienceqa-shapes/images/val/500003/image.png")), p);
  ASSERT_EQ(std::pair(b.image_height, b.image_width), std::pair(80, 100));
  EXPECT_EQ(b.num_tiles(), 5);
  const model::ImageInput both[] = {input_of(a), input_of(b)};
  EXPECT_EQ(next_four().image_tokens(both[1]), 70);
  // The prompt: the first image's 44 tokens, two text tokens, the second image's 70.
  std::vector<std::int32_t> ids = prompt_with(44);
  const auto first = std::find(ids.begin(), ids.end(), kImageToken) - ids.begin();
  const std::vector<std::int32_t> between = {80, 3};
  ids.insert(ids.begin() + first + 44, between.begin(), between.end());
  ids.insert(ids.begin() + first + 46, 70, kImageToken);
  MatrixF two, one;  // [T, V]
  next_four().forward(ids, both, two);
  EXPECT_TRUE(two.allFinite());
  // Up to the text after the first image the second image is not seen: the one-image prompt's logits.
  const model::ImageInput only_a[] = {input_of(a)};
  const std::vector<std::int32_t> head(ids.begin(), ids.begin() + first + 46);
  next_four().forward(head, only_a, one);
  EXPECT_LE((two.topRows(one.rows()) - one).cwiseAbs().maxCoeff(), 1e-4f);
  const model::ImageInput swapped[] = {input_of(b), input_of(a)};
  EXPECT_NO_THROW(next_four().forward(ids, swapped, one));  // same total count, other placement
  EXPECT_GT((two - one).cwiseAbs().maxCoeff(), 1e-3f);
}

// latentllm inspect names the NeXT architecture and counts image_newline with the projector.
TEST(LlavaNext, InspectPrintsTheComponents) {
  std::string out;
  const fs::path dir = repack(kFourPinpoints, true);
  ASSERT_EQ(run_command(cli_path().string() + " inspect --json " + dir.string() + " 2>/dev/null", out), 0) << out;
  const json j = json::parse(out);
  EXPECT_EQ(j.at("multimodal").at("architecture"), "LlavaNextForConditionalGeneration");
  EXPECT_EQ(j.at("multimodal").at("components"),
            json({{"vision", 250496}, {"projector", 24832 + 128}, {"language", 656128}}));
}

// tests/data/llava-next-tiny (scripts/gen_llava_next_fixture.py): random weights, a 12×50 image of
// 3 tiles whose pixels are a formula, and the packed features and logits of a float64 transcription of
// the HF forward. Features and logits agree within 1e-4.
TEST(LlavaNext, TinyRandomFixtureMatchesTheFloat64Transcription) {
  const fs::path dir = test_data_path("llava-next-tiny");
  std::ifstream in(dir / "REFERENCE.json");
  const json ref = json::parse(in);
  const model::LlavaModel m = model::LlavaModel::load(dir);
  const int n_tiles = ref.at("n_tiles").get<int>();
  const int S = static_cast<int>(m.config().vision.image_size);
  std::vector<float> pixels(static_cast<std::size_t>(n_tiles) * 3 * S * S);  // [n_tiles, 3, S, S]
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<float>(static_cast<double>((i * 7919) % 2000) / 1000 - 1);
  const int height = ref.at("image_size")[0].get<int>(), width = ref.at("image_size")[1].get<int>();
  const model::ImageInput image{pixels, n_tiles, height, width};
  EXPECT_EQ(m.image_tokens(image), ref.at("n_image_tokens").get<std::int64_t>());
  MatrixF f;  // [n_tok, d]
  m.image_features(image, f);
  ASSERT_EQ(f.rows(), ref.at("n_image_tokens").get<std::int64_t>());
  for (const auto& [row, values] : ref.at("features_rows").items()) {
    for (std::size_t i = 0; i < values.size(); ++i)
      EXPECT_NEAR(f(std::stoi(row), static_cast<Eigen::Index>(i)), values[i].get<double>(), 1e-4) << "feature " << row;
  }
  const auto ids = ref.at("input_ids").get<std::vector<std::int32_t>>();
  const model::ImageInput images[] = {image};
  MatrixF logits;  // [T, V]
  m.forward(ids, images, logits);
  for (const auto& [row, values] : ref.at("logits_rows").items()) {
    for (std::size_t i = 0; i < values.size(); ++i)
      EXPECT_NEAR(logits(std::stoi(row), static_cast<Eigen::Index>(i)), values[i].get<double>(), 1e-4)
          << "logit " << row;
  }
}

// ---- docs/ERRORS.md, "LLaVA-NeXT inputs" ----

// The commands on a NeXT checkpoint: eval and generate --image preprocess by anyres (LlavaNextImageProcessor)
// with the size-dependent image token count; compress --calib scienceqa calibrates on those sequences and
// writes a latent NeXT checkpoint (image_newline kept) that eval loads back.
TEST(LlavaNext, CommandsRunOnANextCheckpoint) {
  const fs::path dir = repack(kFourPinpoints);
  json pc = json::parse(std::ifstream(fixture() / "preprocessor_config.json"));
  pc["image_processor_type"] = "LlavaNextImageProcessor";
  pc["image_grid_pinpoints"] = kFourPinpoints;
  std::ofstream(dir / "preprocessor_config.json") << pc.dump(1);
  const std::string q = "'", cli = cli_path().string(), data = q + shared_path("data/scienceqa-shapes").string() + q;
  std::string out;
  ASSERT_EQ(run_command(cli + " eval --task scienceqa --protocol loglik --max-problems 40 --json -q --model " + q +
                            dir.string() + q + " --data " + data, out), 0) << out;
  const auto dense = json::parse(out.substr(out.find('{')));
  EXPECT_EQ(dense.at("problem_count"), 40);
  ASSERT_EQ(run_command(cli + " generate --temperature 0 --max-new-tokens 2 -q --model " + q + dir.string() + q +
                            " --image " + q + shared_path("data/scienceqa-shapes/images/val/500007/image.png").string() +
                            q + " --prompt 'Question: How many shapes are in the picture?'", out), 0) << out;
  const fs::path latent = make_temp_dir("llava-next-latent") / "out";
  // With the towers too (--components): the vision tower calibrates on every anyres tile.
  ASSERT_EQ(run_command(cli + " compress --ratio 0.2 --calib scienceqa --nsamples 16 --calib-data " + data +
                            " --components lm,vision,projector --dtype f32 --model " + q + dir.string() + q + " --out " +
                            q + latent.string() + q + " 2>&1", out),
            0) << out;
  const auto tiles = out.find(" image tiles of 17 positions");
  ASSERT_NE(tiles, std::string::npos) << out;
  model::LlavaModel m = model::LlavaModel::load(latent);
  EXPECT_TRUE(m.config().anyres());
  EXPECT_EQ(m.image_newline().size(), 128u);
  EXPECT_EQ(std::vector<float>(m.image_newline().begin(), m.image_newline().end()), newline_values());
  EXPECT_TRUE(m.language_model().layer(0).linear(model::Role::Q).factored());
  EXPECT_TRUE(m.projector_modules()[0]->factored());
  ASSERT_EQ(run_command(cli + " eval --task scienceqa --protocol loglik --max-problems 40 --json -q --model " + q +
                            latent.string() + q + " --data " + data, out), 0) << out;
  const auto compressed = json::parse(out.substr(out.find('{')));
  EXPECT_GT(compressed.at("accuracy_percent").at("AVG").get<double>(), 0.0);
}

TEST(ErrorsDoc, LlavaNextInputs) {
  const image::RgbImage img = image::load_image(shared_path("data/scienceqa-shapes/images/val/500007/image.png"));
  const image::AnyresPixels a = image::preprocess_anyres(img, next_processor(kFourPinpoints));
  const auto config = [](const json& patch) {
    return lib([patch] { (void)model::LlavaModel::load(repack(kFourPinpoints, false, patch)); });
  };
  const auto forward = [](model::ImageInput in, std::int64_t n) {  // in.pixels views `a`, alive for the check
    return lib([in, n] {
      MatrixF logits;
      const model::ImageInput images[] = {in};
      next_four().forward(prompt_with(n), images, logits);
    });
  };
  model::ImageInput two_tiles = input_of(a);
  two_tiles.n_tiles = 2;
  two_tiles.pixels = two_tiles.pixels.first(2 * 3 * 64 * 64);
  model::ImageInput no_size = input_of(a);
  no_size.height = 0;
  image::ProcessorConfig odd = next_processor({{100, 64}});
  check_section(
      "LLaVA-NeXT inputs (`model::LlavaModel`, `image::preprocess_anyres`)",
      {
          {"next-strategy", {config({{"vision_feature_select_strategy", "full"}})}},
          {"next-pinpoints",
           {config({{"image_grid_pinpoints", json::array()}}), config({{"image_grid_pinpoints", {{64, 100}}}}),
            config({{"image_grid_pinpoints", {64, 64}}})}},
          {"next-newline",
           {lib([] { (void)model::LlavaModel::load(repack(kFourPinpoints, false, json::object(), false)); })}},
          {"next-sizes", {lib([&] {
             MatrixF logits;
             next_four().forward(prompt_with(44), std::span<const float>(a.data).first(3 * 64 * 64), 1, logits);
           })}},
          {"next-image-size", {forward(no_size, 44)}},
          {"next-tiles", {forward(two_tiles, 44)}},
          {"next-image-tokens", {forward(input_of(a), 16)}},
          {"next-anyres",
           {lib([&] { (void)image::preprocess_anyres(img, odd); }), lib([&] {
              image::ProcessorConfig none = odd;
              none.image_grid_pinpoints.clear();
              (void)image::preprocess_anyres(img, none);
            })}},
      });
}

}  // namespace
}  // namespace latentllm::test
