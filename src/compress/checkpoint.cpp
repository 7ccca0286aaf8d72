// Writer and `latent` section parser of latent checkpoints (docs/FORMAT.md).
#include "latentllm/checkpoint.hpp"

#include <unistd.h>

#include <fstream>
#include <set>

#include "core/mapped_file.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"

namespace latentllm::checkpoint {
namespace {

namespace fs = std::filesystem;

const char* const kTokenizerFiles[] = {"tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
                                       "vocab.json",       "merges.txt",            "tokenizer.model",
                                       "generation_config.json"};

// Owned float copies of the tensors to write (TensorToWrite holds spans into these).
struct Staged {
  std::vector<std::vector<float>> buffers;
  std::vector<io::TensorToWrite> tensors;

  void add(std::string name, DType dtype, std::vector<std::int64_t> shape, std::vector<float> data) {
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

std::map<std::string, LatentModule> parse_latent_modules(const nlohmann::json& config, const std::string& origin) {
  std::map<std::string, LatentModule> out;
  if (!config.contains("latent")) return out;
  const auto& latent = config.at("latent");
  if (!latent.is_object() || !latent.contains("modules") || !latent.at("modules").is_object()) {
    throw FormatError(fmt::format("{}: latent: expected an object with a `modules` object", origin));
  }
  const int version = latent.value("format_version", 0);
  if (version != kFormatVersion) {
    throw FormatError(fmt::format("{}: latent.format_version (expected {}, got {})", origin, kFormatVersion, version));
  }
  for (const auto& [name, e] : latent.at("modules").items()) {
    const std::string ctx = fmt::format("{}: latent.modules.{}", origin, name);
    try {
      LatentModule mod;
      mod.rank = e.at("rank").get<std::int64_t>();
      mod.in = e.at("in").get<std::int64_t>();
      mod.out = e.at("out").get<std::int64_t>();
      const std::string junction = e.value("junction", "none");
      if (junction != "none" && junction != "block-identity") {
        throw FormatError(fmt::format("{}: junction (expected none or block-identity, got {})", ctx, junction));
      }
      mod.block_identity = junction == "block-identity";
      if (mod.in <= 0 || mod.out <= 0 || mod.rank <= 0 || mod.rank > std::min(mod.in, mod.out)) {
        throw FormatError(fmt::format("{}: rank (expected 1..{}, got {})", ctx, std::min(mod.in, mod.out), mod.rank));
      }
      if (mod.block_identity) {
        mod.perm = e.at("perm").get<std::vector<std::int32_t>>();
        std::vector<bool> seen(static_cast<std::size_t>(mod.in), false);
        bool ok = static_cast<std::int64_t>(mod.perm.size()) == mod.in;
        for (auto p : mod.perm) {
          if (!ok || p < 0 || p >= mod.in || seen[static_cast<std::size_t>(p)]) {
            ok = false;
            break;
          }
          seen[static_cast<std::size_t>(p)] = true;
        }
        if (!ok) throw FormatError(fmt::format("{}: perm is not a permutation of 0..{}", ctx, mod.in - 1));
      }
      out.emplace(name, std::move(mod));
    } catch (const nlohmann::json::exception& ex) {
      throw FormatError(fmt::format("{}: {}", ctx, ex.what()));
    }
  }
  return out;
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
  latent["format_version"] = kFormatVersion;
  latent["modules"] = modules;
  config["latent"] = latent;
  config["torch_dtype"] = opt.dtype == DType::F32 ? "float32" : opt.dtype == DType::F16 ? "float16" : "bfloat16";

  // Build everything in a temporary sibling, then rename it into place.
  const fs::path out = fs::absolute(out_dir).lexically_normal();
  if (fs::exists(out) && !opt.overwrite) {
    throw IoError(fmt::format("{}: output directory exists (use --force to replace it)", out.string()));
  }
  const fs::path tmp = out.parent_path() / (out.filename().string() + ".partial-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec) || ec) {
    throw IoError(fmt::format("{}: cannot create output directory ({})", tmp.string(), ec.message()));
  }
  try {
    io::write_safetensors(tmp / "model.safetensors", staged.tensors, {{"format", "pt"}});
    const std::string text = config.dump(2) + "\n";
    core::write_file_atomic(tmp / "config.json", std::as_bytes(std::span(text)));
    for (const char* f : kTokenizerFiles) {
      if (fs::exists(m.dir() / f)) {
        fs::copy_file(m.dir() / f, tmp / f, fs::copy_options::overwrite_existing, ec);
        if (ec) throw IoError(fmt::format("{}: cannot copy ({})", (tmp / f).string(), ec.message()));
      }
    }
    if (fs::exists(out)) fs::remove_all(out);
    fs::rename(tmp, out, ec);
    if (ec) throw IoError(fmt::format("{}: cannot rename into place ({})", out.string(), ec.message()));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  log_info("wrote {} ({} tensors, {} factored modules)", out.string(), staged.tensors.size(), modules.size());
}

}  // namespace latentllm::checkpoint
