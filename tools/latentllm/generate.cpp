// `latentllm generate`: text from a (dense or latent) checkpoint, streamed to stdout as it is
// produced; prefill and decode speeds and the KV-cache size on stderr (or in the --json document).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "latentllm/error.hpp"
#include "latentllm/generate.hpp"
#include "latentllm/model.hpp"
#include "latentllm/threads.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string kv_cache = "auto";
  eval::GenerateOptions opt;
  RunArgs run;
  std::string seed = "0";
  bool json = false;
};

int run_generate(const GenerateArgs& a) {
  // Every option is checked before the model is read.
  eval::check_sampling_options(a.opt.sampling);
  if (a.opt.max_new_tokens < 0) {
    throw ConfigError(fmt::format("--max-new-tokens (expected >= 0, got {})", a.opt.max_new_tokens));
  }
  eval::GenerateOptions opt = a.opt;
  opt.sampling.seed = parse_seed(a.seed);
  opt.kv_cache = model::parse_kv_cache_mode(a.kv_cache);
  apply_run_options(a.run);
  const std::unique_ptr<model::Model> m = model::Model::load(a.model, a.run.load());
  const auto tok = io::load_tokenizer(a.model);
  const std::vector<std::int32_t> prompt = eval::prompt_ids(*m, *tok, a.prompt);
  if (!quiet()) std::fprintf(stderr, "generate: %s (%s), prompt %zu tokens, up to %d new, %s\n", a.model.c_str(),
               m->config().architecture.c_str(), prompt.size(), a.opt.max_new_tokens,
               a.opt.sampling.temperature == 0 ? "greedy"
                                               : fmt::format("temperature {}, top-k {}, top-p {}, seed {}",
                                                             a.opt.sampling.temperature, a.opt.sampling.top_k,
                                                             a.opt.sampling.top_p, opt.sampling.seed).c_str());
  std::fflush(stderr);
  const eval::TextFn stream = [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  const eval::GenerateResult r = eval::generate(*m, *tok, prompt, opt, a.json ? eval::TextFn{} : stream);
  if (!a.json) {  // the streamed text ends its line, so that a shell prompt or the next output starts on its own
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!quiet()) std::fprintf(stderr, "%sgenerate: prefill %zu tokens in %.3f s (%.1f tokens/s); decode %d tokens in %.3f s "
               "(%.1f tokens/s)%s; KV cache %lld bytes/token, %lld bytes at %d positions\n",
               "", r.prompt_ids.size(), r.prefill_seconds, r.prompt_tokens_per_s, r.decode_steps,
               r.decode_seconds, r.decode_tokens_per_s, r.stopped_at_eos ? "; stopped at EOS" : "",
               static_cast<long long>(r.kv_cache_bytes_per_token), static_cast<long long>(r.kv_cache_bytes),
               r.kv_cache_length);
  if (!quiet()) {
    std::fprintf(stderr, "generate: KV cache %s:\n", std::string(model::kv_cache_mode_name(opt.kv_cache)).c_str());
    for (const std::string& line : r.kv_cache_layers) std::fprintf(stderr, "  %s\n", line.c_str());
  }
  if (a.json) {
    const nlohmann::json j = {{"model", a.model},
                              {"prompt", a.prompt},
                              {"prompt_tokens", r.prompt_ids},
                              {"text", r.text},
                              {"tokens", r.tokens},
                              {"stopped_at_eos", r.stopped_at_eos},
                              {"prompt_tokens_per_s", r.prompt_tokens_per_s},
                              {"decode_tokens_per_s", r.decode_tokens_per_s},
                              {"prefill_seconds", r.prefill_seconds},
                              {"decode_seconds", r.decode_seconds},
                              {"decode_steps", r.decode_steps},
                              {"kv_cache_bytes_per_token", r.kv_cache_bytes_per_token},
                              {"kv_cache_bytes", r.kv_cache_bytes},
                              {"kv_cache_positions", r.kv_cache_length},
                              {"kv_cache", std::string(model::kv_cache_mode_name(opt.kv_cache))},
                              {"kv_cache_layers", r.kv_cache_layers}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* sub = app.add_subcommand("generate", "Generate text from a (dense or latent) checkpoint with a KV cache; "
                                             "stdout carries only the continuation, streamed");
  sub->add_option("--model", args->model, "Model directory (Hugging Face or latent checkpoint)")
      ->required()
      ->group("Input");
  sub->add_option("--prompt", args->prompt, "Text to continue; empty = start from BOS alone")
      ->capture_default_str()
      ->group("Input");
  sub->add_option("--max-new-tokens", args->opt.max_new_tokens,
                  "Stop after N new tokens (or at EOS); prompt + N must fit max_position_embeddings")
      ->capture_default_str()
      ->group("Sampling");
  sub->add_option("--temperature", args->opt.sampling.temperature, "Softmax temperature; 0 = greedy (argmax)")
      ->capture_default_str()
      ->group("Sampling");
  sub->add_option("--top-k", args->opt.sampling.top_k, "Sample among the K most likely tokens; 0 = all")
      ->capture_default_str()
      ->group("Sampling");
  sub->add_option("--top-p", args->opt.sampling.top_p,
                  "Sample among the most likely tokens whose probability reaches P, in (0, 1]; 1 = all")
      ->capture_default_str()
      ->group("Sampling");
  sub->add_option("--seed", args->seed,
                  "Seed of the sampler (std::mt19937_64, 53-bit uniform draws): the same seed gives the same text")
      ->capture_default_str()
      ->group("Sampling");
  sub->add_option("--kv-cache", args->kv_cache,
                  "KV cache of factored k_proj / v_proj: dense (keys and values), latent (c = A·x per position; "
                  "keys with RoPE decompressed every step) or auto (latent where smaller and not slower)")
      ->capture_default_str()
      ->group("Performance");
  add_run_options(sub, args->run);
  sub->add_flag("--json", args->json,
                "Print one JSON object (text, tokens, prompt_tokens_per_s, decode_tokens_per_s, "
                "kv_cache_bytes_per_token, kv_cache_bytes) instead of streaming the text")
      ->group("Output");
  return {sub, [args] { return run_generate(*args); }};
}

}  // namespace latentllm::cli
