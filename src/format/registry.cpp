// The output formats (one row each) and what every export does around its writer: the checks before any
// work (the format and its options, the output target, the input), and the atomic write after.
#include <array>
#include <optional>

#include <fmt/format.h>

#include "format/onnx_module.hpp"
#include "format/writers.hpp"
#include "io/latent_format.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/provenance.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;

struct FormatRow {
  const char* name;
  ExportSummary (*write)(LayerSource&, const fs::path&, const WriteOptions&);
  void (*check)(const model::Model&, const WriteOptions&);  // what the writer refuses, before any work; or null
  std::optional<DType> default_dtype;  // unset: the input's storage type
  bool exported;                       // written by `export` (a latent checkpoint is compress's own output)
  bool reads_dense;                    // `export` also takes a dense checkpoint (its modules as stored)
  // What the writer needs of this installation, made sure of by check_format before a long run; or null.
  void (*ready)();
};

// A new format is a row here plus its writer's file.
// hf of a dense checkpoint would be a copy of it: refused as needing no export.
constexpr std::array kFormats = {FormatRow{"latent", write_latent, nullptr, std::nullopt, false, false, nullptr},
                                 FormatRow{"hf", write_hf, nullptr, std::nullopt, true, false, nullptr},
                                 FormatRow{"onnx", write_onnx, check_onnx, DType::F32, true, true, load_onnx_module}};

std::vector<std::string> names(bool with_latent) {
  std::vector<std::string> out;
  for (const auto& row : kFormats)
    if (row.exported || with_latent) out.emplace_back(row.name);
  return out;
}

// The row of opt.format and the checks that need no model: its options.
const FormatRow& find_format(const ExportOptions& opt, std::string_view what, bool allow_latent) {
  const FormatRow* found = nullptr;
  for (const auto& row : kFormats)
    if (opt.format == row.name && (row.exported || allow_latent)) found = &row;
  if (!found) {
    throw ConfigError(fmt::format("{} (expected one of {}, got {})", what, fmt::join(names(allow_latent), ", "), opt.format));
  }
  if (opt.kv_cache != model::KvCacheMode::Auto && std::string_view(found->name) != "onnx") {
    throw ConfigError(fmt::format("--kv-cache {} with --format {} (expected --kv-cache only with --format onnx)",
                                  model::kv_cache_mode_name(opt.kv_cache), found->name));
  }
  return *found;
}

WriteOptions write_options(const ExportOptions& opt, const FormatRow& row, DType fallback) {
  WriteOptions w;
  w.dtype = opt.dtype ? *opt.dtype : row.default_dtype ? *row.default_dtype : fallback;
  w.kv_cache = opt.kv_cache;
  w.onnx_external_data_above = opt.onnx_external_data_above;
  w.provenance = opt.provenance;
  return w;
}

// The provenance of exporting `model_dir`: the latent checkpoint's own (a dense or an older one: the
// input's identity), with the export step.
nlohmann::json export_provenance(const fs::path& model_dir, std::string_view format) {
  const auto config = nlohmann::json::parse(core::read_file(model_dir / "config.json"), nullptr, false);
  nlohmann::json p;
  if (config.is_object() && config.contains("latent") && config["latent"].is_object()) {
    p = config["latent"].value("provenance", nlohmann::json::object());
  }
  if (!p.is_object() || p.empty()) p = {{"source", source_identity(model_dir)}, {"latentllm", tool_identity()}};
  std::error_code ec;
  p["export"] = {{"from", fs::weakly_canonical(model_dir, ec).string()}, {"format", format},
                 {"latentllm", tool_identity()}};
  return p;
}

// Checks what the writer refuses, then writes into a staged `out_dir`, committed when complete.
ExportSummary write(const FormatRow& row, LayerSource& layers, const fs::path& out_dir, const WriteOptions& w,
                    bool force) {
  if (row.check) row.check(layers.model(), w);
  core::StagedDirectory dir(out_dir, force);
  const ExportSummary s = row.write(layers, dir.path(), w);
  if (!w.provenance.is_null()) write_model_card(dir.path(), complete_provenance(w.provenance, dir.path(), row.name, w.dtype));
  dir.commit();
  return s;
}

// The storage type of a latent checkpoint: that of its factors (all floating tensors share it), or with
// every module quantized that of its other weights (the scales are F16 whatever the storage type).
DType stored_dtype(const fs::path& dir) {
  const auto store = io::TensorStore::open(dir);
  const auto names = store.names();
  for (const auto& name : names) {
    const auto t = io::parse_latent_tensor_name(name);
    if (t && t->factor == io::Factor::B && t->piece == io::Piece::Values) return store.get(name).dtype;
  }
  for (const auto& name : names) {
    const auto t = io::parse_latent_tensor_name(name);
    if (t && t->piece == io::Piece::Values) return store.get(name).dtype;
  }
  return DType::F32;
}

}  // namespace

std::vector<std::string> export_formats() { return names(false); }
std::vector<std::string> output_formats() { return names(true); }

void check_format(const model::Model& m, const ExportOptions& opt, std::string_view what, bool allow_latent) {
  const FormatRow& row = find_format(opt, what, allow_latent);
  if (row.check) row.check(m, write_options(opt, row, DType::F16));
  if (row.ready) row.ready();
}

ExportSummary export_model(const model::Model& m, const fs::path& layer_factors_dir, const fs::path& out_dir,
                           const ExportOptions& opt, const std::vector<const model::Linear*>& tower_modules) {
  const FormatRow& row = find_format(opt, "--format", false);
  checkpoint::check_output_target(m.dir(), out_dir, opt.force);
  const auto layers = layer_factors_dir.empty() ? model_layers(m) : progress_layers(m, layer_factors_dir);
  WriteOptions w = write_options(opt, row, DType::F16);
  w.tower_modules = tower_modules;
  return write(row, *layers, out_dir, w, opt.force);
}

ExportSummary export_checkpoint(const fs::path& model_dir, const fs::path& out_dir, const ExportOptions& opt) {
  const FormatRow& row = find_format(opt, "export format", false);
  checkpoint::check_output_target(model_dir, out_dir, opt.force);
  const auto layers = latent_layers(model_dir, row.reads_dense);
  WriteOptions w = write_options(opt, row, stored_dtype(model_dir));
  if (w.provenance.is_null()) w.provenance = export_provenance(model_dir, row.name);
  return write(row, *layers, out_dir, w, opt.force);
}

}  // namespace latentllm::format
