// write_checkpoint: a synthetic checkpoint directory, streamed shard by shard (io::SafetensorsWriter),
// written into a sibling partial directory and renamed into place, as checkpoint::save does.
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "latentllm/checkpoint.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"
#include "synth.hpp"

namespace latentllm::synth {
namespace {

namespace fs = std::filesystem;

// Tokenizer configs for the folders that ship only the vocabulary (opt: vocab.json + merges.txt;
// llama2: tokenizer.model), with the entries of facebook/opt-* and meta-llama/Llama-2-7b-hf that
// latentllm's loader reads (AddedToken objects written as plain strings). OPT's HF tokenizer prepends
// BOS </s> = 2 (add_bos_token), Llama-2's BOS <s> = 1.
constexpr const char* kOptTokenizerConfig = R"({
  "add_bos_token": true,
  "add_prefix_space": false,
  "bos_token": "</s>",
  "eos_token": "</s>",
  "errors": "replace",
  "model_max_length": 1000000000000000019884624838656,
  "pad_token": "<pad>",
  "tokenizer_class": "GPT2Tokenizer",
  "unk_token": "</s>"
}
)";
constexpr const char* kOptSpecialTokens = R"({
  "bos_token": "</s>",
  "eos_token": "</s>",
  "pad_token": "<pad>",
  "unk_token": "</s>"
}
)";
constexpr const char* kLlama2TokenizerConfig = R"({
  "add_bos_token": true,
  "add_eos_token": false,
  "bos_token": "<s>",
  "clean_up_tokenization_spaces": false,
  "eos_token": "</s>",
  "legacy": false,
  "model_max_length": 1000000000000000019884624838656,
  "pad_token": null,
  "padding_side": "right",
  "sp_model_kwargs": {},
  "tokenizer_class": "LlamaTokenizer",
  "unk_token": "<unk>"
}
)";
constexpr const char* kLlama2SpecialTokens = R"({
  "bos_token": "<s>",
  "eos_token": "</s>",
  "unk_token": "<unk>"
}
)";

// llava-hf's tokenizer (LlamaTokenizer over Llama-2's tokenizer.model): <image> = 32000 and <pad> = 32001
// added after the 32000 pieces (added_tokens_decoder), <pad> the padding token.
constexpr const char* kLlavaTokenizerConfig = R"({
  "add_bos_token": true,
  "add_eos_token": false,
  "added_tokens_decoder": {
    "0": {"content": "<unk>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
    "1": {"content": "<s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
    "2": {"content": "</s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
    "32000": {"content": "<image>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
    "32001": {"content": "<pad>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true}
  },
  "bos_token": "<s>",
  "clean_up_tokenization_spaces": false,
  "eos_token": "</s>",
  "legacy": false,
  "model_max_length": 1000000000000000019884624838656,
  "pad_token": "<pad>",
  "padding_side": "left",
  "processor_class": "LlavaProcessor",
  "sp_model_kwargs": {},
  "tokenizer_class": "LlamaTokenizer",
  "unk_token": "<unk>",
  "use_default_system_prompt": false
}
)";
constexpr const char* kLlavaSpecialTokens = R"({
  "bos_token": "<s>",
  "eos_token": "</s>",
  "pad_token": "<pad>",
  "unk_token": "<unk>"
}
)";
// LLaVA's generation_config.json (Llama-2's BOS and EOS, <pad>).
constexpr const char* kLlavaGenerationConfig = R"({
  "_from_model_config": true,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "pad_token_id": 32001
}
)";

struct TokenizerFiles {
  std::vector<const char*> copied;                               // from tokenizers_dir/<name>/
  std::vector<std::pair<const char*, const char*>> written;      // file name, text
};

TokenizerFiles tokenizer_files(const SynthSpec& spec) {
  const std::string& name = spec.tokenizer;
  if (spec.llava) {
    if (name != "llama2") {
      throw ConfigError(fmt::format("synth {}: tokenizer (expected llama2 for LLaVA, got {})", spec.name, name));
    }
    return {{"tokenizer.model"},
            {{"tokenizer_config.json", kLlavaTokenizerConfig}, {"special_tokens_map.json", kLlavaSpecialTokens}}};
  }
  if (name == "opt") {
    return {{"vocab.json", "merges.txt"},
            {{"tokenizer_config.json", kOptTokenizerConfig}, {"special_tokens_map.json", kOptSpecialTokens}}};
  }
  if (name == "llama2") {
    return {{"tokenizer.model"},
            {{"tokenizer_config.json", kLlama2TokenizerConfig}, {"special_tokens_map.json", kLlama2SpecialTokens}}};
  }
  if (name == "llama3" || name == "qwen3") return {{"tokenizer.json", "tokenizer_config.json"}, {}};
  throw ConfigError(fmt::format("synth: tokenizer (expected opt, llama2, llama3 or qwen3, got {})", name));
}

void write_text(const fs::path& path, const std::string& text) { core::write_text_atomic(path, text); }

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The shards of the plan, each streamed through one SafetensorsWriter.
void write_shards(const SynthSpec& spec, const std::vector<TensorPlan>& plan, const std::vector<Shard>& shards,
                  const fs::path& dir, const WriteOptions& opt, Clock::time_point t0, WriteResult& res) {
  const std::size_t esize = dtype_size(spec.dtype);
  std::vector<float> chunk(std::max<std::size_t>(opt.chunk_values, 1));  // [chunk_values]
  Progress prog;
  prog.num_tensors = plan.size();
  prog.bytes_total = res.total_size;
  for (const Shard& shard : shards) {
    std::vector<io::TensorSpec> specs;
    for (const std::size_t i : shard.tensors) specs.push_back({plan[i].name, spec.dtype, plan[i].shape});
    io::SafetensorsWriter w(dir / shard.file, std::move(specs), {{"format", "pt"}});
    for (const std::size_t i : shard.tensors) {
      const TensorPlan& t = plan[i];
      const std::uint64_t key = tensor_key(opt.seed, t.name);
      const std::uint64_t n = t.numel();
      for (std::uint64_t off = 0; off < n; off += chunk.size()) {
        const std::span<float> part = std::span(chunk).first(static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), n - off)));
        fill_values(key, off, t.center, t.scale, part);
        w.append(part);
      }
      ++prog.tensors_done;
      prog.tensor = t.name;
      prog.bytes_done += n * esize;
      prog.seconds = seconds_since(t0);
      if (opt.on_progress) opt.on_progress(prog);
    }
    w.finish();
    res.file_bytes += w.file_bytes();
  }
}

std::string index_json(const std::vector<TensorPlan>& plan, const std::vector<Shard>& shards, std::uint64_t total) {
  nlohmann::json weight_map = nlohmann::json::object();  // sorted by name, as json.dumps(sort_keys=True)
  for (const Shard& s : shards)
    for (const std::size_t i : s.tensors) weight_map[plan[i].name] = s.file;
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return index.dump(2) + "\n";
}

std::string provenance_json(const SynthSpec& spec, const WriteOptions& opt, const WriteResult& res) {
  nlohmann::ordered_json j;
  j["generator"] = "latentllm-synth (tools/synth)";
  j["note"] = "random weights with a real model's names, shapes and config: for time and memory "
              "measurements only, never for quality";
  j["preset"] = spec.name;
  j["seed"] = opt.seed;
  j["dtype"] = std::string(torch_dtype_name(spec.dtype));
  j["init"] = spec.init == InitScheme::Hf ? "hf" : "tiny";
  j["rng"] = "splitmix64 finalizer over (seed ^ fnv1a64(name)) and element counters; tools/synth/synth.hpp";
  j["num_hidden_layers"] = spec.num_hidden_layers;
  if (spec.llava) j["vision_num_hidden_layers"] = spec.llava->vision.num_hidden_layers;
  j["num_params"] = res.num_params;
  j["total_size"] = res.total_size;
  return j.dump(2) + "\n";
}

}  // namespace

WriteResult write_checkpoint(const SynthSpec& spec, const fs::path& out_dir, const WriteOptions& opt) {
  const auto t0 = Clock::now();
  const std::vector<TensorPlan> plan = tensor_plan(spec);  // validates
  const nlohmann::ordered_json config = config_json(spec);
  const TokenizerFiles tok = opt.tokenizers_dir.empty() ? TokenizerFiles{} : tokenizer_files(spec);
  const std::vector<Shard> shards = plan_shards(plan, spec.dtype, opt.max_shard_bytes);
  WriteResult res;
  res.num_tensors = plan.size();
  res.num_shards = shards.size();
  for (const auto& t : plan) res.num_params += static_cast<std::int64_t>(t.numel());
  for (const auto& s : shards) res.total_size += s.data_bytes;

  core::StagedDirectory dir(out_dir, opt.overwrite);
  const fs::path& tmp = dir.path();
  const fs::path out = dir.target();
  write_text(tmp / "config.json", config.dump(2) + "\n");
  const fs::path src = opt.tokenizers_dir / spec.tokenizer;
  for (const char* f : tok.copied) write_text(tmp / f, core::read_file(src / f));
  for (const auto& [f, text] : tok.written) write_text(tmp / f, text);
  if (spec.llava) {
    write_text(tmp / "preprocessor_config.json", spec.llava->preprocessor_config);
    write_text(tmp / "generation_config.json", kLlavaGenerationConfig);
  }
  write_shards(spec, plan, shards, tmp, opt, t0, res);
  if (shards.size() > 1) write_text(tmp / "model.safetensors.index.json", index_json(plan, shards, res.total_size));
  write_text(tmp / "synth.json", provenance_json(spec, opt, res));
  dir.commit();
  res.seconds = seconds_since(t0);
  log_info("wrote {}: {} ({} tensors, {:.3f} B parameters, {} shard{}, {:.2f} GB in {:.1f} s, {:.0f} MB/s)",
           out.string(), spec.name, res.num_tensors, static_cast<double>(res.num_params) * 1e-9, res.num_shards,
           res.num_shards == 1 ? "" : "s", static_cast<double>(res.file_bytes) * 1e-9, res.seconds,
           static_cast<double>(res.file_bytes) * 1e-6 / std::max(res.seconds, 1e-9));
  return res;
}

}  // namespace latentllm::synth
