// The Hugging Face export: the source's architecture, tensor names, shapes and order, with every factored
// module multiplied back into its dense weight, so transformers (and the tools built on it) load a
// plain model. config.json loses its `latent` section; the tokenizer and processor files are copied.
#include <functional>
#include <set>

#include <fmt/format.h>

#include "core/mapped_file.hpp"
#include "core/parallel.hpp"
#include "format/writers.hpp"
#include "io/latent_format.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "model/weight_table.hpp"
#include "quant/pack.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;

// A tensor of the output: its spec, and its values made when the writer reaches it.
struct Entry {
  io::TensorSpec spec;
  std::function<std::vector<float>()> values;
};

// W: [out, in] = B·A_dense of a factored l, multiplied in double and rounded once to float. With block
// identity (docs/FORMAT.md) A_dense = [I_r | A] on the columns perm: the identity columns of W are B's
// columns exactly, the others B·A. Row blocks in parallel, each an independent product, so the bytes do
// not depend on the thread count.
// A matrix in double: float32 as is, 16-bit widened, quantized dequantized exactly (s·(c − z) in double).
MatrixD in_double(const model::Weight& w) {
  if (const auto& q = w.packed()) return quant::dequantize(quant::unpack(*q));
  return w.is_f32() ? MatrixD(w.f32().cast<double>()) : MatrixD(w.to_f32().cast<double>());
}

std::vector<float> dense_weight(const model::Linear& l) {
  const MatrixD B = in_double(l.B);  // [out, r]
  const MatrixD A = in_double(l.A);  // [r, in] or [r, in − r]
  const std::int64_t out = l.out, in = l.in, r = B.cols();
  std::vector<float> w(static_cast<std::size_t>(out * in));  // [out, in] row-major
  core::parallel_for(out, 64, [&](std::int64_t i0, std::int64_t i1) {
    const MatrixD ba = B.middleRows(i0, i1 - i0) * A;  // [i1 − i0, in] or [i1 − i0, in − r]
    for (std::int64_t i = i0; i < i1; ++i) {
      float* row = w.data() + i * in;
      if (!l.block_identity) {
        for (std::int64_t j = 0; j < in; ++j) row[j] = static_cast<float>(ba(i - i0, j));
        continue;
      }
      for (std::int64_t j = 0; j < r; ++j) row[l.perm[static_cast<std::size_t>(j)]] = static_cast<float>(B(i, j));
      for (std::int64_t k = 0; k < in - r; ++k)
        row[l.perm[static_cast<std::size_t>(r + k)]] = static_cast<float>(ba(i - i0, k));
    }
  });
  return w;
}

std::vector<float> to_vector(const VectorF& v) { return {v.data(), v.data() + v.size()}; }

std::vector<float> weight_of(const model::Linear& l) {
  if (l.factored()) return dense_weight(l);
  if (l.weight.packed()) {  // [out, in], each value rounded once from the exact dequantized one
    const MatrixF w = in_double(l.weight).cast<float>();
    return std::vector<float>(w.data(), w.data() + w.size());
  }
  const MatrixF stored = l.weight.is_f32() ? MatrixF() : l.weight.to_f32();  // kept as stored (16-bit views)
  const MatrixF& w = l.weight.is_f32() ? l.weight.f32() : stored;            // [out, in]
  return std::vector<float>(w.data(), w.data() + w.size());
}

// A factored module outside the decoder layers (a LLaVA's vision tower or projector): in memory (compress
// --components), or stored in a latent checkpoint (its `latent` entry and its factor tensors).
struct OuterModule {
  const model::Linear* in_memory = nullptr;
  const io::LatentModule* stored = nullptr;
};

MatrixF matrix_of(const TensorView& t) {  // [rows, cols] as stored
  MatrixF m(t.shape[0], t.shape[1]);
  t.to_f32(std::span<float>(m.data(), static_cast<std::size_t>(m.size())));
  return m;
}

// The stored module as a Linear, read when its entry is written.
model::Linear read_module(const io::TensorStore& src, const std::string& name, const io::LatentModule& lm) {
  model::Linear l;
  l.in = lm.in;
  l.out = lm.out;
  if (lm.quantized()) {
    throw FormatError(fmt::format("{}: a quantized module outside the decoder layers (expected 16-bit factors)", name));
  }
  l.B = matrix_of(src.get(io::latent_tensor_name(name, io::Factor::B)));
  l.A = matrix_of(src.get(io::latent_tensor_name(name, io::Factor::A)));
  l.block_identity = lm.block_identity;
  l.perm = lm.perm;
  return l;
}

// The output's tensors in the source's order, a module's where its first tensor was: `<module>.bias`
// (when it has one) then `<module>.weight`, the order of safetensors files written by name, as
// transformers saves them. Decoder-layer modules from `layers` (factored ones multiplied back), the
// outer modules likewise, the rest copied from the source.
std::vector<Entry> plan_tensors(LayerSource& layers, const io::TensorStore& src, const WriteOptions& opt,
                                const std::map<std::string, io::LatentModule>& latent, std::size_t& multiplied) {
  const model::Model& m = layers.model();
  const auto where = layer_modules(m);
  std::map<std::string, OuterModule> outer;  // HF module name -> module
  for (const model::Linear* l : opt.tower_modules) outer[m.module_name(l->name)].in_memory = l;
  // A quantized LM head (compress --head-bits) is the model's packed table, written dense as lm_head.weight.
  const quant::PackedMatrix* head = m.head_weight().packed();
  for (const auto& [name, lm] : latent)
    if (!where.count(name) && !(head && name == "lm_head")) outer[name].stored = &lm;
  std::vector<Entry> out;
  auto copy = [&](const std::string& name) {
    out.push_back({{name, opt.dtype, src.get(name).shape}, [&src, name] { return src.get(name).to_f32(); }});
  };
  std::set<std::string> done;  // HF names of the modules written
  std::vector<ModuleForm> forms;  // of layer `forms_of`
  int forms_of = -1;
  for (const auto& name : src.names()) {
    const std::string stored = tensor_module(name);
    const std::string module = m.module_name(stored);
    if (head && module == "lm_head") {
      const auto t = io::parse_latent_tensor_name(name);
      if (m.config().tie_word_embeddings && t && t->piece == io::Piece::Values) {
        // The tied table stored under the head's name: the embedding, whose own name the output would need.
        throw FormatError(fmt::format("{}: {} is the tied embedding and the head is quantized (expected the "
                                      "embedding stored under its own name for an hf export)", m.dir().string(), name));
      }
      if (!done.insert(module).second) continue;
      out.push_back({{stored + ".weight", opt.dtype, {head->rows, head->cols}}, [head] {
                       // [V, p], each value rounded once from the exact dequantized one
                       const MatrixF w = quant::dequantize(quant::unpack(*head)).cast<float>();
                       return std::vector<float>(w.data(), w.data() + w.size());
                     }});
      continue;
    }
    if (const auto o = outer.find(module); o != outer.end()) {
      if (!done.insert(module).second) continue;
      const model::Linear* l = o->second.in_memory;
      const io::LatentModule* lm = o->second.stored;
      if (l && l->bias.size() > 0) {
        out.push_back({{stored + ".bias", opt.dtype, {l->out}}, [l] { return to_vector(l->bias); }});
      } else if (!l && src.has(stored + ".bias")) {
        copy(stored + ".bias");
      }
      const std::int64_t rows = l ? l->out : lm->out, cols = l ? l->in : lm->in;
      out.push_back({{stored + ".weight", opt.dtype, {rows, cols}}, [&src, l, lm, stored] {
                       return l ? weight_of(*l) : dense_weight(read_module(src, stored, *lm));
                     }});
      multiplied += !l || l->factored();
      continue;
    }
    const auto it = where.find(module);
    if (it == where.end()) {
      copy(name);  // not a linear module (embeddings, norms, positions, head, an uncompressed tower): unchanged
      continue;
    }
    if (!done.insert(module).second) continue;
    const auto [i, k] = it->second;
    if (i != forms_of) forms = layers.forms(forms_of = i);
    const model::Linear& spec = m.layer_spec(i).linears[k];
    auto current = [&layers, i = i, k = k]() -> const model::Linear& { return layers.layer(i).linears[k]; };
    // A compressed module's bias is the updated one (paper appendix "Bias Update"); the compressor
    // updates only the biases the architecture has, so the config's bias switches stay the source's.
    if (forms[k].bias) out.push_back({{stored + ".bias", opt.dtype, {spec.out}}, [current] { return to_vector(current().bias); }});
    out.push_back({{stored + ".weight", opt.dtype, {spec.out, spec.in}}, [current] { return weight_of(current()); }});
    multiplied += forms[k].rank > 0;
  }
  return out;
}

const char* torch_dtype(DType d) { return d == DType::F32 ? "float32" : d == DType::F16 ? "float16" : "bfloat16"; }

// config.json as the source had it: the `latent` section dropped, the storage type recorded (in every
// part that records one: a multimodal config's text_config and vision_config too).
nlohmann::json hf_config(nlohmann::json config, DType dtype) {
  config.erase("latent");
  auto set_dtype = [dtype](nlohmann::json& c) {
    c["torch_dtype"] = torch_dtype(dtype);
    if (c.contains("dtype")) c["dtype"] = torch_dtype(dtype);  // newer transformers' spelling
  };
  set_dtype(config);
  for (const char* part : {"text_config", "vision_config"}) {
    if (config.contains(part) && config[part].is_object() &&
        (config[part].contains("torch_dtype") || config[part].contains("dtype"))) {
      set_dtype(config[part]);
    }
  }
  return config;
}

}  // namespace

ExportSummary write_hf(LayerSource& layers, const fs::path& dir, const WriteOptions& opt) {
  const model::Model& m = layers.model();
  const auto src = io::TensorStore::open(m.dir());
  const nlohmann::json& config = m.config().raw;
  const auto latent = io::parse_latent_modules(config, (m.dir() / "config.json").string());
  ExportSummary s;
  s.dtype = opt.dtype;
  const std::vector<Entry> entries = plan_tensors(layers, src, opt, latent, s.multiplied);
  s.tensors = entries.size();
  std::vector<io::TensorSpec> specs;
  for (const auto& e : entries) specs.push_back(e.spec);
  // The metadata marks the output as ours, so that --force may replace it (checkpoint::is_latent_output).
  io::SafetensorsWriter w(dir / "model.safetensors", std::move(specs), {{"format", "pt"}, {kExportMetadataKey, "hf"}});
  for (const auto& e : entries) {
    try {
      w.append(e.values());
    } catch (const NumericError& ex) {
      // The writer names the tensor and the value; the user also needs the way out.
      throw NumericError(fmt::format("{}; write the export with --dtype f32 (or bf16)", ex.what()));
    }
  }
  w.finish();
  nlohmann::json hf = hf_config(config, opt.dtype);
  if (m.head_weight().packed()) hf["tie_word_embeddings"] = false;  // the quantized head is a matrix of its own
  core::write_text_atomic(dir / "config.json", hf.dump(2) + "\n");
  for (const char* f : checkpoint::companion_files())
    if (fs::exists(m.dir() / f)) core::write_text_atomic(dir / f, core::read_file(m.dir() / f));  // fsynced copy
  return s;
}

}  // namespace latentllm::format
