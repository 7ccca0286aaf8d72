// `latentllm ppl`: perplexity of a (dense or latent) checkpoint by the GPTQ / SparseGPT protocol.
#include <unistd.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "latentllm/threads.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/error.hpp"
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
  int threads = 0;
  bool json = false;
};

double peak_rss_mib() { return static_cast<double>(core::peak_rss_bytes()) / 1048576.0; }

// Progress on stderr: one rewritten line on a terminal, a line every 10 s otherwise.
class ProgressLine {
 public:
  ProgressLine() : tty_(::isatty(2) != 0) {}
  void operator()(const eval::PplProgress& p) {
    const bool last = p.windows_done == p.windows_total;
    if (!tty_ && !last && p.seconds - last_print_ < 10.0) return;
    last_print_ = p.seconds;
    std::fprintf(stderr, "%sppl: windows %lld/%lld, %.0f tok/s, elapsed %.1f s, ETA %.1f s%s", tty_ ? "\r" : "",
                 static_cast<long long>(p.windows_done), static_cast<long long>(p.windows_total), p.tokens_per_s,
                 p.seconds, p.eta_s, tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  double last_print_ = -1e9;
};

int run_ppl(const PplArgs& a) {
  if (a.threads < 0) throw ConfigError(fmt::format("--threads (expected >= 0, got {})", a.threads));
  core::set_num_threads(a.threads);
  eval::PplOptions opt;
  opt.dataset = io::parse_dataset(a.dataset);
  opt.data = a.data;
  opt.seqlen = a.seqlen;
  opt.max_windows = a.max_windows;
  opt.batch = a.batch;
  if (a.seqlen < 0) throw ConfigError(fmt::format("--seqlen (expected >= 2, got {})", a.seqlen));

  const auto m = model::Model::load(a.model);
  const auto tok = io::load_tokenizer(a.model);
  ProgressLine progress;
  const auto r = eval::perplexity(*m, *tok, opt, std::ref(progress));
  const double peak_mib = peak_rss_mib();

  if (a.json) {
    const nlohmann::json j = {{"model", a.model},         {"dataset", io::dataset_name(opt.dataset)},
                              {"data", a.data},           {"seqlen", r.seqlen},
                              {"tokens", r.tokens},       {"windows", r.windows},
                              {"predicted_tokens", r.predicted}, {"ppl", r.ppl},
                              {"mean_nll", r.mean_nll},   {"seconds", r.seconds},
                              {"tokens_per_s", r.tokens_per_s}, {"tokenize_seconds", r.tokenize_seconds},
                              {"peak_rss_bytes", core::peak_rss_bytes()}, {"peak_rss_mib", peak_mib}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model        %s (%s)\n", a.model.c_str(), m->config().architecture.c_str());
  std::printf("dataset      %s  %s\n", std::string(io::dataset_name(opt.dataset)).c_str(), a.data.c_str());
  std::printf("seqlen       %d\n", r.seqlen);
  std::printf("tokens       %lld\n", static_cast<long long>(r.tokens));
  std::printf("windows      %lld (%lld predicted tokens)\n", static_cast<long long>(r.windows),
              static_cast<long long>(r.predicted));
  std::printf("ppl          %.4f\n", r.ppl);
  std::printf("mean NLL     %.6f nats/token\n", r.mean_nll);
  std::printf("speed        %.0f tokens/s (%.2f s forward, %.2f s tokenize)\n", r.tokens_per_s, r.seconds,
              r.tokenize_seconds);
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
                  "text: the file as is")
      ->check(CLI::IsMember({"wikitext2", "ptb", "c4", "text"}))
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
  sub->add_option("--threads", args->threads, "Threads for BLAS and OpenMP; 0 = all cores")
      ->capture_default_str()
      ->group("Performance");
  sub->add_flag("--json", args->json, "Print the result as one JSON object")->group("Output");
  return {sub, [args] { return run_ppl(*args); }};
}

}  // namespace latentllm::cli
