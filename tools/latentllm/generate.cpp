// `latentllm generate`: text from a (dense or latent) checkpoint, streamed to stdout as it is
// produced; prefill and decode speeds and the KV-cache size on stderr (or in the --json document). On a
// LLaVA checkpoint the prompt is a user message in LLaVA-1.5's conversation (vicuna_v1), after the image
// of --image if given; --raw-prompt passes the text as is (its "<image>" placeholders expanded).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/generate.hpp"
#include "latentllm/image.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/threads.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::cli {
namespace {

// Decoding streams every weight once per token: stored 16-bit weights are copied into huge pages at
// load (model::LoadOptions::huge_pages) unless --map-weights.
model::LoadOptions decode_load(const RunArgs& run, bool map_weights) {
  model::LoadOptions lo = run.load();
  lo.huge_pages = !map_weights;
  return lo;
}

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string image;        // --image: a PNG or JPEG for a LLaVA checkpoint
  bool raw_prompt = false;  // --raw-prompt: no conversation template around the prompt
  std::string kv_cache = "auto";
  eval::GenerateOptions opt;
  RunArgs run;
  std::string seed = "0";
  std::string max_memory;  // empty: physical memory − 2 GiB
  bool json = false;
  bool map_weights = false;  // --map-weights: 16-bit weights read in place (LoadOptions::huge_pages off)
};

// "LlamaForCausalLM", or "LlavaForConditionalGeneration, language model LlamaForCausalLM".
std::string architecture_of(const model::Model& m) {
  const auto& c = m.config();
  if (c.multimodal_architecture.empty()) return c.architecture;
  return fmt::format("{}, language model {}", c.multimodal_architecture, c.architecture);
}

// Generates from the prompt's ids (through `prefill` when set: eval::generate) and prints the text and the
// speeds, or the --json document.
int run_text(const GenerateArgs& a, const eval::GenerateOptions& opt, const model::Model& m, const io::Tokenizer& tok,
             const std::vector<std::int32_t>& prompt, const eval::PrefillFn& prefill) {
  if (!quiet()) std::fprintf(stderr, "generate: %s (%s), prompt %zu tokens, up to %d new, %s\n", a.model.c_str(),
               architecture_of(m).c_str(), prompt.size(), a.opt.max_new_tokens,
               a.opt.sampling.temperature == 0 ? "greedy"
                                               : fmt::format("temperature {}, top-k {}, top-p {}, seed {}",
                                                             a.opt.sampling.temperature, a.opt.sampling.top_k,
                                                             a.opt.sampling.top_p, opt.sampling.seed).c_str());
  std::fflush(stderr);
  const eval::TextFn stream = [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  const eval::GenerateResult r = eval::generate(m, tok, prompt, opt, a.json ? eval::TextFn{} : stream, prefill);
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
                              {"image", a.image},
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

// On a LLaVA checkpoint: the prompt in the conversation template (the image placeholder first with
// --image), its image tokens expanded, the image preprocessed by the checkpoint's processor, and a
// prefill that puts the image features in place of the image tokens.
int run_llava(const GenerateArgs& a, const eval::GenerateOptions& opt) {
  const int n_img = a.image.empty() ? 0 : 1;
  const std::string text = a.raw_prompt ? a.prompt
                                        : model::vicuna_v1_prompt((n_img ? "<image>\n" : "") + a.prompt);
  std::int64_t placeholders = 0;
  for (auto i = text.find(model::kImageToken); i != std::string::npos; i = text.find(model::kImageToken, i + 1))
    ++placeholders;
  if (a.raw_prompt && placeholders != n_img) {
    throw ConfigError(fmt::format("--prompt: <image> placeholders (expected {}, one per --image, got {})", n_img,
                                  placeholders));
  }
  if (!a.raw_prompt && placeholders != n_img) {
    throw ConfigError(fmt::format("--prompt: <image> placeholders (expected none: the template puts the image of "
                                  "--image first; --raw-prompt places it, got {})", placeholders - n_img));
  }
  // LLaVA-1.5: one tile by CLIPImageProcessor; NeXT: LlavaNextImageProcessor's tiles and the image's size,
  // which set its image token count.
  std::vector<float> pixels;  // [n_tiles, 3, S, S]
  std::vector<model::ImageInput> images;
  image::RgbImage img;
  if (n_img) img = image::load_image(a.image);
  {
    // The memory plan before the weights are widened: the prompt's text tokens, its image's tokens (NeXT:
    // by the image's size) and the reply.
    const auto cfg = model::parse_llava_config(nlohmann::json::parse(core::read_file(std::filesystem::path(a.model) /
                                                                                       "config.json")),
                                               a.model + "/config.json");
    const std::int64_t image_tokens = !n_img ? 0
                                      : cfg.anyres() ? model::llava_next_num_image_tokens(img.height, img.width, cfg)
                                                     : cfg.features_per_image();
    const std::int64_t text_tokens = static_cast<std::int64_t>(io::load_tokenizer(a.model)->encode(text).size()) + 1;
    check_inference_memory("generate", a.model, a.max_memory, text_tokens + image_tokens + a.opt.max_new_tokens, a.run);
  }
  const model::LlavaModel lm = model::LlavaModel::load(a.model, decode_load(a.run, a.map_weights));
  std::int64_t n_tokens = lm.config().features_per_image();
  if (n_img) {
    const auto processor = image::load_processor_config(std::filesystem::path(a.model) / "preprocessor_config.json");
    if (lm.config().anyres()) {
      image::AnyresPixels any = image::preprocess_anyres(img, processor);
      pixels = std::move(any.data);
      images.push_back({pixels, any.num_tiles(), any.image_height, any.image_width});
    } else {
      pixels = image::preprocess(img, processor).data;
      images.push_back({pixels, 1, 0, 0});
    }
    n_tokens = lm.image_tokens(images.front());
  }
  const auto tok = io::load_tokenizer(a.model);
  const std::vector<std::int32_t> prompt =
      eval::prompt_ids(lm.language_model(), *tok, model::expand_image_tokens(text, n_tokens));
  const eval::PrefillFn prefill = [&](model::KvCache& cache, MatrixF& logits) {
    lm.prefill(prompt, images, cache, logits);
  };
  return run_text(a, opt, lm.language_model(), *tok, prompt, prefill);
}

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
  const std::filesystem::path config = std::filesystem::path(a.model) / "config.json";
  const bool llava = !model::load_config(config).multimodal_architecture.empty();
  if (!a.image.empty() && !llava) {
    throw ConfigError(fmt::format("--image: {} is not a LLaVA checkpoint (expected config.json architectures "
                                  "LlavaForConditionalGeneration, got a text-only model)", a.model));
  }
  if (llava) return run_llava(a, opt);
  const auto tok = io::load_tokenizer(a.model);
  check_inference_memory("generate", a.model, a.max_memory,
                         static_cast<std::int64_t>(tok->encode(a.prompt).size()) + 1 + a.opt.max_new_tokens, a.run);
  const std::unique_ptr<model::Model> m = model::Model::load(a.model, decode_load(a.run, a.map_weights));
  const std::vector<std::int32_t> prompt = eval::prompt_ids(*m, *tok, a.prompt);
  return run_text(a, opt, *m, *tok, prompt, {});
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* sub = app.add_subcommand("generate", "Generate text from a (dense or latent) checkpoint with a KV cache; "
                                             "stdout carries only the continuation, streamed");
  sub->add_option("--model", args->model, "Model directory (Hugging Face or latent checkpoint)")
      ->required()
      ->group("Input");
  sub->add_option("--prompt", args->prompt,
                  "Text to continue; empty = start from BOS alone (LLaVA: the user's message, see --raw-prompt)")
      ->capture_default_str()
      ->group("Input");
  sub->add_option("--image", args->image,
                  "Image (PNG or JPEG) for a LLaVA checkpoint: preprocessed by its preprocessor_config.json, its "
                  "features in place of the prompt's <image>")
      ->group("Input");
  sub->add_flag("--raw-prompt", args->raw_prompt,
                "LLaVA: pass --prompt as is, with a literal <image> where the image goes (default: the prompt "
                "is the user's message in LLaVA-1.5's vicuna_v1 conversation, after <image>\\n with --image)")
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
  sub->add_option("--max-memory", args->max_memory,
                  "Memory budget (e.g. 20G; default: physical memory - 2 GiB): the weights take their size as held "
                  "(--weights), so a model whose plan (printed at start) does not fit is refused before it is read")
      ->group("Run");
  add_run_options(sub, args->run);
  add_weights_option(sub, args->run);
  sub->add_flag("--map-weights", args->map_weights,
                "With --weights stored: decode from the memory-mapped checkpoint in place instead of a copy in "
                "huge pages made at load (loads faster and shares the page cache between runs; decodes slower)")
      ->group("Performance");
  sub->add_flag("--json", args->json,
                "Print one JSON object (text, tokens, prompt_tokens_per_s, decode_tokens_per_s, "
                "kv_cache_bytes_per_token, kv_cache_bytes) instead of streaming the text")
      ->group("Output");
  // One prompt is one sequential decode: rank 0 generates, the other ranks wait.
  return {sub, [args] { return run_generate(*args); }, Ranks::Root};
}

}  // namespace latentllm::cli
