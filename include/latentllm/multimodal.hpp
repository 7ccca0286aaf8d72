// Multimodal (image + text) models on CPU: LLaVA-1.5 (HF LlavaForConditionalGeneration) = a CLIP
// vision tower, a two-layer MLP projector and a causal language model of a supported family (Llama,
// Mistral, Qwen2, ... as model::Model runs them); LLaVA-NeXT (LlavaNextForConditionalGeneration) adds
// anyres tiles per image, unpadding and an image_newline vector. Images arrive preprocessed: pixel
// values [n_tiles, C, H, W] float32, channels first, row-major (CLIPImageProcessor's or
// LlavaNextImageProcessor's output, image::preprocess / image::preprocess_anyres); decoding and
// resizing images is not done here. docs/LMM.md describes the architecture and the checkpoint layouts.
//
// Glossary: n_img = images, C = channels, S = image_size (H = W = S), p = patch_size, P = positions per
// image (1 + (S / p)² with the CLS embedding), d_v = vision hidden size, L_v = vision encoder layers,
// n_feat = image features per image (P − 1 with the "default" strategy, P with "full"), d = text hidden
// size, T = prompt tokens, V = vocab size; NeXT: p_n = S / p, g_h × g_w the tile grid of an image,
// n_tiles = 1 + g_h·g_w (the base image first).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/model.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::model {

// vision_config of a multimodal config.json (CLIPVisionConfig keys and defaults).
struct VisionConfig {
  std::string model_type = "clip_vision_model";
  std::int64_t hidden_size = 768;         // d_v
  std::int64_t intermediate_size = 3072;  // MLP width (fc1 output)
  std::int64_t num_hidden_layers = 12;    // L_v
  std::int64_t num_attention_heads = 12;
  std::int64_t num_channels = 3;          // C
  std::int64_t image_size = 224;          // S
  std::int64_t patch_size = 32;           // p
  double layer_norm_eps = 1e-5;
  std::string hidden_act = "quick_gelu";

  std::int64_t head_dim() const { return hidden_size / num_attention_heads; }
  std::int64_t num_patches() const { return (image_size / patch_size) * (image_size / patch_size); }
  std::int64_t num_positions() const { return num_patches() + 1; }  // P: CLS + patches
};

// config.json of a LLaVA checkpoint (LlavaConfig keys and defaults).
struct LlavaConfig {
  std::string architecture;     // "LlavaForConditionalGeneration" or "LlavaNextForConditionalGeneration"
  ModelConfig text;             // text_config, parsed by its family's parser (multimodal_architecture set)
  VisionConfig vision;          // vision_config
  std::int64_t image_token_index = 32000;
  // vision_feature_layer: indices into the vision tower's hidden states [0..L_v] (0 = the embeddings
  // after pre_layrnorm, k = the output of encoder layer k − 1), negative counting from the end, as
  // given; one entry for an integer, several for a list (their features concatenated along the hidden
  // dimension, in the list's order).
  std::vector<std::int64_t> vision_feature_layers = {-2};
  std::string vision_feature_select_strategy = "default";  // "default" drops the CLS position, "full" keeps it
  std::string projector_hidden_act = "gelu";
  bool multimodal_projector_bias = true;
  std::int64_t image_seq_length = 576;  // image tokens per image the processor expands "<image>" to
  // NeXT: the tile resolutions (height, width), multiples of vision.image_size (LlavaNextConfig's default
  // when absent); empty for LLaVA-1.5.
  std::vector<std::pair<int, int>> image_grid_pinpoints;
  nlohmann::json raw;

  // True for LlavaNextForConditionalGeneration (anyres tiles, unpadding, image_newline).
  bool anyres() const { return architecture == "LlavaNextForConditionalGeneration"; }

  // vision_feature_layers as indices 0..L_v into the hidden states.
  std::vector<int> feature_layers() const;
  // n_feat: image features per image.
  std::int64_t features_per_image() const;
};

// True when doc is the config.json of a LLaVA checkpoint (architectures[0]
// LlavaForConditionalGeneration or LlavaNextForConditionalGeneration, or model_type llava / llava_next).
bool is_llava_config(const nlohmann::json& doc);
// Parses and validates it: ConfigError "<origin>: <key> (expected X, got Y)" for a bad
// vision_feature_layer, vision_feature_select_strategy (NeXT: "default" only), vision model_type,
// image_grid_pinpoints, ..., and the text_config's own errors prefixed "<origin>: text_config".
// tie_word_embeddings of the language model: text_config's, else the top-level key, else its family's default.
LlavaConfig parse_llava_config(const nlohmann::json& doc, const std::string& origin);

// NeXT: the image tokens of an image of height × width pixels (the original size, image_sizes): p_n²
// base features + rows·(cols + 1) for the unpadded g_h·p_n × g_w·p_n grid with a newline per row
// (pack_image_features; equal to LlavaNextProcessor._get_number_of_features − 1 with the "default"
// strategy when crop_size = S).
std::int64_t llava_next_num_image_tokens(int height, int width, const LlavaConfig& config);

// One image for LlavaModel: its tiles' pixel values and, for NeXT, its original size.
struct ImageInput {
  std::span<const float> pixels;  // [n_tiles, C, S, S]; LLaVA-1.5: one tile (more are taken as more images)
  int n_tiles = 1;
  int height = 0;  // NeXT image_sizes: the original image's height and width (preprocess_anyres)
  int width = 0;
};

// Stored parameters per component of the LLaVA checkpoint in dir, without loading it: "vision" (the
// whole tower, unused layers included), "projector", "language" (the rest). FormatError as load.
std::vector<std::pair<std::string, std::int64_t>> llava_component_params(const std::filesystem::path& dir);

class VisionModel;  // src/model/vision.hpp (CLIP: src/model/clip.cpp)
class Projector;    // src/model/llava.cpp

class LlavaModel {
 public:
  ~LlavaModel();
  LlavaModel(LlavaModel&&) noexcept;
  LlavaModel& operator=(LlavaModel&&) noexcept;

  // Loads a LLaVA checkpoint directory (eager, float32) in either key layout: the hub's
  // (language_model.model.*, language_model.lm_head.weight, vision_tower.vision_model.*,
  // multi_modal_projector.*) or newer transformers' (model.language_model.*, lm_head.weight,
  // model.vision_tower.vision_model.*, model.multi_modal_projector.*). Vision encoder layers after the
  // deepest feature layer are not loaded (their tensors may be present). Throws ConfigError /
  // FormatError naming the file or tensor (docs/ERRORS.md, "Multimodal checkpoints"). opt goes to the
  // language model's Model::load (allow_unused_tensors; lazy maps it: the embeddings and image features
  // of a multimodal calibration then need no float copy of it, while its forward needs each layer
  // loaded first, Model::load_layer). The vision tower and the projector are always widened.
  static LlavaModel load(const std::filesystem::path& dir, const LoadOptions& opt = {});

  const LlavaConfig& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_; }
  // The language model (the same object model::Model::load gives for this directory).
  const Model& language_model() const { return *lm_; }
  Model& language_model() { return *lm_; }
  // Puts `lm` (this checkpoint's language model, e.g. compressed in memory) in place of the current one
  // and returns the current one: a sweep evaluates each compressed language model with one vision
  // tower. ConfigError when its hidden size or vocabulary differs.
  std::unique_ptr<Model> swap_language_model(std::unique_ptr<Model> lm);
  // The vision tower (its encoder layers' modules by role, like a decoder layer's).
  const VisionModel& vision_tower() const { return *vision_; }
  VisionModel& vision_tower() { return *vision_; }

  // pixels: [n_img, C, S, S] -> h: [n_img·P, d_v] the vision tower's hidden_states[index] (HF
  // output_hidden_states semantics, negative from the end; index within the loaded layers).
  // ConfigError "<dir>: pixel_values (expected <n>·3·S·S values, ...)" for a wrong size.
  void vision_hidden_state(std::span<const float> pixels, int n_img, int index, MatrixF& h) const;
  // pixels: [n_img, C, S, S] (NeXT: the tiles of an image) -> f: [n_img·n_feat, d] the projected
  // features of each tile (LlavaModel.get_image_features; NeXT's before pack_image_features).
  void image_features(std::span<const float> pixels, int n_img, MatrixF& f) const;
  // pixels: [n_img, C, S, S] -> x: [n_img·n_feat, d_v·m] the projector's input: the selected hidden
  // states of each tile (CLS dropped by "default"), concatenated in vision_feature_layer's order.
  void projector_input(std::span<const float> pixels, int n_img, MatrixF& x) const;
  // The projector's modules, linear_1: [d, d_v·m] and linear_2: [d, d], and its activation (for the
  // compressor: compress --components projector).
  std::array<Linear*, 2> projector_modules();
  Activation projector_activation() const;
  // The features one image puts in the prompt -> f: [n_tok, d]: LLaVA-1.5 image_features; NeXT its
  // tiles' features packed (base, unpadded grid rows each ending in image_newline). ConfigError for
  // pixels of the wrong size, or NeXT tiles not 1 + g_h·g_w for the image's size.
  void image_features(const ImageInput& image, MatrixF& f) const;
  // The image tokens it takes: n_tiles·n_feat, or NeXT's llava_next_num_image_tokens(height, width).
  std::int64_t image_tokens(const ImageInput& image) const;
  // ids: [T] one prompt whose image_token_index tokens take the images' features in order -> logits:
  // [T, V]. ConfigError "<dir>: image tokens (expected X, got Y)" when their count is not the images'.
  void forward(std::span<const std::int32_t> ids, std::span<const ImageInput> images, MatrixF& logits) const;
  // LLaVA-1.5 shorthand: n_img images of one tile each in pixels [n_img, C, S, S]. ConfigError for a NeXT
  // checkpoint, whose images need their sizes (ImageInput).
  void forward(std::span<const std::int32_t> ids, std::span<const float> pixels, int n_img, MatrixF& logits) const;
  // The same forward, but only the last position's logits: [1, V] (the LM head of one row).
  void forward_last(std::span<const std::int32_t> ids, std::span<const ImageInput> images, MatrixF& logits) const;
  void forward_last(std::span<const std::int32_t> ids, std::span<const float> pixels, int n_img,
                    MatrixF& logits) const;
  // The prompt (image features in place of its image tokens) through the language model, filling
  // `cache` (of language_model(), empty, room for ids.size() positions at least) -> logits: [1, V] of
  // its last position; later tokens go through language_model().forward_cached(.., cache, ..).
  void prefill(std::span<const std::int32_t> ids, std::span<const ImageInput> images, KvCache& cache,
               MatrixF& logits) const;
  void prefill(std::span<const std::int32_t> ids, std::span<const float> pixels, int n_img, KvCache& cache,
               MatrixF& logits) const;
  // Greedy decoding with a dense KV cache: up to max_new tokens after the prompt, stopping after eos
  // (if >= 0). ConfigError (model::KvCache) when T + max_new passes max_position_embeddings.
  std::vector<std::int32_t> generate_greedy(std::span<const std::int32_t> ids, std::span<const ImageInput> images,
                                            int max_new, std::int32_t eos) const;
  // The same, stopping after any id of `stops` (generation_config.json may list several EOS ids).
  std::vector<std::int32_t> generate_greedy(std::span<const std::int32_t> ids, std::span<const ImageInput> images,
                                            int max_new, std::span<const std::int32_t> stops) const;
  std::vector<std::int32_t> generate_greedy(std::span<const std::int32_t> ids, std::span<const float> pixels,
                                            int n_img, int max_new, std::int32_t eos) const;
  // NeXT: image_newline [d] (empty for LLaVA-1.5).
  std::span<const float> image_newline() const { return image_newline_; }
  // Stored parameters per component: "vision", "projector" (with NeXT's image_newline), "language"
  // (every tensor of the checkpoint, loaded or not).
  const std::vector<std::pair<std::string, std::int64_t>>& component_params() const { return params_; }

  // h: [T, d] = the token embeddings of ids with image positions replaced by the images' features: the
  // language model's layer-0 input (multimodal calibration feeds it to the pipeline). The pixels form
  // is the LLaVA-1.5 shorthand.
  void embed_prompt(std::span<const std::int32_t> ids, std::span<const ImageInput> images, MatrixF& h) const;
  void embed_prompt(std::span<const std::int32_t> ids, std::span<const float> pixels, int n_img, MatrixF& h) const;

 private:
  LlavaModel();
  // ConfigError unless pixels holds n·C·S·S values.
  void check_pixels(std::span<const float> pixels, int n) const;
  // The LLaVA-1.5 shorthand's images (ConfigError for NeXT).
  std::vector<ImageInput> single_tiles(std::span<const float> pixels, int n_img) const;

  LlavaConfig config_;
  std::filesystem::path dir_;
  std::unique_ptr<Model> lm_;
  std::unique_ptr<VisionModel> vision_;
  std::unique_ptr<Projector> projector_;
  std::vector<float> image_newline_;  // [d] NeXT only
  std::vector<std::pair<std::string, std::int64_t>> params_;
};

// ---- prompts (LLaVA-1.5's conversation, llava/conversation.py conv_vicuna_v1) ----------------------

// The placeholder of one image in a prompt, before the processor expands it.
inline constexpr std::string_view kImageToken = "<image>";
// vicuna_v1's single-turn conversation around a user message, up to "ASSISTANT:" (no trailing space:
// the reply starts with its own space): "A chat between a curious user and an artificial intelligence
// assistant. The assistant gives helpful, detailed, and polite answers to the user's questions. USER:
// <message> ASSISTANT:".
std::string vicuna_v1_prompt(std::string_view user_message);
// Every "<image>" of text replaced by n copies (LlavaProcessor's expansion to image_seq_length before
// tokenizing; n = LlavaConfig::features_per_image()).
std::string expand_image_tokens(std::string_view text, std::int64_t n);

}  // namespace latentllm::model
