// LLaVA-1.5 (model::LlavaModel) against ../shared/models/llava-shapes-tiny/REFERENCE.json, an
// independent float64 transcription of the HF forward: for each example, from its input_ids and
// preprocessed pixel_values, the vision tower's hidden_states[-2], the projected image features, the
// last-position logits, the option letters' logits and the greedy tokens. Also: the newer transformers
// key layout, the language model through model::Model::load (text-only commands), the tokenizer with
// the <image> added token, and the "Multimodal checkpoints" catalogue of docs/ERRORS.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "errors_doc.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/tokenizer.hpp"
#include "model/vision.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kTol = 1e-4;

fs::path fixture() { return shared_path("models/llava-shapes-tiny"); }

const json& reference() {
  static const json r = [] {
    std::ifstream in(fixture() / "REFERENCE.json");
    return json::parse(in);
  }();
  return r;
}

const model::LlavaModel& llava() {
  static const model::LlavaModel m = model::LlavaModel::load(fixture());
  return m;
}

struct Example {
  std::vector<std::int32_t> ids;  // [T]
  std::vector<float> pixels;      // [n_img, 3, 64, 64] (empty for a text prompt)
  int n_img = 0;
};

Example example(const json& e) {
  Example x;
  x.ids = e.at("input_ids").get<std::vector<std::int32_t>>();
  if (e.contains("pixel_values")) {
    x.pixels = e.at("pixel_values").at("values_rounded_7").get<std::vector<float>>();
    x.n_img = 1;
  }
  return x;
}

// max |a[i] − ref[i]| over ref's entries, expecting each within kTol.
double expect_near(const float* a, const json& ref, const std::string& what) {
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - ref[i].get<double>());
    EXPECT_LE(d, kTol) << what << "[" << i << "]: " << a[i] << " vs " << ref[i].get<double>();
    worst = std::max(worst, d);
  }
  return worst;
}

TEST(Llava, ConfigAndParameterCounts) {
  const auto& c = llava().config();
  EXPECT_EQ(c.text.model_type, "llama");
  EXPECT_EQ(c.text.multimodal_architecture, "LlavaForConditionalGeneration");
  EXPECT_TRUE(c.text.tie_word_embeddings);
  EXPECT_EQ(c.image_token_index, 2048);
  EXPECT_EQ(c.feature_layers(), std::vector<int>({3}));
  EXPECT_EQ(c.features_per_image(), 16);
  const auto& p = llava().component_params();
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], std::make_pair(std::string("vision"), std::int64_t{250496}));
  EXPECT_EQ(p[1], std::make_pair(std::string("projector"), std::int64_t{24832}));
  EXPECT_EQ(p[2], std::make_pair(std::string("language"), std::int64_t{656128}));
  // Encoder layer 3 feeds no feature: not loaded. Its modules are there by role like a decoder layer's.
  const auto& v = llava().vision_tower();
  EXPECT_EQ(v.num_layers(), 3);
  EXPECT_EQ(v.layer(0).linear(model::Role::Up).name, "vision_tower.vision_model.encoder.layers.0.mlp.fc1");
  EXPECT_EQ(v.layer(0).linear(model::Role::O).out, 64);
}

// A config.json in the shape of llava-hf/llava-1.5-7b-hf's: transformers saved text_config without the
// values equal to LlamaConfig's defaults, and vision_config without CLIPVisionConfig's.
TEST(Llava, NestedConfigsTakeTheirClassDefaults) {
  const json doc = json::parse(R"({
    "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "image_token_index": 32000,
    "pad_token_id": 32001, "projector_hidden_act": "gelu", "tie_word_embeddings": false, "vocab_size": 32064,
    "text_config": {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096,
                    "model_type": "llama", "rms_norm_eps": 1e-05, "torch_dtype": "float16", "vocab_size": 32064},
    "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                      "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                      "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default"})");
  const auto c = model::parse_llava_config(doc, "config.json");
  EXPECT_EQ(c.text.hidden_size, 4096);
  EXPECT_EQ(c.text.intermediate_size, 11008);
  EXPECT_EQ(c.text.num_hidden_layers, 32);
  EXPECT_EQ(c.text.num_key_value_heads, 32);
  EXPECT_EQ(c.text.vocab_size, 32064);
  EXPECT_EQ(c.text.max_position_embeddings, 4096);
  EXPECT_FALSE(c.text.tie_word_embeddings);
  EXPECT_EQ(c.vision.num_positions(), 577);
  EXPECT_EQ(c.vision.hidden_act, "quick_gelu");
  EXPECT_EQ(c.feature_layers(), std::vector<int>({23}));
  EXPECT_EQ(c.features_per_image(), 576);
  EXPECT_EQ(model::parse_config(doc, "config.json").multimodal_architecture, "LlavaForConditionalGeneration");
}

TEST(Llava, VisionHiddenStatesAndImageFeatures) {
  double worst_h = 0, worst_f = 0;
  for (const json& e : reference().at("examples")) {
    if (!e.contains("pixel_values")) continue;
    SCOPED_TRACE(e.at("pid").get<std::string>());
    const Example x = example(e);
    MatrixF h, f;  // [17, 64], [16, 128]
    llava().vision_hidden_state(x.pixels, 1, -2, h);
    ASSERT_EQ(h.rows(), 17);
    for (const auto& [row, key] : {std::pair{0, "vision_hidden_states_m2_cls_first8"},
                                   std::pair{1, "vision_hidden_states_m2_patch0_first8"}}) {
      worst_h = std::max(worst_h, expect_near(h.row(row).data(), e.at(key), key));
    }
    llava().image_features(x.pixels, 1, f);
    ASSERT_EQ(f.rows(), 16);
    ASSERT_EQ(f.cols(), 128);
    worst_f = std::max(worst_f, expect_near(f.row(0).data(), e.at("image_features_row0_first8"), "features row 0"));
    worst_f = std::max(worst_f, expect_near(f.row(15).data(), e.at("image_features_row15_first8"), "features row 15"));
  }
  std::printf("max |Δ| vs REFERENCE.json: hidden_states[-2] %.3g, image features %.3g\n", worst_h, worst_f);
}

TEST(Llava, LastLogitsLettersAndGreedy) {
  const auto& letters = reference().at("answer_token_ids");
  double worst = 0;
  for (const json& e : reference().at("examples")) {
    SCOPED_TRACE(e.at("pid").get<std::string>());
    const Example x = example(e);
    MatrixF logits;  // [T, V]
    llava().forward(x.ids, x.pixels, x.n_img, logits);
    ASSERT_EQ(logits.rows(), static_cast<std::int64_t>(x.ids.size()));
    ASSERT_EQ(logits.cols(), 2049);
    const VectorF last = logits.row(logits.rows() - 1).transpose();  // [V]
    worst = std::max(worst, expect_near(last.data(), e.at("last_logits_first16"), "last logits"));
    Eigen::Index best = 0;
    last.maxCoeff(&best);
    EXPECT_EQ(best, e.at("last_logits_argmax").get<int>());
    for (const auto& [letter, value] : e.at("letter_logits").items()) {
      const float got = last[letters.at(letter).get<int>()];
      const double d = std::abs(got - value.get<double>());
      EXPECT_LE(d, kTol) << "letter " << letter;
      worst = std::max(worst, d);
    }
    const auto greedy = llava().generate_greedy(x.ids, x.pixels, x.n_img, 3, 2);
    EXPECT_EQ(greedy, e.at("greedy_tokens").get<std::vector<std::int32_t>>());
  }
  std::printf("max |Δlogit| vs REFERENCE.json (first 16 + option letters, 3 examples): %.3g\n", worst);
}

// The text prompt through model::Model::load (what ppl and generate load): the same language model.
TEST(Llava, TextOnlyModelLoadRunsTheLanguageModel) {
  const auto m = model::Model::load(fixture());
  EXPECT_EQ(m->config().multimodal_architecture, "LlavaForConditionalGeneration");
  for (const json& e : reference().at("examples")) {
    if (e.contains("pixel_values")) continue;
    const Example x = example(e);
    const int T = static_cast<int>(x.ids.size());
    MatrixF h, logits;  // [T, d], [T, V]
    m->embed(x.ids, T, h);
    for (int i = 0; i < m->num_layers(); ++i) m->layer_forward(i, h, T);
    m->head(h, logits);
    expect_near(logits.row(T - 1).data(), e.at("last_logits_first16"), "text-only last logits");
  }
}

// The fixture's tensors renamed to the newer transformers layout.
fs::path repack_new_layout() {
  const fs::path dir = make_temp_dir("llava-new-layout");
  const io::SafetensorsFile src(fixture() / "model.safetensors");
  std::vector<std::vector<float>> values;
  std::vector<io::TensorToWrite> out;
  values.reserve(src.tensors().size());
  for (const TensorView& t : src.tensors()) {
    std::string name = t.name;
    if (name.starts_with("language_model.model.")) name = "model.language_model." + name.substr(21);
    else if (name.starts_with("language_model.lm_head.")) name = name.substr(15);
    else name = "model." + name;
    values.push_back(t.to_f32());
    out.push_back({name, t.dtype, t.shape, values.back()});
  }
  std::reverse(out.begin(), out.end());  // order does not matter either
  io::write_safetensors(dir / "model.safetensors", out, {{"format", "pt"}});
  fs::copy_file(fixture() / "config.json", dir / "config.json");
  return dir;
}

TEST(Llava, NewerTransformersKeyLayoutGivesTheSameLogits) {
  const model::LlavaModel m = model::LlavaModel::load(repack_new_layout());
  EXPECT_EQ(m.vision_tower().layer(0).linear(model::Role::Q).name,
            "model.vision_tower.vision_model.encoder.layers.0.self_attn.q_proj");
  EXPECT_EQ(m.component_params(), llava().component_params());
  const Example x = example(reference().at("examples").at(0));
  MatrixF a, b;  // [T, V]
  llava().forward(x.ids, x.pixels, x.n_img, a);
  m.forward(x.ids, x.pixels, x.n_img, b);
  EXPECT_EQ((a - b).cwiseAbs().maxCoeff(), 0.0f);
}

// The fixture with config.json patched and, when given, linear_1's weight replaced: w1 [128, in].
fs::path variant(const json& patch, const MatrixF* w1 = nullptr) {
  const fs::path dir = make_temp_dir("llava-variant");
  const io::SafetensorsFile src(fixture() / "model.safetensors");
  std::vector<std::vector<float>> values;
  std::vector<io::TensorToWrite> out;
  values.reserve(src.tensors().size());
  for (const TensorView& t : src.tensors()) {
    if (w1 != nullptr && t.name == "multi_modal_projector.linear_1.weight") {
      values.emplace_back(w1->data(), w1->data() + w1->size());
      out.push_back({t.name, t.dtype, {w1->rows(), w1->cols()}, values.back()});
      continue;
    }
    values.push_back(t.to_f32());
    out.push_back({t.name, t.dtype, t.shape, values.back()});
  }
  io::write_safetensors(dir / "model.safetensors", out);
  std::ifstream in(fixture() / "config.json");
  json config = json::parse(in);
  config.merge_patch(patch);
  std::ofstream(dir / "config.json") << config.dump(1);
  return dir;
}

// vision_feature_layer as a list: the selected hidden states concatenated along the hidden dimension
// in the list's order (LlavaModel.get_image_features). With linear_1 = [W | 0] for [-2, 0] and [0 | W]
// for [0, -2], the features are the fixture's: the order and the index 0 (pre_layrnorm output) are right.
TEST(Llava, FeatureLayerListConcatenatesInOrder) {
  const Example x = example(reference().at("examples").at(0));
  MatrixF expected, got;  // [16, 128]
  llava().image_features(x.pixels, 1, expected);
  const io::SafetensorsFile src(fixture() / "model.safetensors");
  const MatrixF W = src.matrix("multi_modal_projector.linear_1.weight");  // [128, 64]
  for (const bool first : {true, false}) {
    MatrixF w1 = MatrixF::Zero(128, 128);  // [128, 2·64]
    w1.middleCols(first ? 0 : 64, 64) = W;
    const json layers = first ? json{-2, 0} : json{0, -2};
    const model::LlavaModel m = model::LlavaModel::load(variant({{"vision_feature_layer", layers}}, &w1));
    EXPECT_EQ(m.vision_tower().num_layers(), 3);
    m.image_features(x.pixels, 1, got);
    ASSERT_EQ(got.rows(), 16);
    EXPECT_LE((got - expected).cwiseAbs().maxCoeff(), 1e-5f * expected.cwiseAbs().maxCoeff()) << layers.dump();
  }
}

// "full" keeps the CLS position: 17 features per image, the last 16 those of "default", and the prompt
// needs 17 image tokens.
TEST(Llava, FullStrategyKeepsTheClsPosition) {
  const Example x = example(reference().at("examples").at(0));
  const model::LlavaModel m = model::LlavaModel::load(variant({{"vision_feature_select_strategy", "full"}}));
  EXPECT_EQ(m.config().features_per_image(), 17);
  MatrixF expected, got;  // [16, 128], [17, 128]
  llava().image_features(x.pixels, 1, expected);
  m.image_features(x.pixels, 1, got);
  ASSERT_EQ(got.rows(), 17);
  EXPECT_LE((got.bottomRows(16) - expected).cwiseAbs().maxCoeff(), 1e-5f * expected.cwiseAbs().maxCoeff());
  std::vector<std::int32_t> ids = x.ids;  // [T + 1]
  ids.insert(std::find(ids.begin(), ids.end(), 2048), 2048);
  MatrixF logits;  // [T + 1, V]
  m.forward(ids, x.pixels, 1, logits);
  EXPECT_EQ(logits.rows(), static_cast<std::int64_t>(ids.size()));
  EXPECT_THROW(m.forward(x.ids, x.pixels, 1, logits), ConfigError);
}

// Two images in one call: each image's features are those it has alone, in the order of the images.
TEST(Llava, TwoImagesKeepTheirOrder) {
  const auto& ex = reference().at("examples");
  const Example a = example(ex.at(0)), b = example(ex.at(2));
  std::vector<float> both = a.pixels;  // [2, 3, 64, 64]
  both.insert(both.end(), b.pixels.begin(), b.pixels.end());
  MatrixF fa, fb, f;  // [16, 128], [16, 128], [32, 128]
  llava().image_features(a.pixels, 1, fa);
  llava().image_features(b.pixels, 1, fb);
  llava().image_features(both, 2, f);
  ASSERT_EQ(f.rows(), 32);
  // The GEMMs block [32, ·] differently from [16, ·]: float rounding, relative to the largest feature.
  const float tol = 1e-5f * std::max(fa.cwiseAbs().maxCoeff(), fb.cwiseAbs().maxCoeff());
  EXPECT_LE((f.topRows(16) - fa).cwiseAbs().maxCoeff(), tol);
  EXPECT_LE((f.bottomRows(16) - fb).cwiseAbs().maxCoeff(), tol);
  // A prompt with both images' tokens runs; the count must match two images.
  std::vector<std::int32_t> ids = a.ids;
  ids.insert(std::find(ids.begin(), ids.end(), 2048), 16, 2048);
  MatrixF logits;  // [T + 16, V]
  llava().forward(ids, both, 2, logits);
  EXPECT_EQ(logits.rows(), static_cast<std::int64_t>(ids.size()));
  EXPECT_THROW(llava().forward(a.ids, both, 2, logits), ConfigError);
}

// The vision tower reports each encoder layer's module inputs by site, as a decoder layer does (the seam
// a compressor's calibration uses).
TEST(Llava, VisionLayersReportTheirSites) {
  struct Sites : model::ForwardObserver {
    std::vector<std::pair<int, model::Site>> seen;
    std::vector<std::int64_t> widths;
    void on_input(int layer, model::Site site, const MatrixF& x) override {
      seen.emplace_back(layer, site);
      widths.push_back(x.cols());
    }
  } obs;
  const Example x = example(reference().at("examples").at(0));
  const auto& v = llava().vision_tower();
  MatrixF h, plain;  // [17, 64]
  v.embed(x.pixels, 1, h);
  plain = h;
  v.layer_forward(0, h, &obs);
  v.layer_forward(0, plain);
  EXPECT_EQ(h, plain);
  using model::Site;
  EXPECT_EQ(obs.seen, (std::vector<std::pair<int, Site>>{{0, Site::AttnIn}, {0, Site::AttnOut}, {0, Site::MlpIn},
                                                         {0, Site::MlpMid}}));
  EXPECT_EQ(obs.widths, (std::vector<std::int64_t>{64, 64, 64, 256}));
  EXPECT_EQ(v.layer(0).linear(model::Role::Down).site, Site::MlpMid);
}

// A lazy language model (what ppl may load) maps the key layout the same way.
TEST(Llava, LazyLanguageModelLoads) {
  const auto m = model::Model::load(fixture(), {.lazy = true});
  for (int i = 0; i < m->num_layers(); ++i) m->load_layer(i);
  const Example x = example(reference().at("examples").at(1));
  const int T = static_cast<int>(x.ids.size());
  MatrixF h, logits;  // [T, d], [T, V]
  m->embed(x.ids, T, h);
  for (int i = 0; i < m->num_layers(); ++i) m->layer_forward(i, h, T);
  m->head(h, logits);
  expect_near(logits.row(T - 1).data(), reference().at("examples").at(1).at("last_logits_first16"), "lazy");
}

// latentllm inspect: the language model, and the stored parameters per component.
TEST(Llava, InspectPrintsTheComponents) {
  std::string out;
  ASSERT_EQ(run_command(cli_path().string() + " inspect --json " + fixture().string() + " 2>/dev/null", out), 0) << out;
  const json j = json::parse(out);
  EXPECT_EQ(j.at("architecture"), "LlamaForCausalLM");
  EXPECT_EQ(j.at("model_params"), 656128);
  EXPECT_EQ(j.at("multimodal").at("architecture"), "LlavaForConditionalGeneration");
  EXPECT_EQ(j.at("multimodal").at("components"), json({{"vision", 250496}, {"projector", 24832}, {"language", 656128}}));
}

// HF splits the text on the added token "<image>" first and normalizes each remaining piece alone.
TEST(Llava, TokenizerSplitsOnTheImageToken) {
  const auto tok = io::load_tokenizer(fixture());
  const int n = reference().at("image_seq_length").get<int>();
  std::string copies;
  for (int i = 0; i < n; ++i) copies += "<image>";
  for (const json& e : reference().at("examples")) {
    std::string prompt = e.at("prompt").get<std::string>();
    if (const auto pos = prompt.find("<image>"); pos != std::string::npos) prompt.replace(pos, 7, copies);
    EXPECT_EQ(tok->encode(prompt), e.at("input_ids").get<std::vector<std::int32_t>>()) << e.at("pid");
  }
}

// ---- docs/ERRORS.md, "Multimodal checkpoints" ----

json fixture_config() {
  std::ifstream in(fixture() / "config.json");
  return json::parse(in);
}

CaseFn config_with(const json& patch) {
  return lib([patch] {
    json c = fixture_config();
    c.merge_patch(patch);
    (void)model::parse_llava_config(c, "dir/config.json");
  });
}

// The fixture's checkpoint without the tensors whose names start with `drop`.
// The fixture without the tensors whose names start with `drop`, and with one more tensor `extra` (if any).
CaseFn checkpoint_without(const std::string& drop, const std::string& extra = "") {
  return lib([drop, extra] {
    const fs::path dir = make_temp_dir("llava-err");
    const io::SafetensorsFile src(fixture() / "model.safetensors");
    std::vector<std::vector<float>> values;
    std::vector<io::TensorToWrite> out;
    values.reserve(src.tensors().size());
    for (const TensorView& t : src.tensors()) {
      if (t.name.starts_with(drop)) continue;
      values.push_back(t.to_f32());
      out.push_back({t.name, t.dtype, t.shape, values.back()});
    }
    const std::vector<float> one(4, 0.5f);
    if (!extra.empty()) out.push_back({extra, DType::F32, {4}, one});
    io::write_safetensors(dir / "model.safetensors", out);
    fs::copy_file(fixture() / "config.json", dir / "config.json");
    (void)model::LlavaModel::load(dir);
  });
}

TEST(ErrorsDoc, MultimodalCheckpoints) {
  const Example x = example(reference().at("examples").at(0));
  check_section(
      "Multimodal checkpoints (`model::LlavaModel`)",
      {
          {"llava-arch",
           {lib([] { (void)model::parse_llava_config(json{{"architectures", {"LlamaForCausalLM"}}}, "dir/config.json"); })}},
          {"llava-text-config", {config_with({{"text_config", nullptr}}), config_with({{"text_config", 3}})}},
          {"llava-vision-type", {config_with({{"vision_config", {{"model_type", "siglip_vision_model"}}}})}},
          {"llava-feature-layer",
           {config_with({{"vision_feature_layer", 5}}), config_with({{"vision_feature_layer", json::array()}}),
            config_with({{"vision_feature_layer", {-2, "x"}}})}},
          {"llava-strategy", {config_with({{"vision_feature_select_strategy", "cls"}})}},
          {"llava-layout", {checkpoint_without("language_model.")}},
          {"llava-missing-tensor", {checkpoint_without("vision_tower.vision_model.pre_layrnorm.bias")}},
          {"llava-foreign-tensor", {checkpoint_without("no such prefix", "image_newline")}},
          {"llava-unused-language", {checkpoint_without("no such prefix", "language_model.model.layers.2.mlp.up_proj.weight")}},
          {"llava-pixels",
           {lib([&] {
             MatrixF logits;
             llava().forward(x.ids, std::span<const float>(x.pixels).first(100), 1, logits);
           })}},
          {"llava-image-tokens",
           {lib([&] {
             MatrixF logits;
             llava().forward(std::span<const std::int32_t>(x.ids).first(80), x.pixels, 1, logits);
           })}},
      });
}

}  // namespace
}  // namespace latentllm::test
