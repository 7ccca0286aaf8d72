// The Hugging Face export: the source's architecture, tensor names, shapes and order, with every factored
// module multiplied back into its dense weight, so transformers (and the tools built on it) load a
// plain model. config.json loses its `latent` section; the tokenizer and processor files are copied.
#include <set>

#include <fmt/format.h>

#include "core/mapped_file.hpp"
#include "core/parallel.hpp"
#include "format/writers.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;

// A tensor of the output: its spec, and its values made when the writer reaches it.
struct Entry {
  io::TensorSpec spec;
  std::function<std::vector<float>()> values;
};

MatrixD to_double(const TensorView& t) {
  const std::vector<float> v = t.to_f32();
  return Eigen::Map<const MatrixF>(v.data(), t.shape[0], t.shape[1]).cast<double>();
}

// W: [out, in] = B·A_dense, multiplied in double and rounded once to float. With block identity
// (docs/FORMAT.md) A_dense = [I_r | A] on the columns perm: the identity columns of W are B's columns
// exactly, the others B·A. Row blocks in parallel, each an independent product, so the bytes do not
// depend on the thread count.
std::vector<float> dense_weight(const TensorView& a, const TensorView& b, const io::LatentModule& lm) {
  const MatrixD B = to_double(b);  // [out, r]
  const MatrixD A = to_double(a);  // [r, in] or [r, in − r]
  const std::int64_t out = lm.out, in = lm.in, r = lm.rank;
  std::vector<float> w(static_cast<std::size_t>(out * in));  // [out, in] row-major
  core::parallel_for(out, 64, [&](std::int64_t i0, std::int64_t i1) {
    const MatrixD ba = B.middleRows(i0, i1 - i0) * A;  // [i1 − i0, in] or [i1 − i0, in − r]
    for (std::int64_t i = i0; i < i1; ++i) {
      float* row = w.data() + i * in;
      if (!lm.block_identity) {
        for (std::int64_t j = 0; j < in; ++j) row[j] = static_cast<float>(ba(i - i0, j));
        continue;
      }
      for (std::int64_t j = 0; j < r; ++j) row[lm.perm[static_cast<std::size_t>(j)]] = static_cast<float>(B(i, j));
      for (std::int64_t k = 0; k < in - r; ++k)
        row[lm.perm[static_cast<std::size_t>(r + k)]] = static_cast<float>(ba(i - i0, k));
    }
  });
  return w;
}

// The stored module name of a factor tensor ("<module>.A.weight" / "<module>.B.weight"), else "".
std::string factor_module(const std::string& name) {
  for (const char* suffix : {".A.weight", ".B.weight"})
    if (name.ends_with(suffix)) return name.substr(0, name.size() - std::string_view(suffix).size());
  return "";
}

// The output's tensors in the latent checkpoint's order, which is the source's with a module's tensors
// where its first one was: a factored module becomes `<module>.bias` (when it has one) then
// `<module>.weight`, the order of safetensors files written by name, as transformers saves them.
std::vector<Entry> plan_tensors(const ExportSource& src, DType dtype, std::size_t& multiplied) {
  std::vector<Entry> out;
  std::set<std::string> done;  // stored names of the factored modules written
  auto copy = [&](const std::string& name) {
    const TensorView& t = src.store.get(name);
    out.push_back({{name, dtype, t.shape}, [&t] { return t.to_f32(); }});
  };
  for (const auto& name : src.store.names()) {
    const std::string stored = factor_module(name);
    const auto it = stored.empty() ? src.modules.end() : src.modules.find(src.model.module_name(stored));
    if (it == src.modules.end()) {
      // The bias of a factored module goes out with its weight; everything else is copied as stored.
      if (!(name.ends_with(".bias") && src.modules.count(src.model.module_name(name.substr(0, name.size() - 5)))))
        copy(name);
      continue;
    }
    if (!done.insert(stored).second) continue;
    // A compressed module's bias is the updated one (paper appendix "Bias Update"); the compressor
    // updates only the biases the architecture has, so the config's bias switches stay the source's.
    if (src.store.has(stored + ".bias")) copy(stored + ".bias");
    const io::LatentModule& lm = it->second;
    const TensorView& a = src.store.get(stored + ".A.weight");
    const TensorView& b = src.store.get(stored + ".B.weight");
    out.push_back({{stored + ".weight", dtype, {lm.out, lm.in}}, [&a, &b, &lm] { return dense_weight(a, b, lm); }});
    ++multiplied;
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

ExportSummary write_hf(const ExportSource& src, const fs::path& dir, DType dtype) {
  ExportSummary s;
  s.dtype = dtype;
  const std::vector<Entry> entries = plan_tensors(src, dtype, s.multiplied);
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
      throw NumericError(fmt::format("{}; export with --dtype f32 (or bf16)", ex.what()));
    }
  }
  w.finish();
  core::write_text_atomic(dir / "config.json", hf_config(src.config, dtype).dump(2) + "\n");
  const fs::path from = src.model.dir();
  for (const char* f : checkpoint::companion_files())
    if (fs::exists(from / f)) core::write_text_atomic(dir / f, core::read_file(from / f));  // fsynced copy
  return s;
}

}  // namespace latentllm::format
