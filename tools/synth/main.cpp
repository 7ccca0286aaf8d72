// latentllm-synth: writes a random-weight checkpoint with the exact tensor names, shapes, config.json,
// tokenizer files and sharding of a real model, to measure latentllm's time and memory at scale. The
// weights are random: never use the output to judge quality. Only this file exits.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <map>

#include "latentllm/error.hpp"
#include "latentllm/resources.hpp"
#include "synth.hpp"

namespace {

using namespace latentllm;

struct Args {
  std::string preset;
  bool list = false;
  std::string out;
  std::string dtype;  // "" = the preset's torch_dtype
  std::uint64_t seed = 0;
  std::int64_t layers = 0;
  std::string tokenizers = "../shared/data/tokenizers";
  std::uint64_t max_shard_bytes = 5'000'000'000;
  bool force = false;
};

// Progress on stderr: one rewritten line on a terminal, a line every 5 s otherwise.
class ProgressLine {
 public:
  ProgressLine() : tty_(::isatty(2) != 0) {}
  void operator()(const synth::Progress& p) {
    const bool last = p.tensors_done == p.num_tensors;
    if (!last && p.seconds - last_print_ < (tty_ ? 0.2 : 5.0)) return;
    last_print_ = p.seconds;
    const double gb = static_cast<double>(p.bytes_done) * 1e-9, total = static_cast<double>(p.bytes_total) * 1e-9;
    const double rate = static_cast<double>(p.bytes_done) * 1e-6 / std::max(p.seconds, 1e-9);
    std::fprintf(stderr, "%ssynth: tensor %zu/%zu, %.2f/%.2f GB, %.0f MB/s, elapsed %.1f s, ETA %.1f s%s",
                 tty_ ? "\r\033[K" : "", p.tensors_done, p.num_tensors, gb, total, rate, p.seconds,
                 rate > 0 ? (total - gb) * 1e3 / rate : 0.0, tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  double last_print_ = -1e9;
};

int list_presets() {
  std::printf("%-20s %-33s %6s %6s %5s %5s %6s %7s %7s %8s %9s\n", "preset", "architecture", "d", "layers", "n_h",
              "n_kv", "d_h", "f", "V", "params", "bytes");
  for (const auto& name : synth::preset_names()) {
    const synth::SynthSpec s = synth::preset(name);
    const std::int64_t n = synth::num_params(s);
    std::printf("%-20s %-33s %6lld %6lld %5lld %5lld %6lld %7lld %7lld %7.3fB %5.2f GB %s\n", name.c_str(),
                s.config.at("architectures").at(0).get<std::string>().c_str(), static_cast<long long>(s.hidden_size),
                static_cast<long long>(s.num_hidden_layers), static_cast<long long>(s.num_attention_heads),
                static_cast<long long>(s.num_key_value_heads), static_cast<long long>(s.head_dim),
                static_cast<long long>(s.ffn_width), static_cast<long long>(s.vocab_size), static_cast<double>(n) * 1e-9,
                static_cast<double>(n) * static_cast<double>(dtype_size(s.dtype)) * 1e-9,
                std::string(synth::torch_dtype_name(s.dtype)).c_str());
  }
  return 0;
}

int run(const Args& a) {
  if (a.list) return list_presets();
  if (a.preset.empty()) throw ConfigError("--preset (expected a preset name, see --list, got none)");
  if (a.out.empty()) throw ConfigError("--out (expected an output directory, got none)");
  synth::SynthSpec spec = synth::preset(a.preset);
  static const std::map<std::string, DType> kDtypes = {{"f32", DType::F32}, {"f16", DType::F16}, {"bf16", DType::BF16}};
  if (!a.dtype.empty()) spec.dtype = kDtypes.at(a.dtype);
  if (a.layers > 0) spec.num_hidden_layers = a.layers;
  synth::WriteOptions opt;
  opt.seed = a.seed;
  opt.max_shard_bytes = a.max_shard_bytes;
  opt.tokenizers_dir = a.tokenizers;
  opt.overwrite = a.force;
  ProgressLine progress;
  opt.on_progress = std::ref(progress);
  const synth::WriteResult r = synth::write_checkpoint(spec, a.out, opt);
  std::printf("preset       %s (%s, %lld layers, seed %llu)\n", spec.name.c_str(),
              std::string(synth::torch_dtype_name(spec.dtype)).c_str(), static_cast<long long>(spec.num_hidden_layers),
              static_cast<unsigned long long>(a.seed));
  std::printf("output       %s\n", a.out.c_str());
  std::printf("parameters   %lld (%zu tensors, %zu shard%s)\n", static_cast<long long>(r.num_params), r.num_tensors,
              r.num_shards, r.num_shards == 1 ? "" : "s");
  std::printf("written      %.3f GB in %.1f s: %.0f MB/s\n", static_cast<double>(r.file_bytes) * 1e-9, r.seconds,
              static_cast<double>(r.file_bytes) * 1e-6 / std::max(r.seconds, 1e-9));
  std::printf("peak RSS     %.1f MiB\n", static_cast<double>(core::peak_rss_bytes()) / 1048576.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "latentllm-synth: writes a checkpoint with RANDOM weights and the exact tensor names, shapes, config.json,\n"
      "tokenizer files and sharding of a real Hugging Face model, deterministically from a seed (the RNG is\n"
      "specified in tools/synth/synth.hpp). For measuring latentllm's time and memory at scale ONLY: random\n"
      "weights say nothing about quality (perplexity, accuracy, compression loss)."};
  Args a;
  auto* preset = app.add_option("--preset", a.preset, "Model to imitate (--list shows them)");
  app.add_flag("--list", a.list, "List the presets (sizes, parameters, bytes at the default dtype) and exit")
      ->excludes(preset);
  app.add_option("--out", a.out, "Output checkpoint directory (written atomically)");
  app.add_option("--dtype", a.dtype, "Storage type (default: the preset's torch_dtype)")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}));
  app.add_option("--seed", a.seed, "RNG seed")->capture_default_str();
  app.add_option("--layers", a.layers, "Override num_hidden_layers (quick runs; 0 = the preset's)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--tokenizers", a.tokenizers, "Folder with the tokenizer folders opt, llama2, llama3, qwen3")
      ->capture_default_str();
  app.add_option("--max-shard-bytes", a.max_shard_bytes,
                 "Largest shard (tensor bytes) before a new one starts, as save_pretrained's max_shard_size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--force", a.force, "Replace an existing output directory");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run(a);
  } catch (const latentllm::Error& e) {
    std::fprintf(stderr, "latentllm-synth: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latentllm-synth: internal error: %s\n", e.what());
    return 2;
  }
}
