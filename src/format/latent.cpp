// The latent checkpoint writer (docs/FORMAT.md): a model's tensors in its source's order, the factored
// modules as <module>.A.weight / <module>.B.weight (quantized: their codes, scales and zero points; the
// names are io::latent_tensor_name's), and config.json's `latent` section.
#include "latentllm/checkpoint.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "core/mapped_file.hpp"
#include "format/layer_source.hpp"
#include "format/writers.hpp"
#include "io/latent_format.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"
#include "quant/pack.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;

// A finite float that the storage type cannot hold would be written as ±Inf: a silently broken
// model. Refuse it, naming the tensor and the element.
void check_representable(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
                         const std::vector<float>& data) {
  if (dtype == DType::F32 || dtype == DType::U8) return;
  const float limit = dtype == DType::F16 ? 65504.0f : std::numeric_limits<float>::max();
  for (std::size_t i = 0; i < data.size(); ++i) {
    const float x = data[i];
    if (!std::isfinite(x) || std::abs(x) <= limit) continue;
    const float back = dtype == DType::F16 ? f16_to_f32(f32_to_f16(x)) : bf16_to_f32(f32_to_bf16(x));
    if (std::isfinite(back)) continue;  // rounds down to the largest finite value
    const std::size_t cols = shape.size() == 2 ? static_cast<std::size_t>(shape[1]) : 0;
    const std::string where = cols > 0 ? fmt::format("[{}, {}]", i / cols, i % cols) : fmt::format("[{}]", i);
    throw NumericError(fmt::format("{}: value at {} overflows {} (expected |x| <= {:g}, got {:g}); store the "
                                   "checkpoint with --dtype f32{}", name, where, dtype_name(dtype), limit, x,
                                   dtype == DType::F16 ? " or bf16" : ""));
  }
}

// A tensor of the output: its spec, and its values made when the writer reaches it.
struct Entry {
  io::TensorSpec spec;
  std::function<std::vector<float>()> values;
};

std::vector<float> to_vector(const MatrixF& m) { return std::vector<float>(m.data(), m.data() + m.size()); }
std::vector<float> to_vector(const VectorF& v) { return std::vector<float>(v.data(), v.data() + v.size()); }

// The module's entry of the latent section (io::latent_module_json, beside its parser).
nlohmann::json module_entry(const model::Linear& lin) {
  return io::latent_module_json({.rank = lin.factored() ? lin.rank() : 0, .in = lin.in, .out = lin.out,
                                 .block_identity = lin.block_identity, .perm = lin.perm, .bits = lin.bits(),
                                 .group = lin.group()});
}

// The quantized matrix `f` of l (its weight, B or A), which the layer source must hold.
const quant::PackedMatrix& packed_of(const model::Linear& l, io::Factor f) {
  const auto& q = (f == io::Factor::Weight ? l.weight : f == io::Factor::B ? l.B : l.A).packed();
  if (!q) throw Error(fmt::format("{}: module is not quantized (expected the form its header declared)", l.name));
  return *q;
}

// A stored part of a quantized matrix as the floats the writer converts: codes (U8, exact), or F16 scales
// and zero points widened (exact, and rounded back to the same bits).
std::vector<float> piece_values(const quant::PackedMatrix& q, io::Piece p) {
  if (p == io::Piece::Codes) return {q.codes.begin(), q.codes.end()};
  const auto& h = p == io::Piece::Scales ? q.scales : q.zeros;
  std::vector<float> out(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) out[i] = f16_to_f32(h[i]);
  return out;
}
// The output's tensors in the source's order, a module's tensors where its first one was: the
// non-linear tensors from the source, the modules of the decoder layers from `layers`, the tower modules
// from `towers`. Fills `modules` (the latent section's entries).
std::vector<Entry> plan_tensors(LayerSource& layers, const io::TensorStore& src, const WriteOptions& opt,
                                nlohmann::json& modules) {
  const DType dtype = opt.dtype;
  const std::vector<const model::Linear*>& towers = opt.tower_modules;
  const model::Model& m = layers.model();
  std::map<std::string, const model::Linear*> tower;  // stored module name -> module
  for (const model::Linear* lin : towers) tower.emplace(lin->name, lin);
  const auto where = layer_modules(m);
  std::vector<Entry> out;
  std::set<std::string> done;
  // A module's tensors from `current()` (the module as it stands when the entry is written): its
  // factors or dense weight, and its bias.
  auto add = [&](std::string n, std::vector<std::int64_t> shape, auto current, auto part) {
    out.push_back({{std::move(n), dtype, std::move(shape)}, [current, part] { return to_vector(part(current())); }});
  };
  // A quantized matrix's three tensors (docs/FORMAT.md "Quantized tensors"), [rows, cols].
  auto add_packed = [&](const std::string& stored, io::Factor factor, std::int64_t rows, std::int64_t cols,
                        const ModuleForm& f, auto current) {
    const quant::QuantSpec spec{f.bits, f.group, quant::Grid::MinMax};
    const std::int64_t n_g = spec.groups(cols);
    for (const io::Piece p : {io::Piece::Codes, io::Piece::Scales, io::Piece::Zeros}) {
      std::vector<std::int64_t> shape{rows, n_g};
      if (p == io::Piece::Codes) shape.push_back(quant::group_bytes(spec));
      out.push_back({{io::latent_tensor_name(stored, factor, p), p == io::Piece::Codes ? DType::U8 : DType::F16,
                      std::move(shape)},
                     [current, factor, p] { return piece_values(packed_of(current(), factor), p); }});
    }
  };
  auto add_module = [&](const std::string& stored, const model::Linear& spec, const ModuleForm& f, auto current) {
    const std::int64_t a_cols = spec.in - (f.block_identity ? f.rank : 0);
    if (f.bits < 16 && f.rank > 0) {
      add_packed(stored, io::Factor::A, f.rank, a_cols, f, current);
      add_packed(stored, io::Factor::B, spec.out, f.rank, f, current);
    } else if (f.bits < 16) {
      add_packed(stored, io::Factor::Weight, spec.out, spec.in, f, current);
    } else if (f.rank > 0) {
      add(io::latent_tensor_name(stored, io::Factor::A), {f.rank, a_cols}, current,
          [](const model::Linear& l) -> const MatrixF& { return l.A.f32(); });
      add(io::latent_tensor_name(stored, io::Factor::B), {spec.out, f.rank}, current,
          [](const model::Linear& l) -> const MatrixF& { return l.B.f32(); });
    } else {
      // Float32, or a dense module kept as stored (16-bit views, LoadOptions::Weights::Stored).
      add(io::latent_tensor_name(stored, io::Factor::Weight), {spec.out, spec.in}, current,
          [](const model::Linear& l) { return l.dense_weight(); });
    }
    if (f.bias) add(stored + ".bias", {spec.out}, current, [](const model::Linear& l) -> const VectorF& { return l.bias; });
  };
  // The quantized head's three tensors, where the source's untied head was (else after the last tensor).
  const std::string head_module = m.stored_name("lm_head");
  bool head_done = opt.head == nullptr;
  auto add_head = [&] {
    const ModuleForm f{0, false, false, opt.head->bits, opt.head->group};
    const auto head = opt.head;
    add_packed(head_module, io::Factor::Weight, head->rows, head->cols, f, [head]() -> model::Linear {
      model::Linear l;
      l.weight = head;
      return l;
    });
    modules["lm_head"] = io::latent_module_json({.rank = 0, .in = head->cols, .out = head->rows, .block_identity = false,
                                                 .perm = {}, .bits = head->bits, .group = head->group});
    head_done = true;
  };
  std::vector<ModuleForm> forms;  // of layer `forms_of`
  int forms_of = -1;
  for (const auto& name : src.names()) {
    const std::string stored_module = tensor_module(name);
    if (opt.head && !m.config().tie_word_embeddings && stored_module == head_module) {
      if (!head_done) add_head();  // in place of the untied lm_head.weight
      continue;
    }
    if (const auto t = tower.find(stored_module); t != tower.end()) {
      if (!done.insert(t->first).second) continue;
      const model::Linear* lin = t->second;
      if (!lin->factored() && lin->weight.empty()) {
        throw Error(fmt::format("{}: module {} holds no weight (expected a loaded module)", m.dir().string(), t->first));
      }
      const ModuleForm f{lin->factored() ? lin->rank() : 0, lin->block_identity, lin->bias.size() > 0, lin->bits(),
                         lin->group()};
      add_module(t->first, *lin, f, [lin]() -> const model::Linear& { return *lin; });
      if (lin->factored() || lin->quantized()) modules[t->first] = module_entry(*lin);
      continue;
    }
    // The module's HF name as the model asks for it; the output keeps the source's stored names (a
    // multimodal checkpoint's language model under its prefix), the latent section the model's names.
    const std::string module = m.module_name(stored_module);
    const auto it = where.find(module);
    if (it == where.end()) {
      out.push_back({{name, dtype, src.get(name).shape}, [&src, name] { return src.get(name).to_f32(); }});
      continue;  // not a linear of a decoder layer (embeddings, norms, positions, head): unchanged
    }
    if (!done.insert(module).second) continue;
    const auto [i, k] = it->second;
    if (i != forms_of) forms = layers.forms(forms_of = i);
    const ModuleForm& f = forms[k];
    add_module(m.stored_name(module), m.layer_spec(i).linears[k], f,
               [&layers, i = i, k = k]() -> const model::Linear& { return layers.layer(i).linears[k]; });
    if (f.rank > 0 || f.bits < 16) modules[module] = module_entry(layers.layer(i).linears[k]);  // perm included
  }
  if (!head_done) add_head();
  for (const auto& [name, lin] : tower) {
    if (!done.count(name)) throw FormatError(fmt::format("{}: module {} not found in the source checkpoint", m.dir().string(), name));
  }
  // Modules whose weight the source stored under another name would be lost silently: refuse.
  for (const auto& [name, loc] : where) {
    if (!done.count(name)) throw FormatError(fmt::format("{}: module {} not found in the source checkpoint", m.dir().string(), name));
  }
  return out;
}

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

// Streams the entries into `path`, each checked against the storage type before it is written.
void write_entries(const fs::path& path, const std::vector<Entry>& entries) {
  std::vector<io::TensorSpec> specs;
  for (const auto& e : entries) specs.push_back(e.spec);
  io::SafetensorsWriter w(path, std::move(specs), {{"format", "pt"}});
  for (const auto& e : entries) {
    const std::vector<float> v = e.values();
    if (v.size() != static_cast<std::size_t>(numel(e.spec.shape))) {
      throw Error(fmt::format("{}: values (expected {}, got {})", e.spec.name, numel(e.spec.shape), v.size()));
    }
    check_representable(e.spec.name, e.spec.dtype, e.spec.shape, v);
    w.append(v);
  }
  w.finish();
}

}  // namespace

ExportSummary write_latent(LayerSource& layers, const fs::path& dir, const WriteOptions& opt) {
  const model::Model& m = layers.model();
  const auto src = io::TensorStore::open(m.dir());
  nlohmann::json modules = nlohmann::json::object();
  const std::vector<Entry> entries = plan_tensors(layers, src, opt, modules);

  nlohmann::json config = m.config().raw;
  nlohmann::json latent = opt.info.is_object() ? opt.info : nlohmann::json::object();
  latent["format"] = "latentllm";
  latent["format_version"] = io::kLatentFormatVersion;
  latent["modules"] = modules;
  config["latent"] = latent;
  config = io::with_latent_identity(std::move(config));  // stock loaders refuse it
  config["torch_dtype"] = opt.dtype == DType::F32 ? "float32" : opt.dtype == DType::F16 ? "float16" : "bfloat16";

  write_entries(dir / "model.safetensors", entries);
  const bool card = config["latent"].contains("provenance");  // compress's runs record theirs
  if (card) {
    config["latent"]["provenance"] = complete_provenance(config["latent"]["provenance"], dir, "latent", opt.dtype);
  }
  core::write_text_atomic(dir / "config.json", config.dump(2) + "\n");
  if (card) write_model_card(dir, config["latent"]["provenance"]);
  for (const char* f : checkpoint::companion_files()) {
    if (fs::exists(m.dir() / f)) core::write_text_atomic(dir / f, core::read_file(m.dir() / f));  // fsynced copy
  }
  ExportSummary s;
  s.tensors = entries.size();
  s.factored = modules.size();
  s.dtype = opt.dtype;
  return s;
}

}  // namespace latentllm::format

namespace latentllm::checkpoint {

namespace fs = std::filesystem;

void save(const model::Model& m, const fs::path& out_dir, const SaveOptions& opt) {
  const auto layers = opt.layer_factors_dir.empty() ? format::model_layers(m)
                                                    : format::progress_layers(m, opt.layer_factors_dir);
  // Build everything in a temporary sibling, then rename it into place.
  core::StagedDirectory dir(out_dir, opt.overwrite);
  format::WriteOptions w;
  w.dtype = opt.dtype;
  w.info = opt.info;
  w.tower_modules = opt.tower_modules;
  w.head = opt.head;
  const format::ExportSummary s = format::write_latent(*layers, dir.path(), w);
  dir.commit();
  log_info("wrote {} ({} tensors, {} factored modules)", dir.target().string(), s.tensors, s.factored);
}

void check_layer_factors_storable(const fs::path& file, DType dtype) {
  if (dtype == DType::F32) return;
  const io::SafetensorsFile st(file);
  for (const auto& t : st.tensors()) {
    if (!t.name.ends_with(".B") && !t.name.ends_with(".A") && !t.name.ends_with(".bias")) continue;
    std::vector<float> data(static_cast<std::size_t>(t.numel()));
    t.to_f32(data);
    format::check_representable(t.name + (t.name.ends_with(".bias") ? "" : ".weight"), dtype, t.shape, data);
  }
}

}  // namespace latentllm::checkpoint
