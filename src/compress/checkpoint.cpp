// Writer and `latent` section parser of latent checkpoints (docs/FORMAT.md).
#include "latentllm/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <functional>
#include <map>
#include <set>

#include "core/mapped_file.hpp"
#include "latentllm/files.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"

namespace latentllm::checkpoint {
namespace {

namespace fs = std::filesystem;

// Copied beside the weights (by save and by every export): the tokenizer, generation defaults and, for a
// multimodal checkpoint, its image processor and chat template (eval and generate --image read them).
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
                                       "vocab.json",       "merges.txt",            "tokenizer.model",
                                       "generation_config.json", "preprocessor_config.json",
                                       "processor_config.json",  "chat_template.json"};

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

std::vector<float> to_float(const std::vector<std::int32_t>& v) { return {v.begin(), v.end()}; }

// The decoder layers as they are written, one at a time: the model's layer when it is loaded,
// otherwise its skeleton with the factors of the layer factors directory (the last one read is kept).
class LayerReader {
 public:
  LayerReader(const model::Model& m, const fs::path& dir) : m_(m), dir_(dir) {}
  const model::DecoderLayer& get(int i) {
    if (m_.layer_loaded(i)) return m_.layer(i);
    if (i != current_) {
      if (dir_.empty()) {
        throw Error(fmt::format("{}: layer {} is not loaded (expected SaveOptions::layer_factors_dir for a lazy "
                                "model, got none)", m_.dir().string(), i));
      }
      current_ = -1;
      copy_ = m_.layer_spec(i);
      read_layer_factors(layer_factors_file(dir_, i), copy_);
      current_ = i;
    }
    return copy_;
  }

 private:
  const model::Model& m_;
  fs::path dir_;
  model::DecoderLayer copy_;
  int current_ = -1;
};

// A tensor of the output: its spec, and its values made when the writer reaches it.
struct Entry {
  io::TensorSpec spec;
  std::function<std::vector<float>()> values;
};

std::vector<float> to_vector(const MatrixF& m) { return std::vector<float>(m.data(), m.data() + m.size()); }
std::vector<float> to_vector(const VectorF& v) { return std::vector<float>(v.data(), v.data() + v.size()); }

nlohmann::json module_entry(const model::Linear& lin) {
  nlohmann::json e = {{"rank", lin.rank()}, {"in", lin.in}, {"out", lin.out},
                      {"junction", lin.block_identity ? "block-identity" : "none"}};
  if (lin.block_identity) e["perm"] = lin.perm;
  return e;
}
// The output's tensors in the source's order, a module's tensors where its first one was: the
// non-linear tensors and the modules of layers neither loaded nor compressed from the source,
// the others from `layers`. Fills `modules` (the latent section's entries).
std::vector<Entry> plan_tensors(const model::Model& m, const io::TensorStore& src, LayerReader& layers, DType dtype,
                                const std::vector<const model::Linear*>& towers, nlohmann::json& modules) {
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
    const model::Linear& lin = layers.get(i).linears[k];
    auto current = [&layers, i = i, k = k]() -> const model::Linear& { return layers.get(i).linears[k]; };
    if (!add_weight(stored, lin, current)) from_source(stored + ".weight");  // a layer not loaded, its module not compressed
    if (lin.bias.size() > 0) {
      add_bias(stored, lin, current);
    } else if (!m.layer_loaded(i) && !lin.factored() && src.has(stored + ".bias")) {
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

std::span<const char* const> companion_files() { return kTokenizerFiles; }

void check_output_writable(const fs::path& out_dir) {
  // A staged directory checks the parent and leaves nothing behind when it is not committed.
  const core::StagedDirectory probe(out_dir, /*overwrite=*/true);
}

bool is_latent_output(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / "config.json", ec)) return false;
  const auto j = nlohmann::json::parse(core::read_file(dir / "config.json"), nullptr, false);
  if (j.is_object() && j.contains("latent") && j["latent"].is_object()) return true;
  // An export (format::export_checkpoint) drops the latent section and marks its weights instead.
  if (!fs::is_regular_file(dir / "model.safetensors", ec)) return false;
  try {
    return io::SafetensorsFile(dir / "model.safetensors").metadata().count("latentllm_export") > 0;
  } catch (const Error&) {
    return false;  // unreadable weights: not something we wrote
  }
}

namespace {

// Whether `inner` is `outer` or lies below it (both resolved).
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

void check_output_target(const fs::path& model_dir, const fs::path& out_dir, bool force) {
  std::error_code ec;
  const fs::path model = fs::weakly_canonical(model_dir, ec);
  const fs::path out = fs::weakly_canonical(out_dir, ec);
  const std::string o = out_dir.string(), m = model_dir.string();
  if (!model.empty() && !out.empty()) {
    if (out == model) {
      throw ConfigError(fmt::format("{}: output is the input model {} (expected another directory: writing there would "
                                    "replace the model; --force does not change this)", o, m));
    }
    if (within(out, model)) {
      throw ConfigError(fmt::format("{}: output inside the input model {} (expected a directory outside it; --force "
                                    "does not change this)", o, m));
    }
    if (within(model, out)) {
      throw ConfigError(fmt::format("{}: output contains the input model {} (expected a directory that does not: "
                                    "replacing it would delete the model; --force does not change this)", o, m));
    }
  }
  if (!fs::exists(fs::symlink_status(out_dir, ec))) return;
  if (!fs::is_directory(out_dir, ec)) {
    throw IoError(fmt::format("{}: exists and is not a directory (expected a new path or a latentllm output "
                              "directory; it is never replaced, --force neither)", o));
  }
  if (!force) throw IoError(fmt::format("{}: output directory exists (use --force to replace it)", o));
  if (fs::is_empty(out_dir, ec) || is_latent_output(out_dir)) return;
  throw IoError(fmt::format("{}: exists and is not a latentllm output (expected an empty directory or one that "
                            "latentllm wrote: a latent checkpoint or an export of one; --force replaces only "
                            "those)", o));
}

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
      perms.push_back(to_float(lin.perm));
      tensors.push_back({lin.name + ".perm", DType::F32, {static_cast<std::int64_t>(lin.perm.size())}, perms.back()});
    }
    if (lin.bias.size() > 0) tensors.push_back({lin.name + ".bias", DType::F32, {lin.bias.size()}, span_of(lin.bias)});
  }
  io::write_safetensors(file, tensors);
}

void check_layer_factors_storable(const fs::path& file, DType dtype) {
  if (dtype == DType::F32) return;
  const io::SafetensorsFile st(file);
  for (const auto& t : st.tensors()) {
    if (!t.name.ends_with(".B") && !t.name.ends_with(".A") && !t.name.ends_with(".bias")) continue;
    std::vector<float> data(static_cast<std::size_t>(t.numel()));
    t.to_f32(data);
    check_representable(t.name + (t.name.ends_with(".bias") ? "" : ".weight"), dtype, t.shape, data);
  }
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
  }
}

void save(const model::Model& m, const fs::path& out_dir, const SaveOptions& opt) {
  const auto src = io::TensorStore::open(m.dir());
  LayerReader layers(m, opt.layer_factors_dir);
  nlohmann::json modules = nlohmann::json::object();
  const std::vector<Entry> entries = plan_tensors(m, src, layers, opt.dtype, opt.tower_modules, modules);

  nlohmann::json config = m.config().raw;
  nlohmann::json latent = opt.info.is_object() ? opt.info : nlohmann::json::object();
  latent["format"] = "latentllm";
  latent["format_version"] = io::kLatentFormatVersion;
  latent["modules"] = modules;
  config["latent"] = latent;
  config["torch_dtype"] = opt.dtype == DType::F32 ? "float32" : opt.dtype == DType::F16 ? "float16" : "bfloat16";

  // Build everything in a temporary sibling, then rename it into place.
  core::StagedDirectory dir(out_dir, opt.overwrite);
  write_entries(dir.path() / "model.safetensors", entries);
  core::write_text_atomic(dir.path() / "config.json", config.dump(2) + "\n");
  for (const char* f : kTokenizerFiles) {
    if (fs::exists(m.dir() / f)) core::write_text_atomic(dir.path() / f, core::read_file(m.dir() / f));  // fsynced copy
  }
  dir.commit();
  log_info("wrote {} ({} tensors, {} factored modules)", dir.target().string(), entries.size(), modules.size());
}

}  // namespace latentllm::checkpoint
