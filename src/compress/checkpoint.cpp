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
#include <set>

#include "core/mapped_file.hpp"
#include "latentllm/files.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"

namespace latentllm::checkpoint {
namespace {

namespace fs = std::filesystem;

const char* const kTokenizerFiles[] = {"tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
                                       "vocab.json",       "merges.txt",            "tokenizer.model",
                                       "generation_config.json"};

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

// Owned float copies of the tensors to write (TensorToWrite holds spans into these).
struct Staged {
  std::vector<std::vector<float>> buffers;
  std::vector<io::TensorToWrite> tensors;

  void add(std::string name, DType dtype, std::vector<std::int64_t> shape, std::vector<float> data) {
    check_representable(name, dtype, shape, data);
    buffers.push_back(std::move(data));
    tensors.push_back({std::move(name), dtype, std::move(shape), std::span<const float>(buffers.back())});
  }
};

std::vector<float> to_vector(const MatrixF& m) { return std::vector<float>(m.data(), m.data() + m.size()); }
std::vector<float> to_vector(const VectorF& v) { return std::vector<float>(v.data(), v.data() + v.size()); }

nlohmann::json module_entry(const model::Linear& lin) {
  nlohmann::json e = {{"rank", lin.rank()}, {"in", lin.in}, {"out", lin.out},
                      {"junction", lin.block_identity ? "block-identity" : "none"}};
  if (lin.block_identity) e["perm"] = lin.perm;
  return e;
}






}  // namespace

void check_output_writable(const fs::path& out_dir) {
  // A staged directory checks the parent and leaves nothing behind when it is not committed.
  const core::StagedDirectory probe(out_dir, /*overwrite=*/true);
}

void save(const model::Model& m, const fs::path& out_dir, const SaveOptions& opt) {
  const auto src = io::TensorStore::open(m.dir());
  // Modules by HF name, to route their weight/bias tensors.
  std::map<std::string, const model::Linear*> linears;
  for (int i = 0; i < m.num_layers(); ++i)
    for (const auto& lin : m.layer(i).linears) linears.emplace(lin.name, &lin);

  Staged staged;
  nlohmann::json modules = nlohmann::json::object();
  std::set<std::string> done;
  for (const auto& name : src.names()) {
    const auto dot = name.rfind('.');
    const std::string module = dot == std::string::npos ? name : name.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? "" : name.substr(dot + 1);
    const auto it = linears.find(module);
    if (it == linears.end()) {
      // Not a linear of a decoder layer (embeddings, norms, positions, head): copied unchanged.
      const auto& view = src.get(name);
      staged.add(name, opt.dtype, view.shape, view.to_f32());
      continue;
    }
    const model::Linear& lin = *it->second;
    if (!done.insert(module).second) continue;
    if (lin.factored()) {
      staged.add(module + ".A.weight", opt.dtype, {lin.A.rows(), lin.A.cols()}, to_vector(lin.A));
      staged.add(module + ".B.weight", opt.dtype, {lin.B.rows(), lin.B.cols()}, to_vector(lin.B));
      modules[module] = module_entry(lin);
    } else {
      staged.add(module + ".weight", opt.dtype, {lin.weight.rows(), lin.weight.cols()}, to_vector(lin.weight));
    }
    if (lin.bias.size() > 0) staged.add(module + ".bias", opt.dtype, {lin.bias.size()}, to_vector(lin.bias));
  }
  // Modules whose weight the source stored under another name would be lost silently: refuse.
  for (const auto& [name, lin] : linears) {
    if (!done.count(name)) throw FormatError(fmt::format("{}: module {} not found in the source checkpoint", m.dir().string(), name));
  }

  nlohmann::json config = m.config().raw;
  nlohmann::json latent = opt.info.is_object() ? opt.info : nlohmann::json::object();
  latent["format"] = "latentllm";
  latent["format_version"] = io::kLatentFormatVersion;
  latent["modules"] = modules;
  config["latent"] = latent;
  config["torch_dtype"] = opt.dtype == DType::F32 ? "float32" : opt.dtype == DType::F16 ? "float16" : "bfloat16";

  // Build everything in a temporary sibling, then rename it into place.
  core::StagedDirectory dir(out_dir, opt.overwrite);
  io::write_safetensors(dir.path() / "model.safetensors", staged.tensors, {{"format", "pt"}});
  core::write_text_atomic(dir.path() / "config.json", config.dump(2) + "\n");
  for (const char* f : kTokenizerFiles) {
    if (fs::exists(m.dir() / f)) core::write_text_atomic(dir.path() / f, core::read_file(m.dir() / f));  // fsynced copy
  }
  dir.commit();
  log_info("wrote {} ({} tensors, {} factored modules)", dir.target().string(), staged.tensors.size(), modules.size());
}

}  // namespace latentllm::checkpoint
