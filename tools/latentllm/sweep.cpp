// `latentllm sweep`: the paper's experiment grid (Table 2, Figure 4, Table 3) — every method at every
// ratio on one calibration set, perplexity on each dataset, results written as they arrive.
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "commands.hpp"
#include "latentllm/threads.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/files.hpp"
#include "latentllm/log.hpp"
#include "latentllm/resources.hpp"
#include "options.hpp"

extern char** environ;

namespace latentllm::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct SweepArgs {
  std::string model, out, methods, ratios = "0.1,0.2,0.3,0.4", datasets = "wikitext2", data_dir = "../shared/data";
  int max_windows = 0, eval_seqlen = 0, threads = 0;
  MethodArgs m;
  CalibArgs c;
  bool json = false;
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

// "wikitext2", "ptb", "c4" resolve to the standard files under --data-dir; "NAME=FILE" is explicit
// (NAME one of wikitext2, ptb, c4, text).
std::vector<DatasetSpec> parse_datasets(const std::string& spec, const fs::path& data_dir) {
  static const std::map<std::string, std::string> kDefault = {
      {"wikitext2", "wikitext2/wiki.test.raw"},
      {"ptb", "ptb/ptb.valid.txt"},
      {"c4", "c4/c4-train.00000-of-01024.first1000.jsonl"}};
  std::vector<DatasetSpec> out;
  for (const auto& item : split(spec)) {
    const auto eq = item.find('=');
    DatasetSpec d;
    d.name = item.substr(0, eq);
    d.kind = io::parse_dataset(d.name);
    if (eq != std::string::npos) {
      d.file = item.substr(eq + 1);
    } else if (kDefault.count(d.name)) {
      d.file = data_dir / kDefault.at(d.name);
    } else {
      throw ConfigError(fmt::format("--datasets: {} needs a file (expected {}=FILE)", d.name, d.name));
    }
    if (!fs::exists(d.file)) throw IoError(fmt::format("{}: dataset file not found ({})", d.file.string(), d.name));
    out.push_back(std::move(d));
  }
  if (out.empty()) throw ConfigError("--datasets: expected at least one dataset");
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

// One cell of the grid (method "dense" at ratio 0 is the reference row).
struct Run {
  std::string method;
  double ratio = 0;
  std::map<std::string, double> ppl;  // dataset -> perplexity
  std::int64_t model_params = 0;      // whole model, stored weights and biases
  std::int64_t params = 0, dense_params = 0;  // compressed modules' weights
  double compress_s = 0, eval_s = 0;
  double qk_loss_ratio = 0, ud_loss_ratio = 0;  // mean joint/local over layers (latentllm)
  // Mean relative output error ‖(W − Ŵ)X‖²/‖WX‖² over the calibration tokens of the modules
  // compressed one at a time (joint up-down modules excluded): what the pre-conditioners minimize.
  double output_error = 0;
};

double mean_output_error(const compress::CompressReport& rep) {
  double s = 0;
  int n = 0;
  for (const auto& m : rep.modules)
    if (m.how != "joint-ud") s += m.loss_rel, ++n;
  return n ? s / n : 0.0;
}

// Mean joint/local loss over the layers that have both (the local loss of Q-K and V-O only with
// --diagnostics); NaN when none has.
double mean_ratio(const std::vector<compress::JointLoss>& losses) {
  double s = 0;
  int n = 0;
  for (const auto& l : losses)
    if (l.local > 0) s += l.joint / l.local, ++n;
  return n ? s / n : std::numeric_limits<double>::quiet_NaN();
}

nlohmann::json nan_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

class Sweep {
 public:
  Sweep(const SweepArgs& a) : a_(a), out_(a.out) {}

  int run() {
    core::set_num_threads(a_.threads);
    const auto methods = split(a_.methods.empty() ? default_methods() : a_.methods);
    const auto ratios = parse_ratios(a_.ratios);
    for (const auto& method : methods) {
      with_context("--methods", [&] { (void)to_compress_options(a_.m, method, ratios.front()); });
    }
    datasets_ = parse_datasets(a_.datasets, a_.data_dir);
    auto dense = model::Model::load(a_.model);
    tok_ = io::load_tokenizer(a_.model);
    co_ = to_calib_options(a_.c, dense->config());
    fs::create_directories(out_);
    ids_ = calib::sample_calibration(*tok_, co_);
    log_info("sweep: {} windows of {} calibration tokens, {} methods x {} ratios x {} datasets", co_.nsamples,
             co_.seqlen, methods.size(), ratios.size(), datasets_.size());
    write_table3(*dense, ratios);

    Run ref;
    ref.method = "dense";
    ref.model_params = eval::num_params(*dense);
    evaluate(*dense, ref);
    runs_.push_back(ref);
    write_results();
    dense.reset();

    const auto t0 = Clock::now();
    const std::size_t total = methods.size() * ratios.size();
    std::size_t done = 0;
    for (double ratio : ratios) {
      for (const auto& method : methods) {
        runs_.push_back(compress_and_evaluate(method, ratio));
        write_results();
        ++done;
        const double el = std::chrono::duration<double>(Clock::now() - t0).count();
        log_info("sweep: {}/{} done (elapsed {:.0f}s, ETA {:.0f}s)", done, total, el, el / done * (total - done));
      }
    }
    plot();
    print_table();
    return 0;
  }

 private:
  static std::string default_methods() {
    std::string s;
    for (const auto m : compress::all_methods()) s += (s.empty() ? "" : ",") + std::string(compress::method_name(m));
    return s;
  }

  void evaluate(const model::Model& m, Run& r) {
    const auto t0 = Clock::now();
    for (const auto& d : datasets_) {
      eval::PplOptions po;
      po.dataset = d.kind;
      po.data = d.file;
      po.seqlen = a_.eval_seqlen;
      po.max_windows = a_.max_windows;
      r.ppl[d.name] = eval::perplexity(m, *tok_, po).ppl;
      log_info("sweep: {} ratio {:.2f} {} ppl {:.4f}", r.method, r.ratio, d.name, r.ppl[d.name]);
    }
    r.eval_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  Run compress_and_evaluate(const std::string& method, double ratio) {
    Run r;
    r.method = method;
    r.ratio = ratio;
    auto m = model::Model::load(a_.model);
    const auto rep = compress::compress_model(*m, ids_, co_.seqlen, to_compress_options(a_.m, method, ratio));
    r.compress_s = rep.total_s;
    r.params = rep.params;
    r.dense_params = rep.dense_params;
    r.model_params = eval::num_params(*m);
    r.qk_loss_ratio = mean_ratio(rep.qk_losses);
    r.ud_loss_ratio = mean_ratio(rep.ud_losses);
    r.output_error = mean_output_error(rep);
    evaluate(*m, r);
    return r;
  }

  nlohmann::json results_json() const {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : runs_) {
      rows.push_back({{"method", r.method}, {"ratio", r.ratio}, {"ppl", r.ppl}, {"model_params", r.model_params},
                      {"params", r.params}, {"dense_params", r.dense_params}, {"compress_seconds", r.compress_s},
                      {"eval_seconds", r.eval_s}, {"qk_joint_over_local", nan_null(r.qk_loss_ratio)},
                      {"ud_joint_over_local", nan_null(r.ud_loss_ratio)},
                      {"mean_relative_output_error", r.output_error}});
    }
    nlohmann::json ds = nlohmann::json::array();
    for (const auto& d : datasets_) ds.push_back({{"name", d.name}, {"file", d.file.filename().string()}});
    return {{"model", a_.model}, {"calibration", calib_json(co_, a_.c.sampling)},
            {"settings", settings()}, {"datasets", ds}, {"eval_seqlen", a_.eval_seqlen},
            {"max_windows", a_.max_windows}, {"runs", rows}, {"peak_rss_bytes", core::peak_rss_bytes()}};
  }

  nlohmann::json settings() const {
    auto j = method_json(a_.m, "latentllm", 0);
    j.erase("method");
    j.erase("ratio");
    return j;
  }

  void write_results() const {
    std::string csv = "method,ratio,dataset,ppl,model_params,params,dense_params,compress_s,eval_s\n";
    for (const auto& r : runs_)
      for (const auto& [d, p] : r.ppl)
        csv += fmt::format("{},{:.2f},{},{:.6f},{},{},{},{:.2f},{:.2f}\n", r.method, r.ratio, d, p, r.model_params,
                           r.params, r.dense_params, r.compress_s, r.eval_s);
    core::write_text_atomic(out_ / "results.csv", csv);
    core::write_text_atomic(out_ / "results.json", results_json().dump(2) + "\n");
    core::write_text_atomic(out_ / "table2.md", table2());
  }

  // Paper Table 2 layout: a row per (ratio, method), a perplexity column per dataset.
  std::string table2() const {
    std::string s = fmt::format("# Perplexity of {} (calibration: {} x {} tokens of {}, seed {})\n\n",
                                model_label(a_.model), co_.nsamples, co_.seqlen,
                                co_.data.filename().string(), co_.seed);
    s += "| ratio | method |";
    for (const auto& d : datasets_) s += " " + d.name + " |";
    s += " params | rel. output error | compress s |\n|---:|---|";
    for (std::size_t i = 0; i < datasets_.size(); ++i) s += "---:|";
    s += "---:|---:|---:|\n";
    for (const auto& r : runs_) {
      s += fmt::format("| {} | {} |", r.method == "dense" ? "0%" : fmt::format("{:.0f}%", 100 * r.ratio), r.method);
      for (const auto& d : datasets_) {
        const auto it = r.ppl.find(d.name);
        s += it == r.ppl.end() ? " |" : fmt::format(" {:.2f} |", it->second);
      }
      s += fmt::format(" {} | {:.4f} | {:.1f} |\n", r.model_params, r.output_error, r.compress_s);
    }
    s += "\nrel. output error: mean over the modules compressed one at a time (all but joint up-down) of "
         "‖(W − Ŵ)X‖²/‖WX‖² on the calibration tokens, the loss the pre-conditioners minimize.\n";
    return s;
  }

  // Paper Table 3: parameters, FLOPs and MACs at 128 tokens per ratio, with and without the
  // block-identity junction. Linear modules from the rank plan; LM head and attention products added.
  void write_table3(const model::Model& m, const std::vector<double>& ratios) const {
    const std::int64_t n_tok = 128, other = eval::forward_macs(m, n_tok) - p_dense(m) * n_tok;  // head, attention
    const std::int64_t total = eval::num_params(m);
    std::string s = fmt::format("# Parameters, FLOPs and MACs of {} at {} tokens\n\n"
                                "Compressed linear modules from the rank plan; MACs add the LM head and the attention "
                                "products (Q·Kᵀ, A·V over the full {}-token square, as calflops counts). FLOPs = 2·MACs.\n\n"
                                "| ratio | junction | params | linear params | MACs | FLOPs |\n|---:|---|---:|---:|---:|---:|\n",
                                model_label(a_.model), n_tok, n_tok);
    nlohmann::json rows = nlohmann::json::array();
    auto row = [&](double ratio, const compress::RankPlan* p, const std::string& j) {
      const std::int64_t lin = p ? p->params() : p_dense(m);
      const std::int64_t params = total - p_dense(m) + lin;
      const std::int64_t macs = (p ? p->macs() : p_dense(m) * n_tok) + other;
      s += fmt::format("| {:.0f}% | {} | {} | {} | {:.4g} | {:.4g} |\n", 100 * ratio, j, params, lin,
                       static_cast<double>(macs), 2.0 * static_cast<double>(macs));
      rows.push_back({{"ratio", ratio}, {"junction", j}, {"params", params}, {"linear_params", lin}, {"macs", macs},
                      {"flops", 2 * macs}});
    };
    row(0, nullptr, "dense");
    for (double ratio : ratios) {
      for (auto j : {compress::Junction::BlockIdentity, compress::Junction::Identity}) {
        auto opt = to_compress_options(a_.m, "asvd-rootcov", ratio);
        opt.local.junction = j;
        const auto plan = compress::plan_model(m, opt, n_tok);
        row(ratio, &plan, std::string(compress::junction_name(j)));
      }
    }
    core::write_text_atomic(out_ / "table3.md", s);
    core::write_text_atomic(out_ / "table3.json", rows.dump(2) + "\n");
  }

  static std::int64_t p_dense(const model::Model& m) {
    std::int64_t n = 0;
    for (int i = 0; i < m.num_layers(); ++i)
      for (const auto& lin : m.layer(i).linears) n += lin.out * lin.in;
    return n;
  }

  // Figure 4 analogue: perplexity vs ratio per method, log y, one PNG per dataset (gnuplot).
  void plot() const {
    for (const auto& d : datasets_) {
      std::map<std::string, std::vector<std::pair<double, double>>> series;
      double dense = 0;
      for (const auto& r : runs_) {
        if (r.method == "dense") dense = r.ppl.at(d.name);
        else series[r.method].push_back({100 * r.ratio, r.ppl.at(d.name)});
      }
      std::string gp = fmt::format(
          "set terminal pngcairo size 800,560 noenhanced\nset output '{}'\nset logscale y\nset grid\n"
          "set key top left\nset xlabel 'compression ratio (%)'\nset ylabel 'perplexity ({})'\n"
          "set title '{}'\nplot {} title 'dense' with lines dashtype 2 lc rgb 'black'",
          (out_ / ("ppl_" + d.name + ".png")).string(), d.name, model_label(a_.model), dense);
      std::string data;
      for (const auto& [method, pts] : series) {
        gp += fmt::format(", '-' using 1:2 with linespoints title '{}'", method);
        for (const auto& [x, y] : pts) data += fmt::format("{} {}\n", x, y);
        data += "e\n";
      }
      const fs::path script = out_ / ("ppl_" + d.name + ".gp");
      core::write_text_atomic(script, gp + "\n" + data);
      run_gnuplot(script);
    }
  }

  static void run_gnuplot(const fs::path& script) {
    const std::string path = script.string();
    char* argv[] = {const_cast<char*>("gnuplot"), const_cast<char*>(path.c_str()), nullptr};
    pid_t pid = 0;
    int status = 0;
    if (posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ) != 0 || waitpid(pid, &status, 0) < 0 ||
        !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      log_warn("sweep: gnuplot failed on {}: no PNG written (scripts/setup installs gnuplot-nox)", path);
    }
  }

  void print_table() const {
    if (a_.json) {
      std::printf("%s\n", results_json().dump(2).c_str());
      return;
    }
    std::printf("%s\nwrote %s/{results.csv,results.json,table2.md,table3.md,ppl_*.png}\n", table2().c_str(),
                out_.string().c_str());
  }

  const SweepArgs& a_;
  fs::path out_;
  std::vector<DatasetSpec> datasets_;
  std::unique_ptr<io::Tokenizer> tok_;
  calib::CalibOptions co_;
  std::vector<std::int32_t> ids_;
  std::vector<Run> runs_;
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
  sub->add_option("--data-dir", a->data_dir, "Folder of the standard evaluation files")->capture_default_str()->group("Evaluation");
  sub->add_option("--eval-seqlen", a->eval_seqlen, "Evaluation window (0 = min(2048, max positions))")
      ->capture_default_str()->group("Evaluation");
  sub->add_option("--max-windows", a->max_windows, "Evaluate only the first K windows (0 = all)")
      ->capture_default_str()->group("Evaluation");
  sub->add_option("--threads", a->threads, "Threads of the forward pass and BLAS (0 = all cores)")
      ->capture_default_str()->group("Run");
  sub->add_flag("--json", a->json, "Print the results as JSON")->group("Run");
  return {sub, [a] { return Sweep(*a).run(); }};
}

}  // namespace latentllm::cli
