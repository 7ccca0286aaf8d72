// `latentllm eval --task scienceqa`: multiple-choice accuracy of a LLaVA checkpoint (dense or latent) on a
// ScienceQA-format data folder, by category (LLaVA's Table 4 layout) on stdout or as one JSON document.
// `latentllm eval --task mc`: zero-shot multiple choice of any checkpoint by lm-eval's protocol
// (include/latentllm/mc.hpp): acc and acc_norm with their standard errors.
#include <algorithm>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "latentllm/dist.hpp"
#include "latentllm/error.hpp"
#include "latentllm/image.hpp"
#include "latentllm/mc.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/scienceqa.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::cli {
namespace {

namespace sqa = eval::scienceqa;

struct EvalArgs {
  std::string task = "scienceqa";
  std::string model;
  std::string data;
  std::string split = "val";
  std::string protocol = "llava";
  int max_problems = 0;
  int max_new_tokens = 0;  // 0: the protocol's default (sqa::default_max_new_tokens)
  std::string format = "auto";  // mc: the jsonl layout, or tinystories-next
  std::string add_bos = "auto";  // mc: lm-eval's add_bos_token (auto = unset: the tokenizer's default)
  std::uint64_t seed = 1234;    // mc tinystories-next: the draw of distractors and gold positions
  std::string max_memory;  // empty: core::default_budget()
  RunArgs run;
  bool json = false;
  const CLI::App* app = nullptr;  // the subcommand, to tell which options were given
};

// i/N, elapsed and ETA on stderr: one rewritten line on a terminal, a line every 10 s otherwise.
class Progress {
 public:
  Progress() : tty_(::isatty(2) != 0) {}
  void operator()(int i, int n, double seconds) {
    const bool last = i == n;
    if (quiet() || (!tty_ && !last && seconds - last_print_ < 10.0)) return;
    last_print_ = seconds;
    const double eta = seconds / i * (n - i);
    std::fprintf(stderr, "%seval: %d/%d problems, %.1f problems/s, elapsed %.1f s, ETA %.1f s%s", tty_ ? "\r" : "", i,
                 n, i / std::max(seconds, 1e-9), seconds, eta, tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  double last_print_ = -1e9;
};

// An accuracy with two decimals, "-" for an empty category.
std::string percent(double a) { return std::isnan(a) ? "-" : fmt::format("{:.2f}", a); }

// LLaVA's Table 4: subject, context modality, grade, average.
void print_table(const EvalArgs& a, const sqa::Result& r) {
  std::printf("ScienceQA %s, %zu problems, protocol %s: %s\n", a.split.c_str(), r.predictions.size(),
              a.protocol.c_str(), a.model.c_str());
  std::printf("%-24s", "");
  for (const std::string& c : sqa::category_names()) std::printf(" %7s", c == "AVG" ? "Avg" : c.c_str());
  std::printf("\n%-24s", "accuracy (%)");
  for (const std::string& c : sqa::category_names()) std::printf(" %7s", percent(r.accuracy(c)).c_str());
  std::printf("\n%-24s", "problems");
  for (const std::string& c : sqa::category_names()) std::printf(" %7d", r.count.at(c));
  std::printf("\nunparsable replies: %d (counted wrong)\n", r.unparsable);
}

nlohmann::json result_json(const EvalArgs& a, const sqa::Result& r) {
  nlohmann::json acc = nlohmann::json::object(), counts = nlohmann::json::object(), preds = nlohmann::json::array();
  for (const std::string& c : sqa::category_names()) {
    const double v = r.accuracy(c);
    acc[c] = std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
    counts[c] = r.count.at(c);
  }
  for (const sqa::Prediction& p : r.predictions) {
    preds.push_back({{"pid", p.pid}, {"pred", p.pred}, {"answer", p.answer}, {"correct", p.correct},
                     {"reply", p.reply}});
  }
  const auto n = static_cast<double>(r.predictions.size());
  return {{"task", a.task}, {"model", a.model}, {"data", a.data}, {"split", a.split}, {"protocol", a.protocol},
          {"problem_count", r.predictions.size()}, {"accuracy_percent", acc}, {"counts", counts}, {"unparsable", r.unparsable},
          {"predictions", preds}, {"eval_seconds", r.seconds}, {"problems_per_s", r.seconds > 0 ? n / r.seconds : 0.0},
          {"processes", dist::size()}};
}

// The task's name in the results: the data file's stem (lm-eval names results by task).
std::string mc_task_name(const EvalArgs& a) {
  return a.format == "tinystories-next" ? "tinystories-next" : std::filesystem::path(a.data).stem().string();
}

int run_mc(const EvalArgs& a) {
  for (const char* opt : {"--split", "--protocol", "--max-new-tokens"})
    if (a.app && a.app->count(opt) > 0)
      throw ConfigError(fmt::format("{}: a ScienceQA option (expected it only with --task scienceqa)", opt));
  if (a.max_problems < 0) throw ConfigError(fmt::format("--max-problems (expected >= 0, got {})", a.max_problems));
  const std::vector<eval::mc::Item> items =
      a.format == "tinystories-next" ? eval::mc::tinystories_next_sentence(a.data, a.seed, a.max_problems)
                                     : eval::mc::read_items(a.data, a.format, a.max_problems);
  apply_run_options(a.run);
  const auto config = model::load_config(std::filesystem::path(a.model) / "config.json");
  check_inference_memory("eval", a.model, a.max_memory, std::min<std::int64_t>(config.max_position_embeddings, 4096),
                         a.run);
  const std::unique_ptr<model::Model> m = model::Model::load(a.model, a.run.load());
  const auto tok = model_tokenizer(a.model, m->config());
  if (!quiet()) {
    std::fprintf(stderr, "eval: mc %s (%zu items, format %s) from %s, model %s\n", mc_task_name(a).c_str(),
                 items.size(), a.format.c_str(), a.data.c_str(), a.model.c_str());
  }
  Progress progress;
  eval::mc::Options opt;
  if (a.add_bos != "auto") opt.add_bos = a.add_bos == "true";
  const eval::mc::Result r = eval::mc::evaluate(*m, *tok, items, opt, std::ref(progress));
  if (!dist::is_root()) return 0;
  const auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  if (a.json) {
    nlohmann::json per = nlohmann::json::array();
    for (std::size_t k = 0; k < r.items.size(); ++k) {
      per.push_back({{"gold", items[k].gold}, {"pred", r.items[k].pred}, {"pred_norm", r.items[k].pred_norm},
                     {"loglik", r.items[k].loglik}, {"context_ids", r.items[k].context_ids},
                     {"continuation_ids", r.items[k].continuation_ids}});
    }
    const nlohmann::json j = {
        {"task", "mc"}, {"model", a.model}, {"data", a.data}, {"format", a.format}, {"add_bos", a.add_bos},
        {"item_count", r.items.size()},
        {"results", {{mc_task_name(a), {{"acc", r.acc}, {"acc_stderr", num(r.acc_stderr)}, {"acc_norm", r.acc_norm},
                                        {"acc_norm_stderr", num(r.acc_norm_stderr)}}}}},
        {"items", per}, {"eval_seconds", r.seconds}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s, %zu items: %s\n", mc_task_name(a).c_str(), r.items.size(), a.model.c_str());
    std::printf("acc       %.4f ± %.4f\nacc_norm  %.4f ± %.4f\n", r.acc, r.acc_stderr, r.acc_norm, r.acc_norm_stderr);
  }
  return 0;
}

int run_eval(const EvalArgs& a) {
  if (a.task == "mc") return run_mc(a);
  for (const char* opt : {"--format", "--add-bos", "--seed"})
    if (a.app && a.app->count(opt) > 0)
      throw ConfigError(fmt::format("{}: a zero-shot option (expected it only with --task mc)", opt));
  // Every option and input is checked before the model is read.
  sqa::Options opt;
  opt.protocol = sqa::parse_protocol(a.protocol);
  if (a.max_problems < 0) throw ConfigError(fmt::format("--max-problems (expected >= 0, got {})", a.max_problems));
  const bool given = a.app && a.app->count("--max-new-tokens") > 0;
  if (given && a.max_new_tokens < 1) {
    throw ConfigError(fmt::format("--max-new-tokens (expected >= 1, got {})", a.max_new_tokens));
  }
  if (opt.protocol == sqa::Protocol::Loglik && given) {
    throw ConfigError("--max-new-tokens: not read by --protocol loglik (expected it only with --protocol llava or "
                      "generate)");
  }
  opt.max_new_tokens = a.max_new_tokens;
  apply_run_options(a.run);
  sqa::require_llava(a.model);
  const std::vector<sqa::Problem> problems = sqa::load_problems(a.data, a.split, a.max_problems);
  {
    // The longest prompt and reply fit the language model's positions: the plan counts that many.
    const auto text = model::load_config(std::filesystem::path(a.model) / "config.json");
    check_inference_memory("eval", a.model, a.max_memory, std::min<std::int64_t>(text.max_position_embeddings, 4096),
                           a.run);
  }
  const model::LlavaModel m = model::LlavaModel::load(a.model, a.run.load());
  const auto tok = model_tokenizer(a.model, m.config().text);
  const image::ProcessorConfig processor =
      image::load_checkpoint_processor(std::filesystem::path(a.model));
  if (!quiet()) {
    std::fprintf(stderr, "eval: scienceqa %s (%zu problems) from %s, protocol %s, model %s\n", a.split.c_str(),
                 problems.size(), a.data.c_str(), a.protocol.c_str(), a.model.c_str());
  }
  Progress progress;
  // Under K ranks each evaluates its share of the problems; every rank gets the whole result, rank 0 prints.
  const sqa::Result r = sqa::evaluate(m, *tok, processor, problems, opt, std::ref(progress));
  if (!dist::is_root()) return 0;
  if (a.json) {
    std::printf("%s\n", result_json(a, r).dump().c_str());
  } else {
    print_table(a, r);
  }
  return 0;
}

}  // namespace

Command add_eval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  auto* sub = app.add_subcommand("eval", "Accuracy of a multimodal (LLaVA) checkpoint on a benchmark: ScienceQA by "
                                         "LLaVA's protocol, by subject, context and grade");
  sub->add_option("--task", args->task,
                  "Benchmark: scienceqa (a LLaVA checkpoint on a ScienceQA folder) or mc (zero-shot multiple choice "
                  "of any checkpoint by lm-eval's protocol on a jsonl file)")
      ->check(CLI::IsMember({"scienceqa", "mc"}))
      ->capture_default_str()
      ->group("Input");
  sub->add_option("--model", args->model, "Checkpoint directory (dense or latent; scienceqa: a LLaVA checkpoint)")
      ->required()
      ->group("Input");
  sub->add_option("--data", args->data,
                  "scienceqa: the data folder (problems.json, pid_splits.json, images/<split>/<pid>/image.png); mc: "
                  "a jsonl file (--format), or TinyStories stories with --format tinystories-next")
      ->required()
      ->group("Input");
  sub->add_option("--split", args->split, "Split of pid_splits.json (val, test, train, minival, ...)")
      ->capture_default_str()
      ->group("Input");
  sub->add_option("--max-problems", args->max_problems, "Evaluate only the first N problems (items); 0 = all")
      ->capture_default_str()
      ->group("Input");
  sub->add_option("--format", args->format,
                  "mc: the jsonl layout: auto (by the first line's keys), generic ({context, choices, gold, "
                  "target_delimiter}), arc, hellaswag, piqa, winogrande (partial scoring), boolq, openbookqa; or "
                  "tinystories-next (the true next sentence of a TinyStories story among four)")
      ->check(CLI::IsMember({"auto", "generic", "arc", "hellaswag", "piqa", "winogrande", "boolq", "openbookqa",
                             "tinystories-next"}))
      ->capture_default_str()
      ->group("Input");
  sub->add_option("--add-bos", args->add_bos,
                  "mc: lm-eval's add_bos_token: auto (unset: the tokenizer's default call, BOS where it adds one), "
                  "true or false (older lm-eval's default for causal models)")
      ->check(CLI::IsMember({"auto", "true", "false"}))
      ->capture_default_str()
      ->group("Protocol");
  sub->add_option("--seed", args->seed, "mc tinystories-next: the seed of the distractors and gold positions")
      ->capture_default_str()
      ->group("Protocol");
  sub->add_option("--protocol", args->protocol,
                  "llava: LLaVA's own protocol (model_vqa_science.py's prompt normalisation, greedy reply to EOS, at "
                  "most 1024 tokens, parsed as eval_science_qa.py; unparsable = wrong); generate: the earlier "
                  "protocol (3 tokens, newlines read as \". \" by the parser); loglik: the option letter with the "
                  "largest logit after \"ASSISTANT:\"")
      ->check(CLI::IsMember({"llava", "generate", "loglik"}))
      ->capture_default_str()
      ->group("Protocol");
  sub->add_option("--max-new-tokens", args->max_new_tokens,
                  "llava, generate: longest reply in tokens (EOS and max_position_embeddings stop earlier; default "
                  "1024 for llava, 3 for generate)")
      ->group("Protocol");
  sub->add_option("--max-memory", args->max_memory,
                  "Memory budget (e.g. 20G; default: physical memory - 2 GiB, or less when less is available now or a cgroup limits it): the weights as --weights holds them "
                  "(stored by default, float32 with --weights f32) and the rest of the plan printed at start; a model "
                  "whose plan does not fit is refused before it is read")
      ->group("Run");
  add_run_options(sub, args->run);
  add_weights_option(sub, args->run);
  sub->add_flag("--json", args->json,
                "Print one JSON object (accuracy and counts per category, every prediction, problems_per_s) "
                "instead of the table")
      ->group("Output");
  args->app = sub;
  return {sub, [args] { return run_eval(*args); }};
}

}  // namespace latentllm::cli
