#include "sweep_report.hpp"

#include <algorithm>
#include <spawn.h>
#include <sys/wait.h>

#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "latentllm/eval.hpp"
#include "latentllm/files.hpp"
#include "latentllm/log.hpp"
#include "latentllm/resources.hpp"

extern char** environ;

namespace latentllm::cli {
namespace {

namespace fs = std::filesystem;

nlohmann::json nan_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

// Mean joint/local loss over the layers that have both (the local loss of Q-K and V-O only with
// --diagnostics); NaN when none has.
double mean_ratio(const std::vector<compress::JointLoss>& losses) {
  double s = 0;
  int n = 0;
  for (const auto& l : losses)
    if (l.local > 0) s += l.joint / l.local, ++n;
  return n ? s / n : std::numeric_limits<double>::quiet_NaN();
}

// Whether gnuplot ran `script` (a warning otherwise).
bool run_gnuplot(const fs::path& script) {
  const std::string path = script.string();
  char* argv[] = {const_cast<char*>("gnuplot"), const_cast<char*>(path.c_str()), nullptr};
  pid_t pid = 0;
  int status = 0;
  if (posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ) != 0 || waitpid(pid, &status, 0) < 0 ||
      !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    log_warn("sweep: gnuplot failed on {}: no PNG written (scripts/setup installs gnuplot-nox)", path);
    return false;
  }
  return true;
}

// Writes `name`.gp into `out`, runs it, and adds to `written` the script and its PNG when gnuplot made it.
void write_plot(const fs::path& out, const std::string& name, const std::string& script,
                std::vector<std::string>& written) {
  core::write_text_atomic(out / (name + ".gp"), script);
  written.push_back(name + ".gp");
  std::error_code ec;
  if (run_gnuplot(out / (name + ".gp")) && fs::is_regular_file(out / (name + ".png"), ec)) {
    written.push_back(name + ".png");
  }
}

}  // namespace

std::int64_t dense_linear_params(const model::Model& m) {
  std::int64_t n = 0;
  for (int i = 0; i < m.num_layers(); ++i)
    for (const auto& lin : m.layer(i).linears) n += lin.out * lin.in;
  return n;
}

void summarize(const compress::CompressReport& rep, SweepRun& r) {
  r.compress_s = rep.total_s;
  r.params = rep.params;
  r.dense_params = rep.dense_params;
  r.qk_loss_ratio = mean_ratio(rep.qk_losses);
  r.ud_loss_ratio = mean_ratio(rep.ud_losses);
  double s = 0;
  int n = 0;
  for (const auto& m : rep.modules)
    if (m.how != "joint-ud") s += m.loss_rel, ++n;
  r.output_error = n ? s / n : 0.0;
}

namespace {

// A row's grid point: the ratio, or the budget of a sweep --bpw run.
std::string grid_cell(const SweepRun& r) {
  if (r.method == "dense") return "0%";
  return r.budget > 0 ? fmt::format("{:g} bpw", r.budget) : fmt::format("{:.0f}%", 100 * r.ratio);
}

}  // namespace

bool SweepResults::budgets() const {
  return std::any_of(runs.begin(), runs.end(), [](const SweepRun& r) { return r.budget > 0; });
}

nlohmann::json SweepResults::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : runs) {
    rows.push_back({{"method", r.method}, {"ratio", r.ratio}, {"ppl", r.ppl}, {"model_params", r.model_params},
                    {"params", r.params}, {"dense_params", r.dense_params}, {"compress_seconds", r.compress_s},
                    {"eval_seconds", r.eval_s}, {"qk_joint_over_local", nan_null(r.qk_loss_ratio)},
                    {"ud_joint_over_local", nan_null(r.ud_loss_ratio)},
                    {"mean_relative_output_error", r.output_error}, {"options", r.options}});
    if (r.budget > 0) rows.back()["budget_bits_per_weight"] = r.budget;
    if (r.bits_per_weight > 0) rows.back()["bits_per_weight"] = r.bits_per_weight;
    for (const auto& [task, m] : r.mc) {
      rows.back()["mc"][task] = {{"items", m.items}, {"acc", m.acc}, {"acc_stderr", nan_null(m.acc_stderr)},
                                 {"acc_norm", m.acc_norm}, {"acc_norm_stderr", nan_null(m.acc_norm_stderr)}};
    }
    if (!r.accuracy.empty()) {
      rows.back()["accuracy_percent"] = r.accuracy;
      rows.back()["predictions"] = r.predictions;
    }
  }
  nlohmann::json j = info;
  j["model"] = model;
  j["runs"] = rows;
  j["peak_rss_bytes"] = core::peak_rss_bytes();
  return j;
}

std::string SweepResults::table2() const {
  std::string s = fmt::format("# {} of {} (calibration: {})\n\n",
                              mc_tasks.empty() ? "Perplexity" : datasets.empty() ? "Zero-shot accuracy"
                                                                                 : "Perplexity and zero-shot accuracy",
                              label, calibration_title);
  const bool bpw = budgets();
  s += bpw ? "| budget | method | bits per weight |" : "| ratio | method |";
  for (const auto& d : datasets) s += " " + d + " |";
  for (const auto& t : mc_tasks) s += " " + t + " acc | " + t + " acc_norm |";
  s += bpw ? " params | rel. output error | compress s |\n|---:|---|---:|" : " params | rel. output error | compress s |\n|---:|---|";
  for (std::size_t i = 0; i < datasets.size() + 2 * mc_tasks.size(); ++i) s += "---:|";
  s += "---:|---:|---:|\n";
  for (const auto& r : runs) {
    s += fmt::format("| {} | {} |", grid_cell(r), r.method);
    if (bpw) s += fmt::format(" {:.3f} |", r.method == "dense" ? 16.0 : r.bits_per_weight);
    for (const auto& d : datasets) {
      const auto it = r.ppl.find(d);
      s += it == r.ppl.end() ? " |" : fmt::format(" {:.2f} |", it->second);
    }
    for (const auto& t : mc_tasks) {
      const auto it = r.mc.find(t);
      s += it == r.mc.end() ? " | |"
                            : fmt::format(" {:.4f} ± {:.4f} | {:.4f} ± {:.4f} |", it->second.acc, it->second.acc_stderr,
                                          it->second.acc_norm, it->second.acc_norm_stderr);
    }
    s += fmt::format(" {} | {:.4f} | {:.1f} |\n", r.model_params, r.output_error, r.compress_s);
  }
  s += "\nrel. output error: mean over the modules compressed one at a time (all but joint up-down) of "
       "‖(W − Ŵ)X‖²/‖WX‖² on the calibration tokens, the loss the pre-conditioners minimize.\n";
  if (!mc_tasks.empty()) {
    s += "\nacc, acc_norm: zero-shot multiple choice by lm-eval's protocol (`eval --task mc`), ± the standard error "
         "of the mean; acc_norm divides each choice's log-likelihood by its length in characters.\n";
  }
  return s;
}

std::string SweepResults::table4() const {
  static const std::vector<std::string> kCols = {"NAT", "SOC", "LAN", "TXT", "IMG", "NO", "G1-6", "G7-12", "AVG"};
  std::string s = fmt::format("# ScienceQA accuracy (%) of {} (calibration: {})\n\n| ratio | method |", label,
                              calibration_title);
  for (const auto& c : kCols) s += " " + (c == "AVG" ? std::string("Avg") : c) + " |";
  s += "\n|---:|---|";
  for (std::size_t i = 0; i < kCols.size(); ++i) s += "---:|";
  s += "\n";
  for (const auto& r : runs) {
    s += fmt::format("| {} | {} |", grid_cell(r), r.method);
    for (const auto& c : kCols) {
      const auto it = r.accuracy.find(c);
      s += it == r.accuracy.end() ? " |" : fmt::format(" {:.2f} |", it->second);
    }
    s += "\n";
  }
  return s;
}

void write_results(const fs::path& out, const SweepResults& r) {
  const bool bpw = r.budgets();  // a budget grid adds its two columns
  std::string csv = std::string("method,ratio,") + (bpw ? "budget,bits_per_weight," : "") +
                    "dataset,ppl,model_params,params,dense_params,compress_s,eval_s\n";
  for (const auto& run : r.runs)
    for (const auto& [d, p] : run.ppl)
      csv += fmt::format("{},{:.2f},{}{},{:.6f},{},{},{},{:.2f},{:.2f}\n", run.method, run.ratio,
                         bpw ? fmt::format("{:g},{:.4f},", run.budget, run.method == "dense" ? 16.0 : run.bits_per_weight) : "",
                         d, p, run.model_params, run.params, run.dense_params, run.compress_s, run.eval_s);
  core::write_text_atomic(out / "results.csv", csv);
  if (!r.mc_tasks.empty()) {
    std::string mc = std::string("method,ratio,") + (bpw ? "budget,bits_per_weight," : "") +
                     "task,items,acc,acc_stderr,acc_norm,acc_norm_stderr\n";
    for (const auto& run : r.runs)
      for (const auto& [task, m] : run.mc)
        mc += fmt::format("{},{:.2f},{}{},{},{:.6f},{:.6f},{:.6f},{:.6f}\n", run.method, run.ratio,
                          bpw ? fmt::format("{:g},{:.4f},", run.budget, run.method == "dense" ? 16.0 : run.bits_per_weight) : "",
                          task, m.items, m.acc, m.acc_stderr, m.acc_norm, m.acc_norm_stderr);
    core::write_text_atomic(out / "mc.csv", mc);
  }
  core::write_text_atomic(out / "results.json", r.to_json().dump(2) + "\n");
  core::write_text_atomic(out / "table2.md", r.table2());
  if (r.multimodal) core::write_text_atomic(out / "table4.md", r.table4());
  // Table 3 as the runs ran: each run's own plan (global ranks differ by method), not only the planned ratios.
  std::string t3 = r.table3 + "\n## As run\n\nEach run's rank plan (global allocation spreads the same budget "
                   "differently per method).\n\n| ratio | method | params | linear params | MACs | FLOPs |\n"
                   "|---:|---|---:|---:|---:|---:|\n";
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& run : r.runs) {
    if (run.macs == 0) continue;
    t3 += fmt::format("| {} | {} | {} | {} | {:.4g} | {:.4g} |\n", grid_cell(run), run.method, run.model_params,
                      run.params, static_cast<double>(run.macs), 2.0 * static_cast<double>(run.macs));
    runs.push_back({{"ratio", run.ratio}, {"method", run.method}, {"params", run.model_params},
                    {"linear_params", run.params}, {"macs", run.macs}, {"flops", 2 * run.macs}});
  }
  core::write_text_atomic(out / "table3.md", t3);
  core::write_text_atomic(out / "table3.json", nlohmann::json{{"planned", r.table3_rows}, {"runs", runs}}.dump(2) + "\n");
}

void write_table3(SweepResults& res, const model::Model& m, const std::vector<double>& ratios,
                  const compress::CompressOptions& base) {
  const std::string& label = res.label;
  const std::int64_t n_tok = 128, dense_lin = dense_linear_params(m);
  const std::int64_t other = eval::forward_macs(m, n_tok) - dense_lin * n_tok;  // LM head, attention products
  const std::int64_t total = eval::num_params(m);
  std::string s = fmt::format("# Parameters, FLOPs and MACs of {} at {} tokens\n\n"
                              "Compressed linear modules from the rank plan; MACs add the LM head and the attention "
                              "products (Q·Kᵀ, A·V over the full {}-token square, as calflops counts). FLOPs = 2·MACs.\n\n"
                              "| ratio | junction | params | linear params | MACs | FLOPs |\n|---:|---|---:|---:|---:|---:|\n",
                              label, n_tok, n_tok);
  nlohmann::json rows = nlohmann::json::array();
  auto row = [&](double ratio, const compress::RankPlan* p, const std::string& j) {
    const std::int64_t lin = p ? p->params() : dense_lin;
    const std::int64_t params = total - dense_lin + lin;
    const std::int64_t macs = (p ? p->macs() : dense_lin * n_tok) + other;
    s += fmt::format("| {:.0f}% | {} | {} | {} | {:.4g} | {:.4g} |\n", 100 * ratio, j, params, lin,
                     static_cast<double>(macs), 2.0 * static_cast<double>(macs));
    rows.push_back({{"ratio", ratio}, {"junction", j}, {"params", params}, {"linear_params", lin}, {"macs", macs},
                    {"flops", 2 * macs}});
  };
  row(0, nullptr, "dense");
  for (double ratio : ratios) {
    for (auto j : {compress::Junction::BlockIdentity, compress::Junction::Identity}) {
      compress::CompressOptions opt = base;
      opt.ratio = ratio;
      opt.local.junction = j;
      const auto plan = compress::plan_model(m, opt, n_tok);
      row(ratio, &plan, std::string(compress::junction_name(j)));
    }
  }
  res.table3 = s;
  res.table3_rows = rows;
  res.other_macs = other;
}

// The paper's radar figure (Table 4): per ratio, one polygon per method over the eight categories, the
// dense model's dashed (gnuplot's spiderplot).
void plot_radar(const fs::path& out, const SweepResults& r, std::vector<std::string>& written) {
  static const std::vector<std::string> kAxes = {"NAT", "SOC", "LAN", "TXT", "IMG", "NO", "G1-6", "G7-12"};
  const SweepRun* dense = nullptr;
  std::map<double, std::vector<const SweepRun*>> by_ratio;
  for (const auto& run : r.runs) {
    if (run.accuracy.empty()) continue;
    if (run.method == "dense") dense = &run;
    else by_ratio[run.ratio].push_back(&run);
  }
  for (const auto& [ratio, runs] : by_ratio) {
    std::vector<const SweepRun*> all = runs;
    if (dense) all.insert(all.begin(), dense);
    const std::string name = fmt::format("radar_{:.0f}", 100 * ratio);
    std::string gp = fmt::format(
        "set terminal pngcairo size 720,640 noenhanced\nset output '{}'\nset spiderplot\n"
        "set style spiderplot fillstyle transparent solid 0.08 border linewidth 2\nset grid spiderplot\n"
        "set for [p=1:8] paxis p range [0:100]\nset for [p=2:8] paxis p tics format \"\"\nset paxis 1 tics\n"
        "array Axes[8] = [\"NAT\",\"SOC\",\"LAN\",\"TXT\",\"IMG\",\"NO\",\"G1-6\",\"G7-12\"]\n"
        "set for [p=1:8] paxis p label Axes[p]\nset key outside right top\n"
        "set tmargin 5\nset lmargin 10\nset title '{}: ScienceQA accuracy (%) at {:.0f} %' offset 0,2\n$DATA << EOD\n",
        (out / (name + ".png")).string(), r.label, 100 * ratio);
    for (const SweepRun* run : all) {
      gp += run->method;
      for (const auto& axis : kAxes) gp += fmt::format(" {:.2f}", run->accuracy.at(axis));
      gp += "\n";
    }
    gp += "EOD\nplot for [i=2:9] $DATA using i:key(1)\n";
    write_plot(out, name, gp, written);
  }
}

std::vector<std::string> result_files(const SweepResults& r) {
  std::vector<std::string> names = {"results.csv", "results.json", "table2.md"};
  if (!r.mc_tasks.empty()) names.push_back("mc.csv");
  if (r.multimodal) names.push_back("table4.md");
  names.insert(names.end(), {"table3.md", "table3.json"});
  return names;
}

namespace {

// One quality measure against the grid: a line per method, the dense model's dashed; a budget grid plots
// quality per byte (against the bits per weight each run stored). `value` reads a run's measure.
void plot_measure(const fs::path& out, const SweepResults& r, const std::string& name, const std::string& ylabel,
                  bool log_y, const std::function<double(const SweepRun&)>& value, std::vector<std::string>& written) {
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  double dense = 0;
  for (const auto& run : r.runs) {
    if (run.method == "dense") dense = value(run);
    else series[run.method].push_back({r.budgets() ? run.bits_per_weight : 100 * run.ratio, value(run)});
  }
  // Perplexity falls and accuracy rises with bytes: the key goes where the curves leave room.
  const bool key_right = r.budgets() == log_y;
  std::string gp = fmt::format(
      "set terminal pngcairo size 800,560 noenhanced\nset output '{}'\n{}set grid\n"
      "set key top {}\nset xlabel '{}'\nset ylabel '{}'\n"
      "set title '{}'\nplot {} title 'dense' with lines dashtype 2 lc rgb 'black'",
      (out / (name + ".png")).string(), log_y ? "set logscale y\n" : "", key_right ? "right" : "left",
      r.budgets() ? "bits per weight of the compressed modules" : "compression ratio (%)", ylabel, r.label, dense);
  std::string data;
  for (const auto& [method, pts] : series) {
    gp += fmt::format(", '-' using 1:2 with linespoints title '{}'", method);
    for (const auto& [x, y] : pts) data += fmt::format("{} {}\n", x, y);
    data += "e\n";
  }
  write_plot(out, name, gp + "\n" + data, written);
}

}  // namespace

std::vector<std::string> plot(const fs::path& out, const SweepResults& r) {
  std::vector<std::string> written;
  if (r.multimodal) plot_radar(out, r, written);
  for (const auto& d : r.datasets) {
    plot_measure(out, r, "ppl_" + d, "perplexity (" + d + ")", true,
                 [&](const SweepRun& run) { return run.ppl.at(d); }, written);
  }
  for (const auto& t : r.mc_tasks) {
    plot_measure(out, r, "mc_" + t, "acc_norm (" + t + ")", false,
                 [&](const SweepRun& run) { return run.mc.at(t).acc_norm; }, written);
  }
  return written;
}

}  // namespace latentllm::cli
