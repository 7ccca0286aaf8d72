// `latentllm export`: a latent checkpoint as a plain checkpoint of another format (format::export_checkpoint),
// e.g. --format hf: the dense Hugging Face model that transformers, lm-eval-harness or vLLM load; --format
// onnx: a decoder graph with a KV cache for ONNX Runtime that keeps the factored modules.
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "latentllm/export.hpp"
#include "options.hpp"

namespace latentllm::cli {
namespace {

struct ExportArgs {
  std::string model, out, format = "hf", dtype, kv_cache = "auto";  // dtype "": the format's default
  bool force = false;
  RunArgs run;
};

int run_export(const ExportArgs& a) {
  apply_run_options(a.run);
  format::ExportOptions opt;
  opt.format = a.format;
  if (!a.dtype.empty()) opt.dtype = parse_storage_dtype(a.dtype);
  opt.force = a.force;
  opt.kv_cache = model::parse_kv_cache_mode(a.kv_cache);
  const std::string out = output_dir(a.out);
  const format::ExportSummary s = format::export_checkpoint(a.model, out, opt);
  if (!quiet()) {
    std::string multiplied = a.format == "hf" ? fmt::format(", {} factored modules multiplied back", s.multiplied)
                                              : std::string();
    if (s.nbits > 0) multiplied += fmt::format(", {} quantized matrices as MatMulNBits", s.nbits);
    std::printf("exported %s as %s to %s: %zu tensors%s, %s\n", a.model.c_str(), a.format.c_str(), out.c_str(),
                s.tensors, multiplied.c_str(), std::string(dtype_name(s.dtype)).c_str());
  }
  return 0;
}

}  // namespace

Command add_export(CLI::App& app) {
  auto* sub = app.add_subcommand("export", "Export a latent checkpoint to a plain checkpoint (hf: dense Hugging Face "
                                           "model, every factored module multiplied back; onnx: an ONNX Runtime "
                                           "decoder graph that keeps the factors)");
  auto a = std::make_shared<ExportArgs>();
  sub->add_option("--model", a->model, "Latent checkpoint directory (written by latentllm compress); --format onnx "
                                       "also takes a dense Hugging Face checkpoint")
      ->required()->group("Model");
  sub->add_option("--out", a->out, "Output directory")->required()->group("Model");
  sub->add_option("--format", a->format, "Output format: hf (Hugging Face: config.json, model.safetensors, tokenizer); "
                                         "onnx (onnx/model.onnx with a KV cache, Optimum's decoder inputs and outputs, "
                                         "latent past where generate --kv-cache auto caches the latent; docs/FORMAT.md)")
      ->capture_default_str()->group("Model");
  sub->add_option("--dtype", a->dtype, "Storage type of the output: f16, bf16, f32 (default: hf the latent checkpoint's, onnx f32; "
                                       "onnx: f32 or f16, also the type of its inputs and outputs)")
      ->group("Model");
  sub->add_option("--kv-cache", a->kv_cache,
                  "onnx: which past inputs carry the latent: auto (where generate --kv-cache auto caches it) or "
                  "dense (none: Optimum's and transformers.js's dense pasts)")
      ->capture_default_str()->group("Model");
  sub->add_flag("--force", a->force, "Replace an earlier output (a latent checkpoint or an export)")->group("Model");
  add_run_options(sub, a->run);
  // An export holds exactly the tensors its architecture reads: a stored tensor config.json does not use
  // (e.g. a bias the architecture has no switch on for) is an error, never copied along.
  sub->remove_option(sub->get_option("--allow-unused-tensors"));
  return {sub, [a] { return run_export(*a); }, Ranks::Root};  // one output written once, by rank 0
}

}  // namespace latentllm::cli
