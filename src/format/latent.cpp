// The latent checkpoint writer (docs/FORMAT.md): a model's tensors in its source's order, the factored
// modules as <module>.A.weight / <module>.B.weight, and config.json's `latent` section.
#include "latentllm/checkpoint.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "core/mapped_file.hpp"
#include "format/layer_source.hpp"
#include "format/writers.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;

// A finite float that the storage type cannot hold would be written as ±Inf: a silently broken
// model. Refuse it, naming the tensor and the element.
void check_representable(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape,
                         const std::vector<float>& data) {
  if (dtype == DType::F32) return;
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
  return io::latent_module_json({.rank = lin.rank(), .in = lin.in, .out = lin.out,
                                 .block_identity = lin.block_identity, .perm = lin.perm});
}
// The output's tensors in the source's order, a module's tensors where its first one was: the
// non-linear tensors and the modules of layers neither loaded nor compressed from the source,
// the others from `layers`. Fills `modules` (the latent section's entries).
std::vector<Entry> plan_tensors(LayerSource& layers, const io::TensorStore& src, DType dtype,
                                const std::vector<const model::Linear*>& towers, nlohmann::json& modules) {
  const model::Model& m = layers.model();
  std::map<std::string, const model::Linear*> tower;  // stored module name -> module
  for (const model::Linear* lin : towers) tower.emplace(lin->name, lin);
  std::map<std::string, std::pair<int, std::size_t>> where;  // module -> (layer, index in its linears)
  for (int i = 0; i < m.num_layers(); ++i) {
    const auto& lins = m.layer_spec(i).linears;
    for (std::size_t k = 0; k < lins.size(); ++k) where.emplace(lins[k].name, std::pair{i, k});
  }
  std::vector<Entry> out;
  auto from_source = [&](const std::string& name) {
    out.push_back({{name, dtype, src.get(name).shape}, [&src, name] { return src.get(name).to_f32(); }});
  };
  std::set<std::string> done;
  // A module's tensors from `current()` (the module as it stands when the entry is written): its
  // factors or dense weight (false when it holds neither: a layer not loaded), and its bias.
  auto add = [&](std::string n, std::vector<std::int64_t> shape, auto current, auto part) {
    out.push_back({{std::move(n), dtype, std::move(shape)}, [current, part] { return to_vector(part(current())); }});
  };
  auto add_weight = [&](const std::string& stored, const model::Linear& lin, auto current) {
    if (lin.factored()) {
      add(stored + ".A.weight", {lin.A.rows(), lin.A.cols()}, current, [](const model::Linear& l) -> const MatrixF& { return l.A; });
      add(stored + ".B.weight", {lin.B.rows(), lin.B.cols()}, current, [](const model::Linear& l) -> const MatrixF& { return l.B; });
    } else if (lin.weight.size() > 0) {
      add(stored + ".weight", {lin.weight.rows(), lin.weight.cols()}, current,
          [](const model::Linear& l) -> const MatrixF& { return l.weight; });
    } else if (lin.weight16.size() > 0) {  // a dense module kept as stored (LoadOptions::Weights::Stored)
      add(stored + ".weight", {lin.weight16.rows, lin.weight16.cols}, current,
          [](const model::Linear& l) { return l.dense_weight(); });
    } else {
      return false;
    }
    return true;
  };
  auto add_bias = [&](const std::string& stored, const model::Linear& lin, auto current) {
    add(stored + ".bias", {lin.bias.size()}, current, [](const model::Linear& l) -> const VectorF& { return l.bias; });
  };
  for (const auto& name : src.names()) {
    const auto dot = name.rfind('.');
    if (const auto t = tower.find(dot == std::string::npos ? name : name.substr(0, dot)); t != tower.end()) {
      if (!done.insert(t->first).second) continue;
      const model::Linear* lin = t->second;
      const auto current = [lin]() -> const model::Linear& { return *lin; };
      if (!add_weight(t->first, *lin, current)) {
        throw Error(fmt::format("{}: module {} holds no weight (expected a loaded module)", m.dir().string(), t->first));
      }
      if (lin->bias.size() > 0) add_bias(t->first, *lin, current);
      if (lin->factored()) modules[t->first] = module_entry(*lin);
      continue;
    }
    // The module's HF name as the model asks for it; the output keeps the source's stored names (a
    // multimodal checkpoint's language model under its prefix), the latent section the model's names.
    const std::string module = m.module_name(dot == std::string::npos ? name : name.substr(0, dot));
    const std::string stored = m.stored_name(module);
    const auto it = where.find(module);
    if (it == where.end()) {
      from_source(name);  // not a linear of a decoder layer (embeddings, norms, positions, head): unchanged
      continue;
    }
    if (!done.insert(module).second) continue;
    const auto [i, k] = it->second;
    const model::Linear& lin = layers.layer(i).linears[k];
    auto current = [&layers, i = i, k = k]() -> const model::Linear& { return layers.layer(i).linears[k]; };
    if (!add_weight(stored, lin, current)) from_source(stored + ".weight");  // a layer not loaded, its module not compressed
    if (lin.bias.size() > 0) {
      add_bias(stored, lin, current);
    } else if (!layers.holds_all_modules(i) && !lin.factored() && src.has(stored + ".bias")) {
      from_source(stored + ".bias");
    }
    if (lin.factored()) modules[module] = module_entry(lin);
  }
  for (const auto& [name, lin] : tower) {
    if (!done.count(name)) throw FormatError(fmt::format("{}: module {} not found in the source checkpoint", m.dir().string(), name));
  }
  // Modules whose weight the source stored under another name would be lost silently: refuse.
  for (const auto& [name, loc] : where) {
    if (!done.count(name)) throw FormatError(fmt::format("{}: module {} not found in the source checkpoint", m.dir().string(), name));
  }
  return out;
}

// Streams the entries into `path`, each checked against the storage type before it is written.
void write_entries(const fs::path& path, const std::vector<Entry>& entries) {
  std::vector<io::TensorSpec> specs;
  for (const auto& e : entries) specs.push_back(e.spec);
  io::SafetensorsWriter w(path, std::move(specs), {{"format", "pt"}});
  for (const auto& e : entries) {
    const std::vector<float> v = e.values();
    check_representable(e.spec.name, e.spec.dtype, e.spec.shape, v);
    w.append(v);
  }
  w.finish();
}

}  // namespace

LatentSummary write_latent(LayerSource& layers, const fs::path& dir, const checkpoint::SaveOptions& opt) {
  const model::Model& m = layers.model();
  const auto src = io::TensorStore::open(m.dir());
  nlohmann::json modules = nlohmann::json::object();
  const std::vector<Entry> entries = plan_tensors(layers, src, opt.dtype, opt.tower_modules, modules);

  nlohmann::json config = m.config().raw;
  nlohmann::json latent = opt.info.is_object() ? opt.info : nlohmann::json::object();
  latent["format"] = "latentllm";
  latent["format_version"] = io::kLatentFormatVersion;
  latent["modules"] = modules;
  config["latent"] = latent;
  config["torch_dtype"] = opt.dtype == DType::F32 ? "float32" : opt.dtype == DType::F16 ? "float16" : "bfloat16";

  write_entries(dir / "model.safetensors", entries);
  core::write_text_atomic(dir / "config.json", config.dump(2) + "\n");
  for (const char* f : checkpoint::companion_files()) {
    if (fs::exists(m.dir() / f)) core::write_text_atomic(dir / f, core::read_file(m.dir() / f));  // fsynced copy
  }
  return {entries.size(), modules.size()};
}

}  // namespace latentllm::format

namespace latentllm::checkpoint {

namespace fs = std::filesystem;

void save(const model::Model& m, const fs::path& out_dir, const SaveOptions& opt) {
  const auto layers = opt.layer_factors_dir.empty() ? format::model_layers(m)
                                                    : format::progress_layers(m, opt.layer_factors_dir);
  // Build everything in a temporary sibling, then rename it into place.
  core::StagedDirectory dir(out_dir, opt.overwrite);
  const format::LatentSummary s = format::write_latent(*layers, dir.path(), opt);
  dir.commit();
  log_info("wrote {} ({} tensors, {} factored modules)", dir.target().string(), s.tensors, s.modules);
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
