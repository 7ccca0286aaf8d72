// What every checkpoint latentllm writes shares (a latent checkpoint, an export of one): the files copied
// beside the weights and the rules that keep a user's files safe from `--out` (docs/FORMAT.md).
#include "latentllm/checkpoint.hpp"

#include "core/mapped_file.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/io.hpp"

namespace latentllm::checkpoint {
namespace {

namespace fs = std::filesystem;

// Copied beside the weights (by save and by every export): the tokenizer, generation defaults and, for a
// multimodal checkpoint, its image processor and chat template (eval and generate --image read them).
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
                                       "vocab.json",       "merges.txt",            "tokenizer.model",
                                       "generation_config.json", "preprocessor_config.json",
                                       "processor_config.json",  "chat_template.json"};

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
  // An ONNX export records itself in its config.json (format::write_onnx).
  if (j.is_object() && j.contains("latentllm_export") && j["latentllm_export"].is_object()) return true;
  // An export (format::export_checkpoint) drops the latent section and marks its weights instead.
  if (!fs::is_regular_file(dir / "model.safetensors", ec)) return false;
  try {
    return io::SafetensorsFile(dir / "model.safetensors").metadata().count("latentllm_export") > 0;
  } catch (const Error&) {
    return false;  // unreadable weights: not something we wrote
  }
}

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

}  // namespace latentllm::checkpoint
