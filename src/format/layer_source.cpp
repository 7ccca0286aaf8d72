// The layer sources of the checkpoint writers, and the per-layer factor files a compression leaves in its
// progress directory (include/latentllm/checkpoint.hpp "Per-layer factor files").
#include "format/layer_source.hpp"

#include <list>

#include <fmt/format.h>

#include "core/mapped_file.hpp"
#include "io/latent_format.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"
#include "quant/pack.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;

ModuleForm form_of(const model::Linear& l) {
  return {.rank = l.factored() ? l.rank() : 0, .block_identity = l.block_identity, .bias = l.bias.size() > 0,
          .bits = l.bits(), .group = l.group()};
}

using io::Factor;
using io::Naming;
using io::Piece;

// A progress file's name of a part of module `m`.
std::string progress_name(const std::string& m, Factor f, Piece p = Piece::Values) {
  return io::latent_tensor_name(m, f, p, Naming::Progress);
}
// The tensor holding a quantized module's bits, group size and rank (0: dense) in a progress file: [3] floats.
std::string progress_spec_name(const std::string& m) { return m + ".quant"; }

std::vector<ModuleForm> forms_of(const model::DecoderLayer& L) {
  std::vector<ModuleForm> out;
  for (const auto& l : L.linears) out.push_back(form_of(l));
  return out;
}

VectorF vector_of(const TensorView& t) {
  const std::vector<float> v = t.to_f32();
  return Eigen::Map<const VectorF>(v.data(), static_cast<Eigen::Index>(v.size()));
}

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
  std::vector<ModuleForm> forms(int i) override { return forms_of(layer(i)); }

 private:
  const model::Model& m_;
};

class ProgressLayers final : public LayerSource {
 public:
  ProgressLayers(const model::Model& m, fs::path dir) : m_(m), dir_(std::move(dir)), src_(io::TensorStore::open(m.dir())) {}
  const model::Model& model() const override { return m_; }
  const model::DecoderLayer& layer(int i) override {
    if (m_.layer_loaded(i)) return m_.layer(i);
    if (i != current_) {
      current_ = -1;
      copy_ = m_.layer_spec(i);
      checkpoint::read_layer_factors(checkpoint::layer_factors_file(dir_, i), copy_);
      complete(copy_);
      current_ = i;
    }
    return copy_;
  }
  std::vector<ModuleForm> forms(int i) override {
    if (m_.layer_loaded(i) || i == current_) return forms_of(layer(i));
    const io::SafetensorsFile st(checkpoint::layer_factors_file(dir_, i));  // its header only
    std::vector<ModuleForm> out;
    for (const auto& l : m_.layer_spec(i).linears) {
      const TensorView* b = st.find(progress_name(l.name, Factor::B));
      const TensorView* bq = st.find(progress_name(l.name, Factor::B, Piece::Scales));
      const TensorView* spec = st.find(progress_spec_name(l.name));
      ModuleForm f = b || bq ? ModuleForm{b ? b->shape[1] : 0, st.find(l.name + ".perm") != nullptr,
                                          st.find(l.name + ".bias") != nullptr}
                             : ModuleForm{0, false, src_.has(m_.stored_name(l.name) + ".bias")};
      if (spec != nullptr) {
        const std::vector<float> v = spec->to_f32();  // [bits, group, rank]
        f.bits = static_cast<int>(v.at(0));
        f.group = static_cast<int>(v.at(1));
        f.rank = static_cast<std::int64_t>(v.at(2));
      }
      out.push_back(f);
    }
    return out;
  }

 private:
  // What a skeleton lacks besides the factors: its norms, and the modules the compression left dense.
  void complete(model::DecoderLayer& L) const {
    const std::string prefix = layer_prefix(L);
    for (auto& [name, v] : L.norms) v = vector_of(src_.get(m_.stored_name(prefix + name)));
    for (auto& l : L.linears) {
      if (l.factored() || l.quantized() || l.weight.size() > 0) continue;  // the last: dense from the progress
      const std::string stored = m_.stored_name(l.name);
      const std::vector<float> w = src_.get(stored + ".weight", std::vector<std::int64_t>{l.out, l.in}).to_f32();
      l.weight = MatrixF(Eigen::Map<const MatrixF>(w.data(), l.out, l.in));
      if (src_.has(stored + ".bias")) l.bias = vector_of(src_.get(stored + ".bias"));
    }
  }

  const model::Model& m_;
  fs::path dir_;
  io::TensorStore src_;
  model::DecoderLayer copy_;
  int current_ = -1;
};

class LatentLayers final : public LayerSource {
 public:
  LatentLayers(std::unique_ptr<model::Model> m, std::map<std::string, io::LatentModule> modules)
      : m_(std::move(m)), modules_(std::move(modules)), src_(io::TensorStore::open(m_->dir())) {}
  const model::Model& model() const override { return *m_; }
  const model::DecoderLayer& layer(int i) override {
    if (i != current_) {
      if (current_ >= 0) m_->release_layer(current_);
      current_ = -1;
      m_->load_layer(i);
      current_ = i;
    }
    return m_->layer(i);
  }
  std::vector<ModuleForm> forms(int i) override {
    std::vector<ModuleForm> out;
    for (const auto& l : m_->layer_spec(i).linears) {
      const auto it = modules_.find(l.name);
      const bool bias = src_.has(m_->stored_name(l.name) + ".bias");
      out.push_back(it == modules_.end() ? ModuleForm{0, false, bias}
                                         : ModuleForm{it->second.rank, it->second.block_identity, bias,
                                                      it->second.bits, it->second.group});
    }
    return out;
  }

 private:
  std::unique_ptr<model::Model> m_;
  std::map<std::string, io::LatentModule> modules_;  // by HF module name
  io::TensorStore src_;
  int current_ = -1;
};

ConfigError not_latent(const fs::path& dir) {
  return ConfigError(fmt::format("{}: not a latent checkpoint (expected a config.json with a latent section, as "
                                 "latentllm compress writes; a dense checkpoint needs no export)", dir.string()));
}

std::vector<float> to_float(const std::vector<std::int32_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

std::int64_t ModuleForm::params(const model::Linear& spec) const {
  const std::int64_t w = rank == 0 ? spec.out * spec.in : spec.out * rank + rank * (spec.in - (block_identity ? rank : 0));
  return w + (bias ? spec.out : 0);
}

std::string layer_prefix(const model::DecoderLayer& L) {
  const std::string& n = L.linear(model::Role::Q).name;
  return n.substr(0, n.size() - std::string_view("self_attn.q_proj").size());
}

std::unique_ptr<LayerSource> model_layers(const model::Model& m) { return std::make_unique<ModelLayers>(m); }

std::unique_ptr<LayerSource> progress_layers(const model::Model& m, const fs::path& factors_dir) {
  return std::make_unique<ProgressLayers>(m, factors_dir);
}

std::unique_ptr<LayerSource> latent_layers(const fs::path& dir, bool allow_dense) {
  const auto config = nlohmann::json::parse(core::read_file(dir / "config.json"), nullptr, false);
  if (config.is_object() && !config.contains("latent") && allow_dense) {
    return std::make_unique<LatentLayers>(model::Model::load(dir, {.lazy = true}),
                                          std::map<std::string, io::LatentModule>{});
  }
  if (!config.is_object() || !config.contains("latent")) throw not_latent(dir);
  // Lazy: names and shapes are checked, no layer is widened. Strict about unused tensors: the compressor
  // updates only the biases the architecture has (its bias switches stay the source's), so a stored bias
  // the config does not switch on is refused here, naming it.
  auto m = model::Model::load(dir, {.lazy = true});
  auto modules = io::parse_latent_modules(config, (dir / "config.json").string());
  // No module entries: a latent section without a compression record, or a compression that left every
  // module dense (the sparse methods rewrite the dense weights; their record names the method).
  if (modules.empty() && !config["latent"].contains("method")) throw not_latent(dir);
  return std::make_unique<LatentLayers>(std::move(m), std::move(modules));
}

std::map<std::string, std::pair<int, std::size_t>> layer_modules(const model::Model& m) {
  std::map<std::string, std::pair<int, std::size_t>> where;
  for (int i = 0; i < m.num_layers(); ++i) {
    const auto& lins = m.layer_spec(i).linears;
    for (std::size_t k = 0; k < lins.size(); ++k) where.emplace(lins[k].name, std::pair{i, k});
  }
  return where;
}

std::string tensor_module(const std::string& name) {
  if (const auto t = io::parse_latent_tensor_name(name)) return t->module;
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

}  // namespace latentllm::format

namespace latentllm::checkpoint {

namespace fs = std::filesystem;

fs::path layer_factors_file(const fs::path& dir, int layer) { return dir / fmt::format("layer-{}.safetensors", layer); }

namespace {

// A quantized matrix's parts as the float32 tensors of a progress file (codes one per byte of the
// packed form, scales and zeros widened from F16: all exact).
void add_packed(std::vector<io::TensorToWrite>& tensors, std::vector<std::vector<float>>& keep,
                const std::string& module, io::Factor f, const quant::PackedMatrix& q) {
  using io::Piece;
  keep.push_back({q.codes.begin(), q.codes.end()});
  tensors.push_back({io::latent_tensor_name(module, f, Piece::Codes, io::Naming::Progress), DType::F32,
                     {q.rows, q.groups(), q.row_bytes() / q.groups()}, keep.back()});
  for (const Piece p : {Piece::Scales, Piece::Zeros}) {
    const auto& h = p == Piece::Scales ? q.scales : q.zeros;
    keep.emplace_back(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) keep.back()[i] = f16_to_f32(h[i]);
    tensors.push_back({io::latent_tensor_name(module, f, p, io::Naming::Progress), DType::F32, {q.rows, q.groups()},
                       keep.back()});
  }
}

// The quantized matrix `f` of `module` from a progress file ([rows, cols], validated as a checkpoint's).
std::shared_ptr<const quant::PackedMatrix> read_packed_progress(const io::SafetensorsFile& st, const std::string& module,
                                                                io::Factor f, int bits, int group, std::int64_t cols) {
  using io::Piece;
  auto get = [&](Piece p) -> const TensorView& {
    const std::string n = io::latent_tensor_name(module, f, p, io::Naming::Progress);
    const TensorView* t = st.find(n);
    if (t == nullptr) throw FormatError(fmt::format("{}: missing tensor {}", st.path().string(), n));
    return *t;
  };
  const TensorView &c = get(Piece::Codes), &s = get(Piece::Scales), &z = get(Piece::Zeros);
  std::vector<std::uint8_t> codes;
  for (float v : c.to_f32()) codes.push_back(static_cast<std::uint8_t>(v));
  std::vector<std::uint16_t> scales, zeros;
  for (float v : s.to_f32()) scales.push_back(f32_to_f16(v));
  for (float v : z.to_f32()) zeros.push_back(f32_to_f16(v));
  const quant::PackedTensors t{c.shape, codes, s.shape, scales, z.shape, zeros};
  return std::make_shared<const quant::PackedMatrix>(quant::read_packed(c.name, bits, group, cols, t));
}

}  // namespace

void write_layer_factors(const fs::path& file, const model::DecoderLayer& layer, bool dense_modules) {
  std::vector<io::TensorToWrite> tensors;
  std::list<std::vector<float>> perms;  // stable addresses for the spans
  auto span_of = [](const auto& x) { return std::span<const float>(x.data(), static_cast<std::size_t>(x.size())); };
  for (const auto& lin : layer.linears) {
    if (lin.quantized()) {
      std::vector<std::vector<float>> keep;
      keep.reserve(7);
      const std::int64_t rank = lin.factored() ? lin.rank() : 0;
      keep.push_back({static_cast<float>(lin.bits()), static_cast<float>(lin.group()), static_cast<float>(rank)});
      tensors.push_back({format::progress_spec_name(lin.name), DType::F32, {3}, keep.back()});
      if (lin.factored()) {
        add_packed(tensors, keep, lin.name, io::Factor::B, *lin.B.packed());
        add_packed(tensors, keep, lin.name, io::Factor::A, *lin.A.packed());
      } else {
        add_packed(tensors, keep, lin.name, io::Factor::Weight, *lin.weight.packed());
      }
      for (auto& k : keep) perms.push_back(std::move(k));  // moved vectors keep their buffers
    } else if (lin.factored()) {
      tensors.push_back({io::latent_tensor_name(lin.name, io::Factor::B, io::Piece::Values, io::Naming::Progress), DType::F32, {lin.B.rows(), lin.B.cols()}, span_of(lin.B.f32())});
      tensors.push_back({io::latent_tensor_name(lin.name, io::Factor::A, io::Piece::Values, io::Naming::Progress), DType::F32, {lin.A.rows(), lin.A.cols()}, span_of(lin.A.f32())});
    } else if (dense_modules && lin.weight.is_f32() && !lin.weight.empty()) {
      tensors.push_back({io::latent_tensor_name(lin.name, io::Factor::Weight, io::Piece::Values, io::Naming::Progress),
                         DType::F32, {lin.weight.rows(), lin.weight.cols()}, span_of(lin.weight.f32())});
    } else {
      continue;
    }
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
    const TensorView* spec = st.find(format::progress_spec_name(lin.name));
    const std::string dense = io::latent_tensor_name(lin.name, io::Factor::Weight, io::Piece::Values, io::Naming::Progress);
    if (spec == nullptr && st.find(dense) != nullptr) {  // a rewritten dense module (write_layer_factors)
      MatrixF w = st.matrix(dense);  // [out, in]
      if (w.rows() != lin.out || w.cols() != lin.in) {
        throw FormatError(fmt::format("{}: {} shape (expected [{}, {}], got [{}, {}])", file.string(), dense, lin.out,
                                      lin.in, w.rows(), w.cols()));
      }
      lin.weight = std::move(w);
      if (const TensorView* bias = st.find(lin.name + ".bias")) {
        const auto v = bias->to_f32();
        lin.bias = Eigen::Map<const VectorF>(v.data(), static_cast<Eigen::Index>(v.size()));
      }
      continue;
    }
    if (!st.find(io::latent_tensor_name(lin.name, io::Factor::B, io::Piece::Values, io::Naming::Progress)) && spec == nullptr) continue;
    if (spec != nullptr) {
      const std::vector<float> v = spec->to_f32();  // [bits, group, rank]
      if (v.size() != 3) throw FormatError(fmt::format("{}: {}.quant (expected 3 values, got {})", file.string(), lin.name, v.size()));
      const int bits = static_cast<int>(v[0]), group = static_cast<int>(v[1]);
      const auto rank = static_cast<std::int64_t>(v[2]);
      const bool bi = st.find(lin.name + ".perm") != nullptr;
      if (rank > 0) {
        lin.B = read_packed_progress(st, lin.name, io::Factor::B, bits, group, rank);
        lin.A = read_packed_progress(st, lin.name, io::Factor::A, bits, group, lin.in - (bi ? rank : 0));
        lin.weight = {};
      } else {
        lin.weight = read_packed_progress(st, lin.name, io::Factor::Weight, bits, group, lin.in);
        lin.B = {};
        lin.A = {};
      }
    } else {
      lin.B = st.matrix(io::latent_tensor_name(lin.name, io::Factor::B, io::Piece::Values, io::Naming::Progress));
      lin.A = st.matrix(io::latent_tensor_name(lin.name, io::Factor::A, io::Piece::Values, io::Naming::Progress));
      lin.weight = {};
    }
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
  }
}

}  // namespace latentllm::checkpoint
