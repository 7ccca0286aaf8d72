// The export formats (one row each) and what every export does before and after its writer: the input
// must be a latent checkpoint, the output obeys checkpoint::check_output_target and is written atomically.
#include <array>
#include <optional>

#include <fmt/format.h>

#include "core/mapped_file.hpp"
#include "format/writers.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/log.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;

struct FormatRow {
  const char* name;
  ExportSummary (*write)(const ExportSource&, const fs::path&, DType);
  std::optional<DType> default_dtype;  // unset: the latent checkpoint's storage type
};

// A new format is a row here plus its writer's file.
constexpr std::array kFormats = {FormatRow{"hf", write_hf, std::nullopt}, FormatRow{"onnx", write_onnx, DType::F32}};

const FormatRow& find_format(const std::string& name) {
  for (const auto& row : kFormats)
    if (name == row.name) return row;
  throw ConfigError(fmt::format("export format (expected one of {}, got {})", fmt::join(export_formats(), ", "), name));
}

// The storage type of the latent checkpoint: that of its factors (all floating tensors share it).
DType stored_dtype(const io::TensorStore& store, const model::Model& m,
                   const std::map<std::string, io::LatentModule>& modules) {
  return store.get(m.stored_name(modules.begin()->first) + ".B.weight").dtype;
}

ConfigError not_latent(const fs::path& dir) {
  return ConfigError(fmt::format("{}: not a latent checkpoint (expected a config.json with a latent section, as "
                                 "latentllm compress writes; a dense checkpoint needs no export)", dir.string()));
}

}  // namespace

std::vector<std::string> export_formats() {
  std::vector<std::string> names;
  for (const auto& row : kFormats) names.emplace_back(row.name);
  return names;
}

ExportSummary export_checkpoint(const fs::path& model_dir, const fs::path& out_dir, const ExportOptions& opt) {
  const FormatRow& row = find_format(opt.format);
  if (opt.kv_cache != model::KvCacheMode::Auto && std::string_view(row.name) != "onnx") {
    throw ConfigError(fmt::format("--kv-cache {} with --format {} (expected --kv-cache only with --format onnx)",
                                  model::kv_cache_mode_name(opt.kv_cache), row.name));
  }
  if (opt.kv_cache == model::KvCacheMode::Latent) {
    throw ConfigError("--kv-cache latent with --format onnx (expected auto or dense: the graph absorbs a latent "
                      "past into the attention, which keys rotated by RoPE do not allow)");
  }
  checkpoint::check_output_target(model_dir, out_dir, opt.force);
  const auto config = nlohmann::json::parse(core::read_file(model_dir / "config.json"), nullptr, false);
  if (!config.is_object() || !config.contains("latent")) {
    throw not_latent(model_dir);
  }
  // Lazy: names and shapes are checked, no layer is widened; the writer reads the tensors it needs. Strict
  // about unused tensors: the compressor updates only the biases the architecture has (its bias switches
  // stay the source's), so a stored bias the config does not switch on is refused here, naming it.
  const auto m = model::Model::load(model_dir, {.lazy = true});
  const auto store = io::TensorStore::open(model_dir);
  const auto modules = io::parse_latent_modules(config, (model_dir / "config.json").string());
  if (modules.empty()) {
    throw not_latent(model_dir);
  }
  const DType dtype = opt.dtype ? *opt.dtype : row.default_dtype ? *row.default_dtype : stored_dtype(store, *m, modules);

  core::StagedDirectory dir(out_dir, opt.force);
  const ExportSummary s = row.write({*m, store, config, modules, opt}, dir.path(), dtype);
  dir.commit();
  log_info("exported {} as {} ({} tensors, {} modules multiplied back, {})", dir.target().string(), row.name,
           s.tensors, s.multiplied, dtype_name(dtype));
  return s;
}

}  // namespace latentllm::format
