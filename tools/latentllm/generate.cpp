// `latentllm generate`: text from a (dense or latent) checkpoint, streamed to stdout as it is
// produced; prefill and decode speeds and the KV-cache size on stderr (or in the --json document). With
// --chat the prompt is the user's message in the checkpoint's chat template, with --conv-mode in one of
// LLaVA's conversation modes (include/latentllm/chat.hpp). On a LLaVA checkpoint the prompt is a user
// message, after the images of --image if given (one placeholder each, in order), in the checkpoint's chat
// template when it ships one, else in LLaVA-1.5's conversation (vicuna_v1); --raw-prompt passes the text
// as is (its "<image>" placeholders expanded).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "llava_input.hpp"
#include "options.hpp"
#include "latentllm/chat.hpp"
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
  std::vector<std::string> images;  // --image (repeatable): PNG or JPEG files for a LLaVA checkpoint
  bool raw_prompt = false;  // --raw-prompt: no conversation template around the prompt
  bool chat = false;        // --chat: the checkpoint's chat template
  std::string conv_mode;    // --conv-mode: one of LLaVA's conversation modes
  std::string system;       // --system: a system message before the user's
  std::string kv_cache = "auto";
  eval::GenerateOptions opt;
  RunArgs run;
  std::string seed = "0";
  std::string max_memory;  // empty: core::default_budget()
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
             const std::string& prompt_text, const std::vector<std::int32_t>& prompt, const eval::PrefillFn& prefill) {
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
                              {"prompt_text", prompt_text},
                              {"images", a.images},
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

// The prompt text and whether it already holds BOS (a chat template that writes bos_token: then the
// tokenizer adds no second one).
struct PromptText {
  std::string text;
  bool has_bos = false;
};

// The prompt: --prompt as is (--raw-prompt, or a text model without --chat / --conv-mode), in the mode of
// --conv-mode, or in the checkpoint's chat template (--chat; a LLaVA checkpoint's default when it ships
// one, else LLaVA-1.5's vicuna_v1). A LLaVA message holds the images first: typed parts for a template
// ({"type": "image"}, as llava-hf's processors take them), "<image>\n" each for a conversation mode.
PromptText build_prompt(const GenerateArgs& a, bool llava) {
  if (a.raw_prompt && (a.chat || !a.conv_mode.empty() || !a.system.empty())) {
    throw ConfigError("--raw-prompt: the prompt as is (expected no --chat, --conv-mode or --system with it)");
  }
  if (a.chat && !a.conv_mode.empty()) {
    throw ConfigError("--chat: the checkpoint's template (expected either --chat or --conv-mode, got both)");
  }
  if (a.raw_prompt || (!llava && !a.chat && a.conv_mode.empty())) {
    if (!a.system.empty()) throw ConfigError("--system: a system message (expected --chat or --conv-mode with it)");
    return {a.prompt, false};
  }
  io::Messages messages = io::Messages::array();
  if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  std::optional<io::ChatTemplate> tmpl;
  if (a.conv_mode.empty()) tmpl = io::ChatTemplate::load(a.model);
  if (!tmpl) {
    if (a.chat) {
      throw ConfigError(fmt::format("--chat: {} has no chat template (expected chat_template.jinja, chat_template.json "
                                    "or tokenizer_config.json's chat_template; --conv-mode names a conversation mode)",
                                    a.model));
    }
    std::string placeholders;
    for (std::size_t i = 0; i < a.images.size(); ++i) placeholders += std::string(model::kImageToken) + "\n";
    messages.push_back({{"role", "user"}, {"content", placeholders + a.prompt}});
    return {io::conv_prompt(a.conv_mode.empty() ? "vicuna_v1" : a.conv_mode, messages), false};
  }
  if (llava) {
    io::Messages parts = io::Messages::array();
    for (std::size_t i = 0; i < a.images.size(); ++i) parts.push_back({{"type", "image"}});
    parts.push_back({{"type", "text"}, {"text", a.prompt}});
    messages.push_back({{"role", "user"}, {"content", parts}});
  } else {
    messages.push_back({{"role", "user"}, {"content", a.prompt}});
  }
  const std::string text = tmpl->render(messages, true);
  return {text, io::prompt_has_bos(text, tmpl->bos_token())};
}

// The prompt's ids: the tokenizer's default call, without a second BOS when the text holds it.
std::vector<std::int32_t> prompt_tokens(const model::Model& m, const io::Tokenizer& tok, const PromptText& p,
                                        const std::string& text) {
  return p.has_bos ? tok.encode(text, false) : eval::prompt_ids(m, tok, text);
}

// The prompt of a LLaVA checkpoint before expansion (build_prompt); ConfigError unless it has one
// placeholder per image.
PromptText llava_prompt(const GenerateArgs& a) {
  const auto n_img = static_cast<std::int64_t>(a.images.size());
  PromptText p = build_prompt(a, true);
  const std::string& text = p.text;
  const std::int64_t found = count_image_placeholders(text);
  if (a.raw_prompt && found != n_img) {
    throw ConfigError(fmt::format("--prompt: <image> placeholders (expected {}, one per --image, got {})", n_img,
                                  found));
  }
  if (!a.raw_prompt && found != n_img) {
    throw ConfigError(fmt::format("--prompt: <image> placeholders (expected none: the template puts the image of "
                                  "--image first; --raw-prompt places it, got {})", found - n_img));
  }
  return p;
}

// On a LLaVA checkpoint: the prompt in the conversation template (the image placeholders first with
// --image), each image's tokens expanded, the images preprocessed by the checkpoint's processor, and a
// prefill that puts their features in place of their image tokens, in order.
int run_llava(const GenerateArgs& a, const eval::GenerateOptions& opt) {
  const PromptText built = llava_prompt(a);
  const std::string& text = built.text;
  std::vector<image::RgbImage> imgs;
  for (const auto& file : a.images) imgs.push_back(image::load_image(file));
  {
    // The memory plan before the weights are widened: the prompt's text tokens, its images' tokens (NeXT:
    // by each image's size) and the reply.
    const auto cfg = model::parse_llava_config(nlohmann::json::parse(core::read_file(std::filesystem::path(a.model) /
                                                                                       "config.json")),
                                               a.model + "/config.json");
    std::int64_t image_tokens = 0;
    for (const auto& img : imgs)
      image_tokens += cfg.anyres() ? model::llava_next_num_image_tokens(img.height, img.width, cfg)
                                   : cfg.features_per_image();
    const std::int64_t text_tokens = static_cast<std::int64_t>(model_tokenizer(a.model, cfg.text)->encode(text).size()) + 1;
    check_inference_memory("generate", a.model, a.max_memory, text_tokens + image_tokens + a.opt.max_new_tokens, a.run);
  }
  const model::LlavaModel lm = model::LlavaModel::load(a.model, decode_load(a.run, a.map_weights));
  LlavaImages images;
  if (!imgs.empty()) images = preprocess_llava_images(lm, image::load_checkpoint_processor(a.model), imgs);
  const auto tok = model_tokenizer(a.model, lm.config().text);
  const std::vector<std::int32_t> prompt = prompt_tokens(lm.language_model(), *tok, built, expand_images(text, images.counts));
  const eval::PrefillFn prefill = [&](model::KvCache& cache, MatrixF& logits) {
    lm.prefill(prompt, images.inputs, cache, logits);
  };
  return run_text(a, opt, lm.language_model(), *tok, text, prompt, prefill);
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
  const model::ModelConfig model_config = model::load_config(config);
  const bool llava = !model_config.multimodal_architecture.empty();
  if (!a.images.empty() && !llava) {
    throw ConfigError(fmt::format("--image: {} is not a LLaVA checkpoint (expected config.json architectures "
                                  "LlavaForConditionalGeneration, got a text-only model)", a.model));
  }
  if (llava) return run_llava(a, opt);
  const PromptText built = build_prompt(a, false);
  const auto tok = model_tokenizer(a.model, model_config);
  check_inference_memory("generate", a.model, a.max_memory,
                         static_cast<std::int64_t>(tok->encode(built.text).size()) + 1 + a.opt.max_new_tokens, a.run);
  const std::unique_ptr<model::Model> m = model::Model::load(a.model, decode_load(a.run, a.map_weights));
  const std::vector<std::int32_t> prompt = prompt_tokens(*m, *tok, built, built.text);
  return run_text(a, opt, *m, *tok, built.text, prompt, {});
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
  sub->add_option("--image", args->images,
                  "Image (PNG or JPEG) for a LLaVA checkpoint: preprocessed by its preprocessor_config.json, its "
                  "features in place of the prompt's <image>; repeat it for several images, one <image> each, in "
                  "order")
      ->group("Input");
  sub->add_flag("--raw-prompt", args->raw_prompt,
                "LLaVA: pass --prompt as is, with a literal <image> where the image goes (default: the prompt "
                "is the user's message, after the images of --image, in the checkpoint's chat template, else in "
                "LLaVA-1.5's vicuna_v1 conversation with one <image>\\n per --image)")
      ->group("Input");
  sub->add_flag("--chat", args->chat,
                "The prompt is the user's message in the checkpoint's chat template (chat_template.jinja, "
                "chat_template.json or tokenizer_config.json), rendered as transformers' apply_chat_template with "
                "add_generation_prompt (a LLaVA checkpoint's default when it ships a template)")
      ->group("Input");
  sub->add_option("--conv-mode", args->conv_mode,
                  "The prompt is the user's message in one of LLaVA's conversation modes (llava/conversation.py): "
                  "vicuna_v1, v1, llava_v1, llama_2, llava_llama_2, mistral_instruct, chatml_direct, mistral_direct, "
                  "mpt, plain (a LLaVA checkpoint without a chat template: vicuna_v1)")
      ->group("Input");
  sub->add_option("--system", args->system, "A system message before the user's (with --chat or --conv-mode)")
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
                  "Memory budget (e.g. 20G; default: physical memory - 2 GiB, or less when less is available now or a cgroup limits it): the weights take their size as held "
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
