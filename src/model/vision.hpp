// Vision towers of multimodal models, in the registry pattern of the language architectures
// (arch.hpp): a vision architecture file (clip.cpp) declares the vision_config keys it reads, its HF
// tensor names, its module table (roles Q, K, V, O, Up, Down, so a compressor can address its modules
// like a decoder layer's) and its forward.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/json_keys.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "model/weights.hpp"

namespace latentllm::model {

class VisionModel {
 public:
  virtual ~VisionModel() = default;
  const VisionConfig& config() const { return config_; }
  // Encoder layers loaded: those up to the deepest hidden state asked for at load.
  int num_layers() const { return static_cast<int>(layers_.size()); }
  DecoderLayer& layer(int i) { return layers_.at(static_cast<std::size_t>(i)); }
  const DecoderLayer& layer(int i) const { return layers_.at(static_cast<std::size_t>(i)); }
  // Architecture name for inspect ("clip").
  virtual std::string_view family() const = 0;

  // pixels: [n_img, C, S, S] -> h: [n_img·P, d_v] hidden_states[0] (CLIP: embeddings after pre_layrnorm).
  virtual void embed(std::span<const float> pixels, int n_img, MatrixF& h) const = 0;
  // Applies encoder layer i in place to h: [n_img·P, d_v]; attention within each image, not causal.
  void layer_forward(int i, MatrixF& h, ForwardObserver* obs = nullptr) const;
  // Runs the encoder layer L (layer i's modules, wherever they are held) from where s stands to its end,
  // or until obs is done_after a site (Model::layer_resume's contract; s.resid: [n_img·P, d_v]).
  virtual void layer_resume(const DecoderLayer& L, int i, LayerState& s, ForwardObserver* obs) const = 0;
  // The encoder MLP's activation (vision_config.hidden_act).
  virtual Activation activation() const = 0;

 protected:
  VisionConfig config_;
  std::vector<DecoderLayer> layers_;

 private:
  friend class VisionLayers;  // moves layers_ in and out (vision_layers.cpp)
};

// A vision tower's loaded encoder layers as a Model: the compressor's view of them (modules by role,
// sites, the attention geometry without RoPE, the MLP), so that every method compresses them as it
// compresses a decoder layer. The tower's layers are moved into the returned model and moved back when
// it is destroyed (the tower must outlive it and is not usable meanwhile). Its layer_resume is the
// tower's over windows of T = P positions, one image each (attention within the image, not causal);
// calibration feeds it the embeddings (calib::PipelineOptions::input_embeddings) since it has no
// tokens, and its head, token embedding and KV cache throw Error. `dir` names the checkpoint in
// messages.
std::unique_ptr<Model> vision_layers(VisionModel& v, const std::filesystem::path& dir);

struct VisionArchitecture {
  std::string_view model_type;  // vision_config.model_type, e.g. "clip_vision_model"
  // Reads the architecture's keys into c; ConfigError through keys.fail for a bad key.
  void (*parse)(const io::JsonKeys& keys, VisionConfig& c);
  // The tower with encoder layers [0, n_layers), its tensors under `prefix` ("vision_tower.vision_model.").
  std::unique_ptr<VisionModel> (*make)(const VisionConfig& c, WeightLoader& w, const std::string& prefix, int n_layers);
};
std::span<const VisionArchitecture> clip_architectures();  // clip.cpp

}  // namespace latentllm::model
