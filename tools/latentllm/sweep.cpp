// `latentllm sweep`: the paper's experiment grid (Table 2, Figure 4, Table 3) — every method at every
// ratio on one calibration set, perplexity on each dataset, results written as they arrive
// (sweep_report.cpp writes them).
#include <algorithm>
#include <cmath>
#include <limits>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>
#include <utility>

#include <fmt/ranges.h>

#include "commands.hpp"
#include "latentllm/threads.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/dist.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/files.hpp"
#include "latentllm/log.hpp"
#include "latentllm/resources.hpp"
#include "options.hpp"
#include "latentllm/image.hpp"
#include "latentllm/compress_run.hpp"
#include "latentllm/mc.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/scienceqa.hpp"
#include "sweep_report.hpp"

namespace latentllm::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct SweepArgs {
  std::string model, out, methods, ratios = "0.1,0.2,0.3,0.4", datasets = "wikitext2", data_dir;
  int max_windows = 0, eval_seqlen = 0;
  std::string scienceqa, protocol = "llava";  // an LMM sweep: ScienceQA val of this folder, by this protocol
  int max_problems = 0;
  std::string mc;          // zero-shot tasks: [FORMAT=]FILE, comma-separated (eval --task mc's layouts)
  int mc_limit = 0;        // items per task (0 = all)
  std::uint64_t mc_seed = 1234;  // tinystories-next: the draw of distractors and gold positions
  RunArgs run;
  MethodArgs m;
  CalibArgs c;
  bool json = false, force = false;
};

// The model's name for titles: its directory, or the parent's when the directory is a bare "hf".
std::string model_label(const fs::path& dir) {
  const fs::path p = dir.filename().empty() ? dir.parent_path() : dir;
  return p.filename() == "hf" ? p.parent_path().filename().string() : p.filename().string();
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

struct DatasetSpec {
  std::string name;  // column label
  io::Dataset kind;
  fs::path file;
};

// "wikitext2", "ptb", "c4", "c4-heldout", "tinystories-valid", "tinystories-test" resolve to the standard files under --data-dir; "NAME=FILE" is explicit
// (NAME one of wikitext2, ptb, c4, text).
std::vector<DatasetSpec> parse_datasets(const std::string& spec, const fs::path& data_dir) {
  static const std::map<std::string, std::string> kDefault = {
      {"wikitext2", "wikitext2/wiki.test.raw"},
      {"ptb", "ptb/ptb.valid.txt"},
      {"c4", "c4/c4-train.00000-of-01024.first1000.jsonl"},
      {"c4-heldout", "c4/c4-train.00000-of-01024.first1000.jsonl"},
      {"tinystories-valid", "tinystories/TinyStories-valid.stories0001-0232.clean.txt"},
      {"tinystories-test", "tinystories/TinyStories-valid.stories0001-0232.clean.txt"}};
  std::vector<DatasetSpec> out;
  for (const auto& item : split(spec)) {
    const auto eq = item.find('=');
    DatasetSpec d;
    d.name = item.substr(0, eq);
    d.kind = io::parse_dataset(d.name);
    if (eq != std::string::npos) {
      d.file = item.substr(eq + 1);
    } else if (kDefault.count(d.name)) {
      if (data_dir.empty()) {
        throw ConfigError(fmt::format("--datasets: {} needs --data-dir, the folder holding {} (expected --data-dir DIR "
                                      "or {}=FILE)", d.name, kDefault.at(d.name), d.name));
      }
      d.file = data_dir / kDefault.at(d.name);
    } else {
      throw ConfigError(fmt::format("--datasets: {} needs a file (expected {}=FILE)", d.name, d.name));
    }
    if (!fs::exists(d.file)) throw IoError(fmt::format("{}: dataset file not found ({})", d.file.string(), d.name));
    out.push_back(std::move(d));
  }
  return out;
}

// A zero-shot task of the grid: its items, read once, scored for every run.
struct McTask {
  std::string name;  // the column: "tinystories-next", else the file's stem (as eval --task mc names it)
  std::string format;
  fs::path file;
  std::vector<eval::mc::Item> items;
};

// --mc "[FORMAT=]FILE,...": FORMAT one of eval --task mc's layouts (default auto) or tinystories-next.
std::vector<McTask> parse_mc_tasks(const std::string& spec, int limit, std::uint64_t seed) {
  if (limit < 0) throw ConfigError(fmt::format("--mc-limit (expected >= 0, got {})", limit));
  std::vector<McTask> out;
  for (const auto& item : split(spec)) {
    const auto eq = item.find('=');
    const std::string format = eq == std::string::npos ? "auto" : item.substr(0, eq);
    const fs::path file = eq == std::string::npos ? item : item.substr(eq + 1);
    McTask t;
    t.name = format == "tinystories-next" ? format : file.stem().string();
    for (const auto& other : out)
      if (other.name == t.name)
        throw ConfigError(fmt::format("--mc: two tasks named {} (expected one file per task name: the file's stem, or "
                                      "tinystories-next)", t.name));
    t.format = format;
    t.file = file;
    out.push_back(std::move(t));
  }
  for (auto& t : out) {  // named and distinct: now read
    t.items = t.format == "tinystories-next" ? eval::mc::tinystories_next_sentence(t.file, seed, limit)
                                             : eval::mc::read_items(t.file, t.format, limit);
  }
  return out;
}

std::vector<double> parse_ratios(const std::string& s) {
  std::vector<double> out;
  for (const auto& r : split(s)) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(r, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != r.size() || !(v > 0 && v < 1)) {
      throw ConfigError(fmt::format("--ratios: {} (expected numbers in (0, 1))", r));
    }
    out.push_back(v);
  }
  if (out.empty()) throw ConfigError("--ratios: expected at least one ratio");
  return out;
}

class Sweep {
 public:
  Sweep(const SweepArgs& a) : a_(a), out_(a.out) {}

  int run() {
    apply_run_options(a_.run);
    const auto methods = split(a_.methods.empty() ? default_methods() : a_.methods);
    const auto ratios = parse_ratios(a_.ratios);
    const auto budgets = parse_budgets(a_.m.bpw);  // --bpw: the grid is in bits per weight instead of ratios
    for (const auto& method : methods) {
      compress::CompressOptions o;
      with_context("--methods", [&] { o = options_for(method, ratios.front(), budgets.empty() ? 0 : budgets.front()); });
      // The grid shares its options: one a method does not read is left out of that method's record.
      for (const std::string& flag : unread_options(a_.m, o))
        log_warn("sweep: {} is not read by {} (its runs go without it)", flag, method);
    }
    // An LMM sweep scores ScienceQA; perplexity datasets only where asked for.
    const bool datasets_given = a_.m.app && a_.m.app->count("--datasets") > 0;
    mc_ = parse_mc_tasks(a_.mc, a_.mc_limit, a_.mc_seed);
    datasets_ = parse_datasets(a_.scienceqa.empty() || datasets_given ? a_.datasets : "", a_.data_dir);
    if (datasets_.empty() && a_.scienceqa.empty()) throw ConfigError("--datasets: expected at least one dataset");
    if (!a_.scienceqa.empty()) prepare_scienceqa();
    auto dense = model::Model::load(a_.model, a_.run.load());
    compress::require_dense(*dense, "sweep");
    if (a_.eval_seqlen < 0) throw ConfigError(fmt::format("--eval-seqlen (expected >= 0, got {})", a_.eval_seqlen));
    eval_seqlen_ = a_.eval_seqlen > 0 ? a_.eval_seqlen : eval::default_seqlen(dense->config());
    check_seqlen(eval_seqlen_, dense->config(), "--eval-seqlen");
    // Under K ranks every rank compresses and evaluates (each on its share); rank 0 alone writes and prints.
    if (dist::is_root()) prepare_output();
    tok_ = model_tokenizer(a_.model, dense->config());
    co_ = to_calib_options(a_.c, &dense->config());
    if (co_.source == "scienceqa") {
      if (!llava_) {
        throw ConfigError("--calib scienceqa: needs --scienceqa (expected a sweep of a LLaVA checkpoint scored on "
                          "ScienceQA, got none)");
      }
      calib_set_ = eval::scienceqa::calibration_set(*llava_, *tok_, processor_, co_.data, "train", co_.nsamples,
                                                    co_.seed);
      ids_ = calib_set_.ids;
      co_.seqlen = *std::max_element(calib_set_.lengths.begin(), calib_set_.lengths.end());
    } else {
      ids_ = calib::sample_calibration(*tok_, co_);
    }
    log_info("sweep: {} windows of {} calibration tokens, {} methods x {} ratios x {} datasets", co_.nsamples,
             co_.seqlen, methods.size(), ratios.size(), datasets_.size());
    res_.model = a_.model;
    res_.label = model_label(a_.model);
    res_.calibration_title = fmt::format("{} x {} tokens of {}, seed {}", co_.nsamples, co_.seqlen,
                                         co_.data.filename().string(), co_.seed);
    nlohmann::json ds = nlohmann::json::array();
    const nlohmann::json calibration = calib::calibration_record(co_);
    for (const auto& d : datasets_) {
      res_.datasets.push_back(d.name);
      ds.push_back({{"name", d.name}, {"file", d.file.filename().string()},
                    {"held_out", held_out(d.kind, d.file.string(), &calibration)}});
    }
    nlohmann::json tasks = nlohmann::json::array();
    for (const auto& t : mc_) {
      res_.mc_tasks.push_back(t.name);
      tasks.push_back({{"name", t.name}, {"items", t.items.size()}});
    }
    res_.info = {{"calibration", calibration}, {"settings", settings()}, {"datasets", ds}, {"mc_tasks", tasks},
                 {"eval_seqlen", eval_seqlen_}, {"max_windows", a_.max_windows}};
    if (budgets.empty()) write_table3(res_, *dense, ratios, options_for("asvd-rootcov", ratios.front(), 0));

    SweepRun ref;
    ref.method = "dense";
    ref.model_params = eval::num_params(*dense);
    ref.params = ref.dense_params = dense_linear_params(*dense);
    evaluate(dense, ref);
    res_.runs.push_back(ref);
    save();
    dense.reset();

    const auto t0 = Clock::now();
    const std::vector<double> grid = budgets.empty() ? ratios : budgets;
    const std::size_t total = methods.size() * grid.size();
    std::size_t done = 0;
    for (double point : grid) {
      for (const auto& method : methods) {
        res_.runs.push_back(budgets.empty() ? compress_and_evaluate(method, point, 0)
                                            : compress_and_evaluate(method, ratios.front(), point));
        save();
        ++done;
        const double el = std::chrono::duration<double>(Clock::now() - t0).count();
        log_info("sweep: {}/{} done (elapsed {:.0f}s, ETA {:.0f}s)", done, total, el, el / done * (total - done));
      }
    }
    if (!dist::is_root()) return 0;
    std::vector<std::string> written = result_files(res_);
    for (auto& name : plot(out_, res_)) written.push_back(std::move(name));
    print_table(written);
    return 0;
  }

 private:
  static std::string default_methods() {
    std::string s;
    for (const auto m : compress::all_methods()) s += (s.empty() ? "" : ",") + std::string(compress::method_name(m));
    return s;
  }

  // The results so far (rank 0's files).
  void save() const {
    if (dist::is_root()) write_results(out_, res_);
  }

  // Perplexities, and for an LMM sweep the ScienceQA accuracy with `m` as the language model (it is
  // handed to the LLaVA model for that and given back).
  void evaluate(std::unique_ptr<model::Model>& m, SweepRun& r) {
    const auto t0 = Clock::now();
    evaluate_ppl(*m, r);
    evaluate_mc(*m, r);
    if (llava_) {
      m = llava_->swap_language_model(std::move(m));
      eval::scienceqa::Options o;
      o.protocol = eval::scienceqa::parse_protocol(a_.protocol);
      const auto res = eval::scienceqa::evaluate(*llava_, *tok_, processor_, problems_, o);
      m = llava_->swap_language_model(std::move(m));
      for (const auto& c : eval::scienceqa::category_names()) r.accuracy[c] = res.accuracy(c);
      r.predictions = nlohmann::json::array();
      for (const auto& p : res.predictions)
        r.predictions.push_back({{"pid", p.pid}, {"pred", p.pred}, {"answer", p.answer}, {"correct", p.correct}});
      log_info("sweep: {} ratio {:.2f} ScienceQA {} accuracy {:.2f} %", r.method, r.ratio, a_.protocol,
               r.accuracy.at("AVG"));
    }
    r.eval_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void evaluate_ppl(model::Model& m, SweepRun& r) {
    for (const auto& d : datasets_) {
      eval::PplOptions po;
      po.dataset = d.kind;
      po.data = d.file;
      po.seqlen = eval_seqlen_;
      po.max_windows = a_.max_windows;
      r.ppl[d.name] = eval::perplexity(m, *tok_, po).ppl;
      log_info("sweep: {} ratio {:.2f} {} ppl {:.4f}", r.method, r.ratio, d.name, r.ppl[d.name]);
    }
  }

  // The zero-shot tasks by lm-eval's protocol (the tokenizer's default BOS, as eval --task mc's --add-bos auto).
  void evaluate_mc(const model::Model& m, SweepRun& r) {
    for (const auto& t : mc_) {
      const eval::mc::Result res = eval::mc::evaluate(m, *tok_, t.items, eval::mc::Options{});
      r.mc[t.name] = {static_cast<int>(res.items.size()), res.acc, res.acc_stderr, res.acc_norm, res.acc_norm_stderr};
      log_info("sweep: {} ratio {:.2f} {} acc {:.4f} acc_norm {:.4f}", r.method, r.ratio, t.name, res.acc, res.acc_norm);
    }
  }

  // The dense LLaVA model (its vision tower and projector serve every run) and the ScienceQA val problems.
  void prepare_scienceqa() {
    eval::scienceqa::require_llava(a_.model);
    (void)eval::scienceqa::parse_protocol(a_.protocol);
    problems_ = eval::scienceqa::load_problems(a_.scienceqa, "val", a_.max_problems);
    processor_ = image::load_checkpoint_processor(fs::path(a_.model));
    llava_ = std::make_unique<model::LlavaModel>(model::LlavaModel::load(a_.model, a_.run.load()));
    res_.multimodal = true;
  }

  // The options of one cell: `method` at `ratio`, or with a budget > 0 at that many bits per weight: the
  // low-rank methods by --bpw (ranks and bits together), rtn and gptq at the most bits within it
  // (dense_bits_within), the sparse methods refused.
  compress::CompressOptions options_for(const std::string& method, double ratio, double budget) const {
    MethodArgs args = a_.m;
    args.bpw.clear();
    const compress::Method m = compress::parse_method(method);
    if (budget > 0 && compress::sparsifies(m)) {
      throw ConfigError(fmt::format("sweep --bpw: --methods {} (expected low-rank methods, rtn or gptq: sparse "
                                    "modules are not quantized, got {})", method, method));
    }
    if (budget > 0 && compress::quantizes_dense(m)) std::tie(args.bits, args.group) = dense_bits_within(budget);
    compress::CompressOptions o = to_compress_options(args, method, ratio);
    if (budget <= 0 || compress::quantizes_dense(m)) return o;
    o.quant.bpw = budget;
    o.quant.bits = 16;
    if (a_.m.rank_alloc == "auto") o.rank_alloc = compress::RankAlloc::Global;
    o.validate();
    return o;
  }

  // rtn and gptq within `budget` bits per weight: the most bits q ∈ {8, 4, 3, 2} of which some group
  // G ∈ {32, 64, 128, 256} fits, q + 32/G ≤ budget (F16 scale and zero per group; partial last groups
  // can cost a little more), with the smallest such G.
  static std::pair<int, int> dense_bits_within(double budget) {
    for (int q : {8, 4, 3, 2})
      for (int g : {32, 64, 128, 256})
        if (q + 32.0 / g <= budget + 1e-12) return {q, g};
    throw ConfigError(fmt::format("sweep --bpw {}: below what rtn and gptq store (expected at least 2.125 bits per "
                                  "weight: 2 bits in groups of 256)", budget));
  }

  static std::vector<double> parse_budgets(const std::string& list) {
    std::vector<double> out;
    for (const auto& b : split(list)) out.push_back(parse_bpw(b));
    return out;
  }

  SweepRun compress_and_evaluate(const std::string& method, double ratio, double budget) {
    SweepRun r;
    r.method = method;
    r.ratio = ratio;
    r.budget = budget;
    auto m = model::Model::load(a_.model, a_.run.load());
    compress::CompressOptions opt = options_for(method, ratio, budget);
    // A pre-pass of a run without a budget did not measure the rounding errors the budget reads.
    if (opt.quant.bpw > 0 && !spectra_.empty() && spectra_.front().quant_rel.empty()) spectra_.clear();
    resolve_batch(a_.m, opt, co_.seqlen);
    if (!calib_set_.lengths.empty()) {  // multimodal calibration: sequences of their own lengths
      opt.pipeline.lengths = calib_set_.lengths;
      opt.pipeline.input_embeddings = &calib_set_.embeddings;
    }
    // The spectra depend on the dense model and the calibration only: one pre-pass serves every run.
    const compress::PlannedRanks planned = compress::plan_run(*m, ids_, co_.seqlen, opt, &spectra_);
    summarize(compress::compress_model(*m, ids_, co_.seqlen, opt, &planned.plan), r);
    r.macs = planned.plan.macs() + res_.other_macs;
    r.options = compress::options_record(compress::effective_options(m->config(), std::ssize(ids_), opt), a_.m.preset);
    r.model_params = eval::num_params(*m);
    bool loaded = true;  // a lazy model's compressed layers stay loaded; never count a released one's file
    for (int i = 0; i < m->num_layers(); ++i) loaded = loaded && m->layer_loaded(i);
    if (opt.quant.enabled() && loaded) r.bits_per_weight = eval::compressed_modules(*m, 2).bits_per_weight();
    evaluate(m, r);
    return r;
  }

  // The options shared by the grid (each run's own record is in its row: SweepRun::options).
  nlohmann::json settings() const {
    return {{"preset", a_.m.preset}, {"junction", a_.m.junction}, {"rank_alloc", a_.m.rank_alloc},
            {"joint", a_.m.joint}, {"weights", a_.run.weights}};
  }

  // --out: created, or, with --force, an earlier sweep's folder emptied of the files a sweep writes (so no
  // stale table or plot of another grid survives); anything else there is never touched.
  void prepare_output() {
    std::error_code ec;
    if (fs::exists(out_, ec)) {
      if (!fs::is_directory(out_, ec)) {
        throw IoError(fmt::format("{}: exists and is not a directory (expected a new path or a sweep's output folder)",
                                  out_.string()));
      }
      const bool ours = fs::exists(out_ / "results.json", ec);
      if (!fs::is_empty(out_, ec) && !ours) {
        throw IoError(fmt::format("{}: exists and is not a sweep's output folder (expected an empty folder or one "
                                  "with results.json; --force replaces only those)", out_.string()));
      }
      if (!fs::is_empty(out_, ec) && !a_.force) {
        throw IoError(fmt::format("{}: output folder exists (use --force to replace an earlier sweep's results)",
                                  out_.string()));
      }
      for (const auto& e : fs::directory_iterator(out_)) {
        // A file that cannot be removed fails when it is written again (core::write_text_atomic).
        if (is_sweep_file(e.path().filename().string()) && e.is_regular_file()) fs::remove(e.path(), ec);
      }
    }
    // A parent that is a file or refuses new files is one error before any work, as for compress.
    checkpoint::check_output_writable(out_);
    fs::create_directories(out_, ec);  // the parent takes new entries: a failure fails the first write
  }

  // The files a sweep writes (and replaces with --force).
  static bool is_sweep_file(const std::string& name) {
    for (const char* prefix : {"results.", "table2.", "table3.", "table4.", "ppl_", "radar_"})
      if (name.starts_with(prefix)) return true;
    // The zero-shot tasks' table and plots, and nothing else of that prefix (a user's mc_notes.txt stays).
    return name == "mc.csv" || (name.starts_with("mc_") && (name.ends_with(".gp") || name.ends_with(".png")));
  }

  // Table 2 (perplexities) and, for an LMM sweep, Table 4 (ScienceQA accuracy), then the files written.
  void print_table(const std::vector<std::string>& written) const {
    if (a_.json) {
      std::printf("%s\n", res_.to_json().dump(2).c_str());
      return;
    }
    if (!res_.datasets.empty() || !res_.mc_tasks.empty()) std::printf("%s\n", res_.table2().c_str());
    if (res_.multimodal) std::printf("%s\n", res_.table4().c_str());
    std::printf("wrote %s/{%s}\n", out_.string().c_str(), fmt::format("{}", fmt::join(written, ",")).c_str());
  }

  const SweepArgs& a_;
  fs::path out_;
  std::vector<DatasetSpec> datasets_;
  std::vector<McTask> mc_;
  std::unique_ptr<io::Tokenizer> tok_;
  calib::CalibOptions co_;
  std::vector<std::int32_t> ids_;
  int eval_seqlen_ = 0;  // resolved: --eval-seqlen or the model's default
  std::unique_ptr<model::LlavaModel> llava_;           // an LMM sweep's dense model (vision tower, projector)
  std::vector<eval::scienceqa::Problem> problems_;     // its ScienceQA val problems
  image::ProcessorConfig processor_;
  eval::scienceqa::CalibrationSet calib_set_;          // --calib scienceqa
  std::vector<compress::ModuleSpectrum> spectra_;  // of the dense model (--rank-alloc global), measured once
  SweepResults res_;
};

}  // namespace

Command add_sweep(CLI::App& app) {
  auto* sub = app.add_subcommand("sweep", "Every method at every ratio: perplexity tables (paper Table 2, 3) and plots");
  auto a = std::make_shared<SweepArgs>();
  sub->add_option("--model", a->model, "Input model directory (HF format)")->required()->group("Model");
  sub->add_option("--out", a->out, "Output directory for results.{csv,json}, table2.md, table3.md, ppl_*.png")
      ->required()->group("Model");
  sub->add_option("--methods", a->methods, "Comma-separated methods (default: all)")->group("Method");
  sub->add_option("--ratios", a->ratios, "Comma-separated compression ratios")->capture_default_str()->group("Method");
  add_method_options(sub, a->m);
  add_calib_options(sub, a->c);
  sub->add_option("--datasets", a->datasets, "Comma-separated: wikitext2, ptb, c4 (files under --data-dir) or NAME=FILE")
      ->capture_default_str()->group("Evaluation");
  sub->add_option("--data-dir", a->data_dir,
                  "Folder of the standard evaluation files (wikitext2/wiki.test.raw, ptb/ptb.valid.txt, c4/..., "
                  "tinystories/...; e.g. ../shared/data), needed for a dataset given by name alone")
      ->group("Evaluation");
  sub->add_flag("--force", a->force, "Replace an earlier sweep's results in --out")->group("Model");
  sub->add_option("--scienceqa", a->scienceqa,
                  "A LLaVA checkpoint: score every run on the val split of this ScienceQA-layout folder (accuracy by "
                  "subject, context and grade; table4.md and radar_<ratio>.png, the paper's Table 4 and radar figure); "
                  "perplexity datasets then only where --datasets is given")->group("Evaluation");
  sub->add_option("--protocol", a->protocol, "ScienceQA protocol: llava (LLaVA's own), generate or loglik (eval --help)")
      ->check(CLI::IsMember({"llava", "generate", "loglik"}))->capture_default_str()->group("Evaluation");
  sub->add_option("--max-problems", a->max_problems, "Score only the first N val problems (0 = all)")
      ->capture_default_str()->group("Evaluation");
  sub->add_option("--mc", a->mc,
                  "Zero-shot multiple-choice tasks scored for every run beside perplexity, comma-separated "
                  "[FORMAT=]FILE (FORMAT as eval --format: auto, arc, hellaswag, piqa, winogrande, boolq, openbookqa, "
                  "generic, or tinystories-next on a stories file); acc and acc_norm in table2.md and mc.csv")
      ->group("Evaluation");
  sub->add_option("--mc-limit", a->mc_limit, "Score only the first N items of each --mc task (0 = all)")
      ->capture_default_str()->group("Evaluation");
  sub->add_option("--mc-seed", a->mc_seed, "--mc tinystories-next: the seed of the distractors and gold positions")
      ->capture_default_str()->group("Evaluation");
  sub->add_option("--eval-seqlen", a->eval_seqlen, "Evaluation window (0 = min(2048, max positions))")
      ->capture_default_str()->group("Evaluation");
  sub->add_option("--max-windows", a->max_windows, "Evaluate only the first K windows (0 = all)")
      ->capture_default_str()->group("Evaluation");
  add_run_options(sub, a->run);
  add_weights_option(sub, a->run);
  sub->add_flag("--json", a->json, "Print the results as JSON")->group("Run");
  return {sub, [a] { return Sweep(*a).run(); }};
}

}  // namespace latentllm::cli
