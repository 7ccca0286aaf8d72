// The layer sources of the checkpoint writers, and the per-layer factor files a compression leaves in its
// progress directory (include/latentllm/checkpoint.hpp "Per-layer factor files").
#include "format/layer_source.hpp"

#include <fmt/format.h>

#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;

class ModelLayers final : public LayerSource {
 public:
  explicit ModelLayers(const model::Model& m) : m_(m) {}
  const model::Model& model() const override { return m_; }
  const model::DecoderLayer& layer(int i) override {
    if (!m_.layer_loaded(i)) {
      throw Error(fmt::format("{}: layer {} is not loaded (expected SaveOptions::layer_factors_dir for a lazy "
                              "model, got none)", m_.dir().string(), i));
    }
    return m_.layer(i);
  }
  bool holds_all_modules(int) const override { return true; }

 private:
  const model::Model& m_;
};

class ProgressLayers final : public LayerSource {
 public:
  ProgressLayers(const model::Model& m, fs::path dir) : m_(m), dir_(std::move(dir)) {}
  const model::Model& model() const override { return m_; }
  const model::DecoderLayer& layer(int i) override {
    if (m_.layer_loaded(i)) return m_.layer(i);
    if (i != current_) {
      current_ = -1;
      copy_ = m_.layer_spec(i);
      checkpoint::read_layer_factors(checkpoint::layer_factors_file(dir_, i), copy_);
      current_ = i;
    }
    return copy_;
  }
  bool holds_all_modules(int i) const override { return m_.layer_loaded(i); }

 private:
  const model::Model& m_;
  fs::path dir_;
  model::DecoderLayer copy_;
  int current_ = -1;
};

std::vector<float> to_float(const std::vector<std::int32_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

std::unique_ptr<LayerSource> model_layers(const model::Model& m) { return std::make_unique<ModelLayers>(m); }

std::unique_ptr<LayerSource> progress_layers(const model::Model& m, const fs::path& factors_dir) {
  return std::make_unique<ProgressLayers>(m, factors_dir);
}

}  // namespace latentllm::format

namespace latentllm::checkpoint {

namespace fs = std::filesystem;

fs::path layer_factors_file(const fs::path& dir, int layer) { return dir / fmt::format("layer-{}.safetensors", layer); }

void write_layer_factors(const fs::path& file, const model::DecoderLayer& layer) {
  std::vector<io::TensorToWrite> tensors;
  std::vector<std::vector<float>> perms;
  perms.reserve(layer.linears.size());
  auto span_of = [](const auto& x) { return std::span<const float>(x.data(), static_cast<std::size_t>(x.size())); };
  for (const auto& lin : layer.linears) {
    if (!lin.factored()) continue;
    tensors.push_back({lin.name + ".B", DType::F32, {lin.B.rows(), lin.B.cols()}, span_of(lin.B)});
    tensors.push_back({lin.name + ".A", DType::F32, {lin.A.rows(), lin.A.cols()}, span_of(lin.A)});
    if (lin.block_identity) {
      perms.push_back(format::to_float(lin.perm));
      tensors.push_back({lin.name + ".perm", DType::F32, {static_cast<std::int64_t>(lin.perm.size())}, perms.back()});
    }
    if (lin.bias.size() > 0) tensors.push_back({lin.name + ".bias", DType::F32, {lin.bias.size()}, span_of(lin.bias)});
  }
  io::write_safetensors(file, tensors);
}

void read_layer_factors(const fs::path& file, model::DecoderLayer& layer) {
  const io::SafetensorsFile st(file);
  for (auto& lin : layer.linears) {
    if (!st.find(lin.name + ".B")) continue;
    lin.B = st.matrix(lin.name + ".B");
    lin.A = st.matrix(lin.name + ".A");
    lin.perm.clear();
    lin.block_identity = false;
    if (const TensorView* p = st.find(lin.name + ".perm")) {
      for (float v : p->to_f32()) lin.perm.push_back(static_cast<std::int32_t>(v));
      lin.block_identity = true;
    }
    if (const TensorView* bias = st.find(lin.name + ".bias")) {
      const auto v = bias->to_f32();
      lin.bias = Eigen::Map<const VectorF>(v.data(), static_cast<Eigen::Index>(v.size()));
    }
    lin.weight.resize(0, 0);
    lin.weight16 = {};
  }
}

}  // namespace latentllm::checkpoint
