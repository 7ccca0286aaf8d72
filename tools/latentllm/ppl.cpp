// `latentllm ppl`: perplexity of a (dense or latent) checkpoint by the GPTQ / SparseGPT protocol.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "latentllm/threads.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/dist.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/model.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::cli {
namespace {

struct PplArgs {
  std::string model;
  std::string dataset = "wikitext2";
  std::string data;
  int seqlen = 0;
  int max_windows = 0;
  int batch = 0;
  RunArgs run;
  std::string max_memory;  // empty: core::default_budget()
  bool layer_major = false;
  bool json = false;
};

using Clock = std::chrono::steady_clock;

double peak_rss_mib() { return static_cast<double>(core::peak_rss_bytes()) / 1048576.0; }

// Progress on stderr: one rewritten line on a terminal, a line every 10 s otherwise.
class ProgressLine {
 public:
  ProgressLine() : tty_(::isatty(2) != 0) {}
  void operator()(const eval::PplProgress& p) {
    const bool last = p.windows_done == p.windows_total;
    if (quiet()) return;
    if (!tty_ && !last && p.seconds - last_print_ < 10.0) return;
    last_print_ = p.seconds;
    const std::string step = p.layers_total > 0 && p.layers_done < p.layers_total
                                 ? fmt::format("layers {}/{}", p.layers_done, p.layers_total)
                                 : fmt::format("windows {}/{}", p.windows_done, p.windows_total);
    std::fprintf(stderr, "%sppl: %s, %.0f tok/s, elapsed %.1f s, ETA %.1f s%s", tty_ ? "\r" : "", step.c_str(),
                 p.tokens_per_s, p.seconds, p.eta_s, tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  double last_print_ = -1e9;
};

// Prints how the budget would be spent in each order (stderr) and picks the order: eager when it fits
// (and --layer-major is not set), else layer-major; throws ConfigError, before any work, when neither fits.
bool choose_layer_major(const PplArgs& a, const model::Model& lazy_model, std::int64_t n_ids, std::int64_t windows,
                        int seqlen, std::int64_t budget) {
  const auto plan = eval::plan_perplexity_memory(lazy_model, n_ids, windows, seqlen, a.batch, core::num_threads(), budget);
  const std::string source = a.max_memory.empty() ? core::default_budget().source + "; --max-memory" : "--max-memory";
  print_memory_plan("ppl", plan.eager, source);
  print_memory_plan("ppl", plan.layer_major, source);
  const bool layer_major = a.layer_major || !plan.eager.fits();
  if (!layer_major || plan.layer_major.fits()) {
    if (!quiet()) std::fprintf(stderr, "ppl: evaluating %s\n", layer_major ? "layer-major: one layer in memory at a time"
                                                              : "window-major: the model widened at load");
    return layer_major;
  }
  const std::int64_t k = eval::max_layer_major_windows(lazy_model, n_ids, windows, seqlen, a.batch,
                                                       core::num_threads(), budget);
  const std::string advice =
      k > 0 ? fmt::format("use --max-windows {} (at most {} of the {} windows fit) or --max-memory {}", k, k, windows,
                          core::gib_option(plan.layer_major.total()))
            : fmt::format("use --max-memory {}", core::gib_option(plan.layer_major.total()));
  throw ConfigError(fmt::format("--max-memory: budget too small for layer-major evaluation of {} windows (expected at "
                                "least {}: {}; got {}); {}", windows, core::format_bytes(plan.layer_major.total()),
                                plan.layer_major.summary(), core::format_bytes(budget), advice));
}

int run_ppl(const PplArgs& a) {
  apply_run_options(a.run);
  const io::Dataset dataset = io::parse_dataset(a.dataset);
  if (a.seqlen < 0 || a.seqlen == 1) {
    throw ConfigError(fmt::format("--seqlen (expected 0 for the model's default or >= 2, got {})", a.seqlen));
  }
  if (a.max_windows < 0) throw ConfigError(fmt::format("--max-windows (expected >= 0, got {})", a.max_windows));
  const std::int64_t budget = a.max_memory.empty() ? core::default_memory_budget() : core::parse_bytes(a.max_memory, "--max-memory");

  // A lazy load maps the checkpoint and checks its tensors without widening any: the plan needs the
  // weights' sizes, the tokenization the number of windows, before the model takes its memory.
  std::unique_ptr<model::Model> m = model::Model::load(a.model, a.run.load(/*lazy=*/true));
  const auto tok = model_tokenizer(a.model, m->config());
  const int seqlen = a.seqlen > 0 ? a.seqlen : eval::default_seqlen(m->config());
  check_seqlen(seqlen, m->config(), "--seqlen");
  const auto t0 = Clock::now();
  const auto ids = eval::eval_ids(*tok, dataset, a.data, seqlen);
  const double tokenize_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto n_ids = static_cast<std::int64_t>(ids.size());
  const bool layer_major =
      choose_layer_major(a, *m, n_ids, eval::eval_windows(n_ids, seqlen, a.max_windows), seqlen, budget);
  if (!layer_major) {
    m.reset();
    m = model::Model::load(a.model, a.run.load());
  }

  // c4-heldout: was this text left out of the checkpoint's calibration (warns if not)?
  nlohmann::json calibration;
  if (dataset == io::Dataset::C4Heldout) {
    const nlohmann::json cfg = nlohmann::json::parse(core::read_file(std::filesystem::path(a.model) / "config.json"));
    if (cfg.contains("latent") && cfg["latent"].is_object()) calibration = cfg["latent"].value("calibration", nlohmann::json());
  }
  const bool is_held_out = held_out(dataset, a.data, calibration.is_null() ? nullptr : &calibration);

  ProgressLine progress;
  auto r = eval::perplexity_ids(*m, ids, seqlen, a.max_windows, a.batch, a.data, std::ref(progress));
  r.tokenize_seconds = tokenize_s;
  if (!dist::is_root()) return 0;  // rank 0 prints the result (every rank has it)
  const double peak_mib = peak_rss_mib();
  const char* order = layer_major ? "layer-major" : "window-major";

  if (a.json) {
    const nlohmann::json j = {{"model", a.model},         {"dataset", io::dataset_name(dataset)},
                              {"data", a.data},           {"seqlen", r.seqlen},
                              {"token_count", r.tokens},  {"window_count", r.windows},
                              {"predicted_token_count", r.predicted}, {"ppl", r.ppl},
                              {"mean_nll", r.mean_nll},   {"forward_seconds", r.seconds},
                              {"tokens_per_s", r.tokens_per_s}, {"tokenize_seconds", r.tokenize_seconds},
                              {"peak_rss_bytes", core::peak_rss_bytes()},
                              {"order", order},           {"memory_budget_bytes", budget},
                              {"processes", dist::size()},    {"weights", a.run.weights}};
    nlohmann::json out = j;
    if (dataset == io::Dataset::C4Heldout) out["held_out"] = is_held_out;
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("model        %s (%s)\n", a.model.c_str(), m->config().architecture.c_str());
  std::printf("dataset      %s  %s\n", std::string(io::dataset_name(dataset)).c_str(), a.data.c_str());
  std::printf("seqlen       %d\n", r.seqlen);
  std::printf("tokens       %lld\n", static_cast<long long>(r.tokens));
  std::printf("windows      %lld (%lld predicted tokens)\n", static_cast<long long>(r.windows),
              static_cast<long long>(r.predicted));
  std::printf("ppl          %.4f\n", r.ppl);
  std::printf("mean NLL     %.6f nats/token\n", r.mean_nll);
  std::printf("speed        %.0f tokens/s (%.2f s forward, %.2f s tokenize)\n", r.tokens_per_s, r.seconds,
              r.tokenize_seconds);
  std::printf("order        %s\n", order);
  if (dist::size() > 1) std::printf("ranks        %d processes\n", dist::size());
  std::printf("peak memory  %.0f MiB\n", peak_mib);
  return 0;
}

}  // namespace

Command add_ppl(CLI::App& app) {
  auto args = std::make_shared<PplArgs>();
  auto* sub = app.add_subcommand("ppl", "Perplexity by the GPTQ/SparseGPT protocol (non-overlapping windows)");
  sub->add_option("--model", args->model, "Model directory (Hugging Face or latent checkpoint)")
      ->required()
      ->group("Input");
  sub->add_option("--dataset", args->dataset,
                  "wikitext2: \"\\n\\n\".join of wiki.test.raw rows; ptb: \" \".join of stripped lines; "
                  "c4: \" \".join of the first 1100 JSON-lines texts, truncated to 256*seqlen tokens; "
                  "text: the file as is; tinystories-valid / tinystories-test: stories 1-116 / 117-232 of "
                  "TinyStories-valid.stories0001-0232.clean.txt (the halves of any file of blank-line-separated stories); "
                  "c4-heldout: \" \".join of the last 100 JSON-lines texts, truncated as c4 (held out of a calibration "
                  "on the same file with compress --calib-holdout 100; a warning says when it was not)")
      ->check(CLI::IsMember({"wikitext2", "ptb", "c4", "text", "tinystories-valid", "tinystories-test", "c4-heldout"}))
      ->capture_default_str()
      ->group("Input");
  sub->add_option("--data", args->data, "The dataset file (wiki.test.raw, ptb.valid.txt, a .jsonl, any text)")
      ->required()
      ->group("Input");
  sub->add_option("--seqlen", args->seqlen, "Tokens per window; 0 = min(2048, max_position_embeddings)")
      ->capture_default_str()
      ->group("Protocol");
  sub->add_option("--max-windows", args->max_windows, "Evaluate only the first K windows; 0 = all")
      ->capture_default_str()
      ->group("Protocol");
  sub->add_option("--batch", args->batch, "Windows per forward pass; 0 = about 4096 tokens")
      ->capture_default_str()
      ->group("Performance");
  add_run_options(sub, args->run);
  add_weights_option(sub, args->run);
  sub->add_option("--max-memory", args->max_memory,
                  "Memory budget in bytes or with a unit (20G, 512M; binary units). Default: physical memory "
                  "minus 2 GiB. The model is widened at load when that fits, else evaluated layer by layer; a "
                  "budget that neither fits is refused before any work")
      ->group("Performance");
  sub->add_flag("--layer-major", args->layer_major,
                "Evaluate layer by layer (one layer in memory) even when the whole model fits")
      ->group("Performance");
  sub->add_flag("--json", args->json, "Print the result as one JSON object")->group("Output");
  return {sub, [args] { return run_ppl(*args); }};
}

}  // namespace latentllm::cli
