// Provenance of outputs (include/latentllm/provenance.hpp): sizes and hashes of checkpoints, and the
// model card rendered from the provenance object.
#include "latentllm/provenance.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/sha256.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/io.hpp"
#include "latentllm/version.hpp"
#include "format/writers.hpp"
#include "io/latent_format.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The regular files of `dir` whose names end with `suffix`, sorted by name.
std::vector<fs::path> files_ending(const fs::path& dir, std::string_view suffix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().filename().string().ends_with(suffix)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A safetensors file's header as its tensors describe it (validated as every load validates it): name,
// dtype, shape and byte size of each in file order, then its metadata.
std::string safetensors_header(const fs::path& file) {
  const io::SafetensorsFile st(file);
  std::string s;
  for (const TensorView& t : st.tensors())
    s += fmt::format("{} {} [{}] {}\n", t.name, dtype_name(t.dtype), fmt::join(t.shape, ","), t.nbytes);
  for (const auto& [k, v] : st.metadata()) s += fmt::format("{}={}\n", k, v);
  return s;
}

std::string human_bytes(std::int64_t b) {
  return b >= (std::int64_t{1} << 20) ? fmt::format("{:.2f} MiB", static_cast<double>(b) / 1048576.0)
                                      : fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024.0);
}

std::string str(const json& j, const char* key, const char* fallback = "-") {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return fallback;
  return j.at(key).is_string() ? j.at(key).get<std::string>() : j.at(key).dump();
}

// The parameters a stored tensor stands for. A quantized matrix's codes count the weights they encode
// (out × in of a dense module, out × r of B, r × in of A, r × (in − r) with block identity: the matrix of
// docs/FORMAT.md "Quantized tensors"), not their bytes; its scales and zero points are storage, counted in
// the bytes only. Anything else counts its elements.
std::int64_t tensor_params(const std::string& name, const TensorView& t,
                           const std::map<std::string, io::LatentModule>& modules) {
  const auto part = io::parse_latent_tensor_name(name);
  if (!part || part->piece == io::Piece::Values) return t.numel();
  if (part->piece != io::Piece::Codes) return 0;
  const auto it = modules.find(part->module);
  if (it == modules.end()) return t.numel();  // not a module the latent section names: as stored
  const io::LatentModule& m = it->second;
  switch (part->factor) {
    case io::Factor::Weight: return m.out * m.in;
    case io::Factor::B: return m.out * m.rank;
    case io::Factor::A: return m.rank * (m.block_identity ? m.in - m.rank : m.in);
  }
  return t.numel();
}

}  // namespace

WeightsSize weights_size(const fs::path& dir) {
  WeightsSize s;
  std::error_code ec;
  for (const auto& f : files_ending(dir, ".safetensors")) s.bytes += static_cast<std::int64_t>(fs::file_size(f, ec));
  for (const auto& f : files_ending(dir / "onnx", "")) s.bytes += static_cast<std::int64_t>(fs::file_size(f, ec));
  if (!fs::exists(dir / "model.safetensors", ec) && !fs::exists(dir / "model.safetensors.index.json", ec)) return s;
  const io::TensorStore store = io::TensorStore::open(dir);
  std::map<std::string, io::LatentModule> modules;  // a latent checkpoint's quantized modules' shapes
  if (fs::exists(dir / "config.json", ec)) {
    const auto config = nlohmann::json::parse(core::read_file(dir / "config.json"), nullptr, false);
    if (config.is_object()) modules = io::parse_latent_modules(config, (dir / "config.json").string());
  }
  std::set<std::string> types;
  for (const auto& name : store.names()) {
    const TensorView& t = store.get(name);
    s.params += tensor_params(name, t, modules);
    types.insert(std::string(dtype_name(t.dtype)));
  }
  for (const auto& t : types) s.dtypes += (s.dtypes.empty() ? "" : ", ") + t;
  return s;
}

json to_json(const WeightsSize& s) {
  return {{"model_params", s.params > 0 ? json(s.params) : json(nullptr)}, {"bytes", s.bytes},
          {"dtypes", s.dtypes.empty() ? json(nullptr) : json(s.dtypes)}};
}

json source_identity(const fs::path& dir) {
  core::Sha256 h;
  h.update(core::read_file(dir / "config.json"));
  std::error_code ec;
  if (fs::exists(dir / "model.safetensors.index.json", ec)) h.update(core::read_file(dir / "model.safetensors.index.json"));
  const auto weights = files_ending(dir, ".safetensors");
  std::int64_t total = 0;
  for (const auto& f : weights) {
    h.update(safetensors_header(f));
    total += static_cast<std::int64_t>(fs::file_size(f, ec));
  }
  json id = {{"path", fs::weakly_canonical(dir, ec).string()}, {"sha256", h.hex()}};
  if (total <= kHashWholeWeightsBelow) {
    core::Sha256 w;
    for (const auto& f : weights) w.update(core::read_file(f));
    id["weights_sha256"] = w.hex();
  }
  return id;
}

std::string data_sha256(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return core::file_sha256(path);
  core::Sha256 h;  // a ScienceQA folder: its problems and splits (the images are named by them)
  for (const char* f : {"problems.json", "pid_splits.json"}) h.update(core::read_file(path / f));
  return h.hex();
}

json tool_identity() { return {{"version", std::string(version())}, {"commit", std::string(git_commit())}}; }

namespace {

std::string how_made(const json& p) {
  const json& c = p.value("compression", json::object());
  const json& cal = p.value("calibration", json::object());
  const json& src = p.value("source", json::object());
  const json& tool = p.value("latentllm", json::object());
  std::string s = "## How it was made\n\n| | |\n|---|---|\n";
  s += fmt::format("| source model | `{}` |\n| source sha256 | `{}` (config.json, shard index, safetensors headers){} |\n",
                   str(src, "path"), str(src, "sha256"),
                   src.contains("weights_sha256") ? fmt::format("; weights `{}`", str(src, "weights_sha256")) : "");
  if (!c.empty()) {
    s += fmt::format("| method | `{}` (preset `{}`) |\n", str(c, "method"), str(c, "preset"));
    s += fmt::format("| ratio | {}: the share of the weights of the compressed linear modules (attention and MLP "
                     "projections) removed; embeddings, norms and the LM head are kept |\n", str(c, "ratio"));
  }
  if (!cal.empty()) {
    s += fmt::format("| calibration | {} x {} tokens of `{}` ({}, {} sampling, seed {}) |\n| calibration sha256 | `{}` |\n",
                     str(cal, "nsamples"), str(cal, "seqlen"), str(cal, "data"), str(cal, "source"),
                     str(cal, "sampling"), str(cal, "seed"), str(cal, "sha256"));
  }
  if (p.contains("export")) {
    const json& e = p.at("export");
    s += fmt::format("| exported from | `{}` (`latentllm export --format {}`) |\n", str(e, "from"), str(e, "format"));
  }
  s += fmt::format("| latentllm | {} (commit `{}`) |\n", str(tool, "version"), str(tool, "commit"));
  return s;
}

std::string sizes(const json& p) {
  const json& size = p.value("size", json::object());
  const json& b = size.value("before", json::object());
  const json& a = size.value("after", json::object());
  auto params = [](const json& x) { return x.contains("model_params") && x.at("model_params").is_number()
                                               ? fmt::format("{}", x.at("model_params").get<std::int64_t>()) : "-"; };
  auto bytes = [](const json& x) { return x.contains("bytes") ? human_bytes(x.at("bytes").get<std::int64_t>()) : "-"; };
  return fmt::format("## Size\n\nThe whole model (every stored tensor) and its weight files.\n\n"
                     "| | source | this folder |\n|---|---:|---:|\n| parameters | {} | {} |\n| weight files | {} | {} |\n"
                     "| storage type | {} | {} |\n", params(b), params(a), bytes(b), bytes(a), str(b, "dtypes"),
                     str(a, "dtypes", str(p.value("output", json::object()), "dtype").c_str()));
}

std::string quality(const json& p) {
  std::string s = "## Quality\n\n";
  if (p.contains("quality") && p.at("quality").is_object() && !p.at("quality").empty()) {
    for (const auto& [k, v] : p.at("quality").items()) s += fmt::format("- {}: {}\n", k, v.dump());
    return s;
  }
  return s + "Not measured when it was written. Perplexity by the GPTQ protocol: `latentllm ppl --model MODEL_DIR "
             "--dataset wikitext2 --data wiki.test.raw`.\n";
}

std::string usage(const std::string& format) {
  std::string s = "## Use\n\n`MODEL_DIR` is this folder.\n\n```sh\n";
  if (format == "latent") {
    s += "latentllm generate --model MODEL_DIR --prompt 'Once upon a time'\nlatentllm inspect MODEL_DIR\n"
         "latentllm export --model MODEL_DIR --out MODEL_DIR-hf --format hf     # transformers, vLLM, llama.cpp\n"
         "latentllm export --model MODEL_DIR --out MODEL_DIR-onnx --format onnx # ONNX Runtime\n```\n\n"
         "Hugging Face transformers cannot load this folder (config.json names `LatentLlmForCausalLM`): export it.\n";
  } else if (format == "hf") {
    s += "python -c \"from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained('MODEL_DIR')\"\n"
         "latentllm generate --model MODEL_DIR --prompt 'Once upon a time'\n```\n";
  } else {
    s += "# onnx/model.onnx: Optimum's decoder inputs and outputs; config.json's latentllm_export lists the past forms\n"
         "node tests/ort/check_export.js CASE.json   # as latentllm's tests run it\n```\n";
  }
  return s;
}

}  // namespace

std::string model_card(const json& p) {
  const json& out = p.value("output", json::object());
  const std::string format = str(out, "format", "latent");
  const json& c = p.value("compression", json::object());
  const std::string from = fs::path(str(p.value("source", json::object()), "path")).filename().string();
  const std::string what = format == "latent" ? "latent checkpoint (factored modules; latentllm reads it)"
                           : format == "hf"   ? "Hugging Face checkpoint (dense weights)"
                                              : "ONNX decoder graph";
  std::string s = format == "hf" ? "---\nlibrary_name: transformers\ntags:\n- latentllm\n---\n\n" : "";
  s += c.empty() ? fmt::format("# {}: {}\n\n", from, what)
                 : fmt::format("# {} compressed by latentllm ({}, ratio {})\n\nA {}, written by latentllm "
                               "(training-free low-rank compression, \"LatentLLM: Attention-Aware Joint Tensor "
                               "Compression\").\n\n", from, str(c, "method"), str(c, "ratio"), what);
  return s + how_made(p) + "\n" + sizes(p) + "\n" + quality(p) + "\n" + usage(format);
}

json complete_provenance(json p, const fs::path& dir, std::string_view format, DType dtype) {
  if (!p.is_object()) p = json::object();
  p["output"] = {{"format", format}, {"dtype", dtype_name(dtype)}};
  p["size"]["after"] = to_json(weights_size(dir));
  return p;
}

void write_model_card(const fs::path& dir, const json& provenance) {
  core::write_text_atomic(dir / "README.md", model_card(provenance));
}

}  // namespace latentllm::format
