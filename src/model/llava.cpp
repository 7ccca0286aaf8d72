// LLaVA (HF modeling_llava.py, LlavaForConditionalGeneration): a vision tower (vision.hpp) whose
// selected hidden states go through a two-layer MLP projector (linear_1 → projector_hidden_act →
// linear_2) and replace, in order, the embeddings of the prompt's image tokens; the language model is
// a model::Model of its family. LLaVA-NeXT (modeling_llava_next.py) is a row of the same table: its
// images are tiles whose features are packed by llava_next.cpp. The checkpoint's key layout (hub or
// newer transformers) is mapped once, at load, so every part reads its own HF names.
#include <algorithm>
#include <map>
#include <fmt/format.h>

#include "io/json_keys.hpp"
#include "io/latent_format.hpp"
#include "latentllm/error.hpp"
#include "latentllm/multimodal.hpp"
#include "model/arch.hpp"
#include "model/llava_next.hpp"
#include "model/ops.hpp"
#include "model/vision.hpp"

namespace latentllm::model {

using json = nlohmann::json;

namespace {

// The LLaVA architectures: architectures[0], the model_type that stands for it, anyres (NeXT).
struct LlavaVariant {
  std::string_view architecture, model_type;
};
constexpr LlavaVariant kVariants[] = {
    {"LlavaForConditionalGeneration", "llava"},
    {"LlavaNextForConditionalGeneration", "llava_next"},
};

// Where each part's tensors are in one of the two layouts found in the wild.
struct LlavaLayout {
  std::string lm_model, lm_head;  // the prefixes "model." and "lm_head." of the language model map to
  std::string vision, projector;  // vision tower (its vision_model) and projector prefixes
  std::string image_newline;      // NeXT's [d] tensor
};
// The hub's (llava-hf/*, written by older transformers) and newer transformers' save_pretrained layout.
const LlavaLayout kHubLayout = {"language_model.model.", "language_model.lm_head.", "vision_tower.vision_model.",
                                "multi_modal_projector.", "image_newline"};
const LlavaLayout kNewLayout = {"model.language_model.", "lm_head.", "model.vision_tower.vision_model.",
                                "model.multi_modal_projector.", "model.image_newline"};

const LlavaLayout& detect_layout(const WeightLoader& w) {
  if (w.has_prefix(kHubLayout.lm_model)) return kHubLayout;
  if (w.has_prefix(kNewLayout.lm_model)) return kNewLayout;
  throw FormatError(fmt::format("{}: LLaVA key layout (expected tensors under {} or {}, got neither)",
                                w.dir().string(), kHubLayout.lm_model, kNewLayout.lm_model));
}

// vision_feature_layer: an integer or a non-empty list of integers, each in −(L_v + 1)..L_v.
std::vector<std::int64_t> parse_feature_layers(const io::JsonKeys& k, std::int64_t L) {
  const json* v = k.find("vision_feature_layer");
  if (v == nullptr) return {-2};
  const std::string expected = fmt::format("an integer or a non-empty list of integers in {}..{}", -(L + 1), L);
  std::vector<std::int64_t> out;
  const auto take = [&](const json& x) {
    if (!x.is_number_integer() || x.get<std::int64_t>() < -(L + 1) || x.get<std::int64_t>() > L) {
      k.fail("vision_feature_layer", expected, v);
    }
    out.push_back(x.get<std::int64_t>());
  };
  if (v->is_array()) {
    if (v->empty()) k.fail("vision_feature_layer", expected, v);
    for (const json& x : *v) take(x);
  } else {
    take(*v);
  }
  return out;
}

// vision_config (LlavaConfig: model_type "clip_vision_model" when absent) -> its architecture.
const VisionArchitecture& parse_vision(const io::JsonKeys& k, VisionConfig& c) {
  const json* v = k.find("vision_config");
  static const json kEmpty = json::object();
  if (v != nullptr && !v->is_object()) k.fail("vision_config", "an object", v);
  const io::JsonKeys sub(v != nullptr ? *v : kEmpty, k.origin() + ": vision_config");
  c.model_type = sub.string_or("model_type", "clip_vision_model");
  for (const VisionArchitecture& a : clip_architectures()) {
    if (a.model_type != c.model_type) continue;
    a.parse(sub, c);
    return a;
  }
  throw ConfigError(fmt::format("{}: vision_config.model_type (expected clip_vision_model, got {})", k.origin(),
                                c.model_type));
}

// text_config, parsed by its family's parser; model_type "llama" when absent (LlavaConfig), the top-level
// tie_word_embeddings when text_config does not set it, and its config class's defaults for the sizes
// it leaves out (transformers saves a nested config without its default values: llava-1.5-7b-hf's
// text_config holds vocab_size and max_position_embeddings of the Llama sizes only).
ModelConfig parse_text(const io::JsonKeys& k) {
  const json* t = k.find("text_config");
  if (t == nullptr || !t->is_object()) k.fail("text_config", "an object", t);
  json text = *t;
  if (!text.contains("architectures") && !text.contains("model_type")) text["model_type"] = "llama";
  if (!text.contains("tie_word_embeddings") && k.find("tie_word_embeddings") != nullptr) {
    text["tie_word_embeddings"] = *k.find("tie_word_embeddings");
  }
  return parse_config(with_class_defaults(text), k.origin() + ": text_config");
}

std::string architecture_of(const json& doc) {
  if (!doc.is_object()) return "";
  const auto a = doc.find("architectures");
  if (a != doc.end() && a->is_array() && !a->empty() && a->front().is_string()) return a->front().get<std::string>();
  const auto t = doc.find("model_type");
  for (const LlavaVariant& v : kVariants)
    if (t != doc.end() && t->is_string() && *t == v.model_type) return std::string(v.architecture);
  return "";
}

bool known_architecture(const std::string& a) {
  for (const LlavaVariant& v : kVariants)
    if (a == v.architecture) return true;
  return false;
}

// Stored parameters of the vision tower, the projector (with NeXT's image_newline) and the rest (the
// language model).
std::vector<std::pair<std::string, std::int64_t>> component_params_of(const io::TensorStore& store,
                                                                      const LlavaLayout& layout) {
  std::int64_t vision = 0, projector = 0, language = 0;
  for (const auto& name : store.names()) {
    const std::int64_t n = store.get(name).numel();
    if (name.starts_with(layout.vision)) vision += n;
    else if (name.starts_with(layout.projector) || name == layout.image_newline) projector += n;
    else language += n;
  }
  return {{"vision", vision}, {"projector", projector}, {"language", language}};
}

// The stored tensors that belong to no part of the checkpoint are errors (the language model's unused
// ones are found by Model::load; the vision encoder's layers past the feature layer and post_layernorm
// are stored but never read).
void check_parts(const io::TensorStore& store, const LlavaLayout& layout, bool anyres,
                 const std::filesystem::path& dir) {
  std::vector<std::string> parts = {layout.lm_model, layout.lm_head, layout.vision, layout.projector};
  if (anyres) parts.push_back(layout.image_newline);
  for (const auto& n : store.names()) {
    if (std::any_of(parts.begin(), parts.end(), [&](const std::string& p) { return n.starts_with(p); })) continue;
    std::string list = parts.front();
    for (std::size_t i = 1; i < parts.size(); ++i) list += (i + 1 == parts.size() ? " or " : ", ") + parts[i];
    throw FormatError(fmt::format("{}: stored tensor {} belongs to no part of the LLaVA checkpoint (expected names "
                                  "under {})", dir.string(), n, list));
  }
}

}  // namespace

// ---- config ---------------------------------------------------------------------------------------

std::vector<int> LlavaConfig::feature_layers() const {
  std::vector<int> out;
  for (auto i : vision_feature_layers) out.push_back(static_cast<int>(i < 0 ? vision.num_hidden_layers + 1 + i : i));
  return out;
}

std::int64_t LlavaConfig::features_per_image() const {
  return vision.num_positions() - (vision_feature_select_strategy == "default" ? 1 : 0);
}

bool is_llava_config(const json& doc) { return known_architecture(architecture_of(io::with_source_identity(doc))); }

LlavaConfig parse_llava_config(const json& stored, const std::string& origin) {
  const json doc = io::with_source_identity(stored);  // a latent checkpoint reads as its source model
  const io::JsonKeys k(doc, origin);
  LlavaConfig c;
  c.architecture = architecture_of(doc);
  if (!known_architecture(c.architecture)) {
    throw ConfigError(fmt::format("{}: architectures (expected {} or {}, got {})", origin, kVariants[0].architecture,
                                  kVariants[1].architecture, c.architecture.empty() ? "none" : c.architecture));
  }
  c.text = parse_text(k);
  c.text.multimodal_architecture = c.architecture;
  c.text.raw = doc;
  parse_vision(k, c.vision);
  c.image_token_index = k.positive_or("image_token_index", k.positive_or("image_token_id", 32000));
  c.vision_feature_layers = parse_feature_layers(k, c.vision.num_hidden_layers);
  c.vision_feature_select_strategy = k.string_or("vision_feature_select_strategy", "default");
  if (c.vision_feature_select_strategy != "default" && c.vision_feature_select_strategy != "full") {
    k.fail("vision_feature_select_strategy", "default or full", k.find("vision_feature_select_strategy"));
  }
  c.projector_hidden_act = k.string_or("projector_hidden_act", "gelu");
  (void)parse_activation(c.projector_hidden_act, origin + ": projector_hidden_act");
  c.multimodal_projector_bias = k.boolean_or("multimodal_projector_bias", true);
  c.image_seq_length = k.positive_or("image_seq_length", 576);
  if (c.anyres()) {
    // pack_image_features views each tile's features as p_n × p_n: the CLS row must be gone.
    if (c.vision_feature_select_strategy != "default") {
      k.fail("vision_feature_select_strategy", "default for LlavaNextForConditionalGeneration",
             k.find("vision_feature_select_strategy"));
    }
    c.image_grid_pinpoints = parse_llava_next_pinpoints(k, c.vision.image_size);
  }
  c.raw = doc;
  return c;
}

std::vector<WeightLoader::PrefixRule> multimodal_language_rules(const WeightLoader& w) {
  const LlavaLayout& l = detect_layout(w);
  return {{"model.", l.lm_model}, {"lm_head.", l.lm_head}};
}

std::vector<std::string> multimodal_tower_prefixes(const WeightLoader& w) {
  const LlavaLayout& l = detect_layout(w);
  return {l.vision, l.projector};
}

// ---- the projector --------------------------------------------------------------------------------

// LlavaMultiModalProjector: y = linear_2(act(linear_1(x))).
class Projector {
 public:
  Projector(const LlavaConfig& c, WeightLoader& w, const std::string& prefix) {
    const std::int64_t in = c.vision.hidden_size * static_cast<std::int64_t>(c.vision_feature_layers.size());
    const std::int64_t d = c.text.hidden_size;
    act_ = parse_activation(c.projector_hidden_act, "projector_hidden_act");
    l1_ = w.linear(prefix + "linear_1", in, d, c.multimodal_projector_bias);
    l2_ = w.linear(prefix + "linear_2", d, d, c.multimodal_projector_bias);
  }
  // x: [n, d_v·m] -> y: [n, d]
  void forward(const MatrixF& x, MatrixF& y) const {
    MatrixF u;  // [n, d]
    l1_.forward(x, u);
    activate_span(u.data(), u.size(), act_);
    l2_.forward(u, y);
  }
  std::array<Linear*, 2> modules() { return {&l1_, &l2_}; }
  Activation activation() const { return act_; }

 private:
  Activation act_ = Activation::Gelu;
  Linear l1_, l2_;  // [d, d_v·m], [d, d]
};

// ---- the model ------------------------------------------------------------------------------------

LlavaModel::LlavaModel() = default;
LlavaModel::~LlavaModel() = default;
LlavaModel::LlavaModel(LlavaModel&&) noexcept = default;
LlavaModel& LlavaModel::operator=(LlavaModel&&) noexcept = default;

LlavaModel LlavaModel::load(const std::filesystem::path& dir, const LoadOptions& opt) {
  LlavaModel m;
  m.dir_ = dir;
  m.config_ = parse_llava_config(io::load_json_file(dir / "config.json"), (dir / "config.json").string());
  m.lm_ = Model::load(dir, opt);
  const io::TensorStore store = io::TensorStore::open(dir);
  const LlavaLayout& layout = detect_layout(WeightLoader(store, {}));
  // A latent checkpoint's factored vision and projector modules (compress --components): the entries
  // under their stored prefixes; the language model's are Model::load's.
  std::map<std::string, io::LatentModule> latent;
  for (auto& [name, lm] : io::parse_latent_modules(m.config_.raw, (dir / "config.json").string()))
    if (name.starts_with(layout.vision) || name.starts_with(layout.projector)) latent.emplace(name, std::move(lm));
  WeightLoader w(store, std::move(latent));
  check_parts(store, layout, m.config_.anyres(), dir);
  const auto layers = m.config_.feature_layers();
  const int deepest = *std::max_element(layers.begin(), layers.end());
  for (const VisionArchitecture& a : clip_architectures())
    if (a.model_type == m.config_.vision.model_type) m.vision_ = a.make(m.config_.vision, w, layout.vision, deepest);
  m.projector_ = std::make_unique<Projector>(m.config_, w, layout.projector);
  w.check_latent_used();
  if (m.config_.anyres()) {
    const VectorF nl = w.vector(layout.image_newline, m.config_.text.hidden_size);  // [d]
    m.image_newline_.assign(nl.data(), nl.data() + nl.size());
  }
  m.params_ = component_params_of(store, layout);
  return m;
}

std::unique_ptr<Model> LlavaModel::swap_language_model(std::unique_ptr<Model> lm) {
  const ModelConfig& a = lm_->config();
  const ModelConfig& b = lm->config();
  if (b.hidden_size != a.hidden_size || b.vocab_size != a.vocab_size) {
    throw ConfigError(fmt::format("{}: language model of hidden size {} and vocabulary {} (expected {} and {}, this "
                                  "checkpoint's)", dir_.string(), b.hidden_size, b.vocab_size, a.hidden_size,
                                  a.vocab_size));
  }
  std::swap(lm_, lm);
  return lm;
}

std::vector<std::pair<std::string, std::int64_t>> llava_component_params(const std::filesystem::path& dir) {
  const io::TensorStore store = io::TensorStore::open(dir);
  const WeightLoader w(store, {});
  return component_params_of(store, detect_layout(w));
}

void LlavaModel::check_pixels(std::span<const float> pixels, int n) const {
  const VisionConfig& v = config_.vision;
  const std::int64_t expected = n * v.num_channels * v.image_size * v.image_size;
  if (n < 0 || static_cast<std::int64_t>(pixels.size()) != expected) {
    throw ConfigError(fmt::format("{}: pixel_values (expected {}·{}·{}·{} = {} values, got {})", dir_.string(), n,
                                  v.num_channels, v.image_size, v.image_size, expected, pixels.size()));
  }
}

void LlavaModel::vision_hidden_state(std::span<const float> pixels, int n_img, int index, MatrixF& h) const {
  const VisionConfig& v = config_.vision;
  check_pixels(pixels, n_img);
  const int k = index < 0 ? static_cast<int>(v.num_hidden_layers) + 1 + index : index;
  if (k < 0 || k > vision_->num_layers()) {
    throw Error(fmt::format("{}: vision hidden state {} (expected one of the loaded {}..{})", dir_.string(), index,
                            -static_cast<int>(v.num_hidden_layers) - 1, vision_->num_layers()));
  }
  vision_->embed(pixels, n_img, h);  // [n_img·P, d_v] hidden_states[0]
  for (int i = 0; i < k; ++i) vision_->layer_forward(i, h);
}

// LlavaModel.get_image_features: the selected hidden states (CLS dropped by "default"), concatenated
// along the hidden dimension in the list's order, then the projector.
void LlavaModel::projector_input(std::span<const float> pixels, int n_img, MatrixF& sel) const {
  const auto layers = config_.feature_layers();
  const std::int64_t P = config_.vision.num_positions(), d_v = config_.vision.hidden_size;
  const std::int64_t n_feat = config_.features_per_image(), skip = P - n_feat;
  sel.resize(n_img * n_feat, d_v * static_cast<std::int64_t>(layers.size()));  // [n_img·n_feat, d_v·m]
  MatrixF h;                                                                      // [n_img·P, d_v]
  const auto take = [&](int k) {
    for (std::size_t j = 0; j < layers.size(); ++j) {
      if (layers[j] != k) continue;
      for (std::int64_t i = 0; i < n_img; ++i)
        sel.block(i * n_feat, static_cast<std::int64_t>(j) * d_v, n_feat, d_v) = h.middleRows(i * P + skip, n_feat);
    }
  };
  vision_hidden_state(pixels, n_img, 0, h);
  take(0);
  for (int i = 0; i < vision_->num_layers(); ++i) {
    vision_->layer_forward(i, h);
    take(i + 1);
  }
}

void LlavaModel::image_features(std::span<const float> pixels, int n_img, MatrixF& f) const {
  MatrixF sel;  // [n_img·n_feat, d_v·m]
  projector_input(pixels, n_img, sel);
  projector_->forward(sel, f);  // [n_img·n_feat, d]
}

std::array<Linear*, 2> LlavaModel::projector_modules() { return projector_->modules(); }
Activation LlavaModel::projector_activation() const { return projector_->activation(); }

std::int64_t LlavaModel::image_tokens(const ImageInput& image) const {
  if (!config_.anyres()) return image.n_tiles * config_.features_per_image();  // each tile an image
  if (image.height < 1 || image.width < 1) {
    throw ConfigError(fmt::format("{}: image size {}x{} (expected the original width and height, at least 1)",
                                  dir_.string(), image.width, image.height));
  }
  return llava_next_num_image_tokens(image.height, image.width, config_);
}

void LlavaModel::image_features(const ImageInput& image, MatrixF& f) const {
  if (!config_.anyres()) {
    image_features(image.pixels, image.n_tiles, f);  // [n_tiles·n_feat, d]
    return;
  }
  (void)image_tokens(image);  // checks the size
  const auto [g_h, g_w] = llava_next_grid(image.height, image.width, config_);
  if (image.n_tiles != 1 + g_h * g_w) {
    throw ConfigError(fmt::format("{}: pixel tiles of an image of {}x{} (expected 1 + {}·{} = {}, got {})",
                                  dir_.string(), image.width, image.height, g_h, g_w, 1 + g_h * g_w, image.n_tiles));
  }
  MatrixF tiles;  // [n_tiles·p_n², d]
  image_features(image.pixels, image.n_tiles, tiles);
  llava_next_pack(tiles, image.height, image.width, config_, image_newline_, f);
}

std::vector<ImageInput> LlavaModel::single_tiles(std::span<const float> pixels, int n_img) const {
  if (config_.anyres()) {
    throw ConfigError(fmt::format("{}: pixel_values without image sizes (expected ImageInput with each image's "
                                  "height and width for {})", dir_.string(), config_.architecture));
  }
  check_pixels(pixels, n_img);
  const std::size_t per = pixels.size() / static_cast<std::size_t>(std::max(n_img, 1));
  std::vector<ImageInput> images;
  for (int i = 0; i < n_img; ++i) images.push_back({pixels.subspan(per * static_cast<std::size_t>(i), per), 1, 0, 0});
  return images;
}

void LlavaModel::embed_prompt(std::span<const std::int32_t> ids, std::span<const ImageInput> images,
                              MatrixF& h) const {
  const auto image = static_cast<std::int32_t>(config_.image_token_index);
  const std::int64_t n_tokens = std::count(ids.begin(), ids.end(), image);
  std::int64_t expected = 0;
  for (const ImageInput& x : images) expected += image_tokens(x);
  if (n_tokens != expected) {
    const std::string what = config_.anyres() ? fmt::format("{}", expected)
                                              : fmt::format("{}·{} = {}", images.size(), config_.features_per_image(),
                                                            expected);
    throw ConfigError(fmt::format("{}: image tokens {} in the prompt (expected {} for {} image(s), got {})",
                                  dir_.string(), image, what, images.size(), n_tokens));
  }
  // The image token may lie outside the vocabulary (HF embeds id 0 there, then overwrites the row).
  std::vector<std::int32_t> text(ids.begin(), ids.end());
  for (auto& id : text) id = id == image ? 0 : id;
  lm_->embed(text, static_cast<int>(text.size()), h);  // [T, d]
  std::size_t t = 0;
  for (const ImageInput& x : images) {
    MatrixF f;  // [n_tok, d]
    image_features(x, f);
    for (std::int64_t j = 0; j < f.rows(); ++j) {
      while (ids[t] != image) ++t;
      h.row(static_cast<std::int64_t>(t++)) = f.row(j);
    }
  }
}

void LlavaModel::forward(std::span<const std::int32_t> ids, std::span<const ImageInput> images,
                         MatrixF& logits) const {
  MatrixF h;  // [T, d]
  embed_prompt(ids, images, h);
  const int T = static_cast<int>(ids.size());
  for (int i = 0; i < lm_->num_layers(); ++i) lm_->layer_forward(i, h, T);
  lm_->head(h, logits);  // [T, V]
}

void LlavaModel::forward_last(std::span<const std::int32_t> ids, std::span<const ImageInput> images,
                              MatrixF& logits) const {
  MatrixF h;  // [T, d]
  embed_prompt(ids, images, h);
  const int T = static_cast<int>(ids.size());
  for (int i = 0; i < lm_->num_layers(); ++i) lm_->layer_forward(i, h, T);
  const MatrixF last = h.bottomRows(1);  // [1, d]: the LM head of one row, not of T
  lm_->head(last, logits);               // [1, V]
}

// The LLaVA-1.5 shorthands: each image one tile of the model's size (ConfigError for NeXT).
void LlavaModel::embed_prompt(std::span<const std::int32_t> ids, std::span<const float> pixels, int n_img,
                              MatrixF& h) const {
  embed_prompt(ids, single_tiles(pixels, n_img), h);
}
void LlavaModel::forward(std::span<const std::int32_t> ids, std::span<const float> pixels, int n_img,
                         MatrixF& logits) const {
  forward(ids, single_tiles(pixels, n_img), logits);
}
void LlavaModel::forward_last(std::span<const std::int32_t> ids, std::span<const float> pixels, int n_img,
                              MatrixF& logits) const {
  forward_last(ids, single_tiles(pixels, n_img), logits);
}
void LlavaModel::prefill(std::span<const std::int32_t> ids, std::span<const float> pixels, int n_img, KvCache& cache,
                         MatrixF& logits) const {
  prefill(ids, single_tiles(pixels, n_img), cache, logits);
}
std::vector<std::int32_t> LlavaModel::generate_greedy(std::span<const std::int32_t> ids, std::span<const float> pixels,
                                                      int n_img, int max_new, std::int32_t eos) const {
  return generate_greedy(ids, single_tiles(pixels, n_img), max_new, eos);
}

// The prompt's embeddings (image features in place) fill the KV cache as Model::forward_cached's
// prefill does from ids.
void LlavaModel::prefill(std::span<const std::int32_t> ids, std::span<const ImageInput> images, KvCache& cache,
                         MatrixF& logits) const {
  if (cache.length() != 0 || static_cast<std::int64_t>(ids.size()) > cache.capacity()) {
    throw Error(fmt::format("{}: prefill of {} positions (expected an empty KV cache with room for them, got {} of {} "
                            "positions used)", dir_.string(), ids.size(), cache.length(), cache.capacity()));
  }
  MatrixF h;  // [T, d]
  embed_prompt(ids, images, h);
  const int T = static_cast<int>(h.rows());
  for (int i = 0; i < lm_->num_layers(); ++i) {
    LayerState s;
    s.resid.swap(h);
    s.kv = &cache.layer(i);
    lm_->layer_resume(i, s, T);
    h.swap(s.resid);
  }
  cache.advance(T);
  const MatrixF last = h.bottomRows(1);  // [1, d]
  lm_->head(last, logits);               // [1, V]
}

// Each new token after the prefill goes through forward_cached.
std::vector<std::int32_t> LlavaModel::generate_greedy(std::span<const std::int32_t> ids,
                                                      std::span<const ImageInput> images, int max_new,
                                                      std::int32_t eos) const {
  return generate_greedy(ids, images, max_new, eos >= 0 ? std::span<const std::int32_t>(&eos, 1)
                                                        : std::span<const std::int32_t>());
}

std::vector<std::int32_t> LlavaModel::generate_greedy(std::span<const std::int32_t> ids,
                                                      std::span<const ImageInput> images, int max_new,
                                                      std::span<const std::int32_t> stops) const {
  std::vector<std::int32_t> out;
  if (max_new <= 0) return out;
  KvCache cache(*lm_, static_cast<int>(ids.size()) + max_new);
  MatrixF logits;  // [1, V]
  prefill(ids, images, cache, logits);
  for (;;) {
    Eigen::Index best = 0;
    logits.row(0).maxCoeff(&best);
    out.push_back(static_cast<std::int32_t>(best));
    if (std::find(stops.begin(), stops.end(), out.back()) != stops.end() || static_cast<int>(out.size()) == max_new)
      return out;
    lm_->forward_cached(std::span<const std::int32_t>(&out.back(), 1), cache, logits, true);
  }
}

// ---- prompts ---------------------------------------------------------------------------------------

std::string vicuna_v1_prompt(std::string_view user_message) {
  return fmt::format("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                     "helpful, detailed, and polite answers to the user's questions. USER: {} ASSISTANT:",
                     user_message);
}

std::string expand_image_tokens(std::string_view text, std::int64_t n) {
  std::string repeated;
  for (std::int64_t i = 0; i < n; ++i) repeated += kImageToken;
  std::string out;
  for (std::size_t pos = 0;;) {
    const std::size_t at = text.find(kImageToken, pos);
    out += text.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos);
    if (at == std::string_view::npos) return out;
    out += repeated;
    pos = at + kImageToken.size();
  }
}

}  // namespace latentllm::model
