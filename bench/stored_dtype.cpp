// Decode speed with the weights as stored (F16/BF16, widened inside the kernels) against float32
// weights (model::LoadOptions::Weights), against the roofline of this machine's memory bandwidth on
// the bytes each form actually reads per token, both measured in the same process. Writes
// <out>.json and <out>.md.
//
//   stored_dtype --model DIR [--weights f32,stored[,stored-mapped]] [--runs 3] [--tokens 32] [--prompt 16]
//                [--out bench/results/decode/stored-dtype-NAME] [--name NAME]
//
// Forms: f32 (widened at load), stored (16-bit copies in huge pages, as generate loads) and
// stored-mapped (16-bit views of the mapped checkpoint, LoadOptions::huge_pages off).
// Each run loads the model in each form in turn (so the forms alternate: f32, stored, f32, ...),
// prefills a prompt of random ids and times `tokens` one-token decoding steps over a dense KV cache
// (latent checkpoints: the cache generate's auto mode picks); the median step of a run counts, and the
// median of the runs is reported. Bytes read per token: every decoder-layer weight once at its held
// size (float32: 4 bytes, stored: 2), the LM head at its held size, and the KV cache at the context
// reached. The memory bandwidth (bench_common.hpp) is measured before the first and after the last
// run; the roofline uses the larger. Only one model is in memory at a time.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "core/gemm16.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/resources.hpp"

namespace {

using namespace latentllm;
using bench::arg;
using bench::Clock;
using bench::seconds_since;

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const std::size_t h = t.size() / 2;
  return t.empty() ? 0.0 : t.size() % 2 ? t[h] : 0.5 * (t[h - 1] + t[h]);
}

struct RunResult {
  double load_s = 0, step_s = 0;
  double bytes_per_token = 0;
};

struct Form {
  std::string name;  // "f32", "stored", "stored-mapped"
  model::LoadOptions::Weights weights;
  bool huge_pages;
};

Form parse_form(const std::string& s) {
  if (s == "stored-mapped") return {s, model::LoadOptions::Weights::Stored, false};
  return {s, model::parse_weights(s), true};
}

RunResult run(const std::string& dir, const Form& form, int prompt, int tokens) {
  RunResult r;
  const model::LoadOptions::Weights w = form.weights;
  auto t0 = Clock::now();
  const auto m = model::Model::load(dir, {.weights = w, .huge_pages = form.huge_pages});
  r.load_s = seconds_since(t0);
  const model::ModelConfig& c = m->config();
  model::KvCache cache(*m, prompt + tokens + 1, model::KvCacheMode::Auto);
  std::mt19937 rng(1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(prompt));
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(c.vocab_size));
  MatrixF logits;
  m->forward_cached(ids, cache, logits, /*last_only=*/true);
  std::vector<double> steps;
  std::int32_t id = 3;
  for (int s = 0; s < tokens; ++s) {
    t0 = Clock::now();
    m->forward_cached(std::span<const std::int32_t>(&id, 1), cache, logits);
    steps.push_back(seconds_since(t0));
    id = static_cast<std::int32_t>((id * 7919 + 13) % c.vocab_size);
  }
  r.step_s = median(steps);
  const model::WeightFootprint& f = m->footprint();
  const double p = static_cast<double>(c.word_embed_proj_dim > 0 ? c.word_embed_proj_dim : c.hidden_size);
  const double head_bytes = w == model::LoadOptions::Weights::Stored && f.tables > 0
                                ? static_cast<double>(f.largest_table_stored)
                                : 4.0 * static_cast<double>(c.vocab_size) * p;
  r.bytes_per_token = static_cast<double>(f.all_layers()) + head_bytes + static_cast<double>(cache.bytes());
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  bench::check_args(argc, argv, {"--model", "--weights", "--runs", "--tokens", "--prompt", "--out", "--name"},
                    "bench/stored_dtype.cpp");
  set_log_callback([](LogLevel, std::string_view) {});
  const std::string dir = arg(argc, argv, "--model", "");
  const std::string name = arg(argc, argv, "--name", std::filesystem::path(dir).filename().string());
  const std::string out = arg(argc, argv, "--out", "bench/results/decode/stored-dtype-" + name);
  const int runs = std::stoi(arg(argc, argv, "--runs", "3"));
  const int tokens = std::stoi(arg(argc, argv, "--tokens", "32"));
  const int prompt = std::stoi(arg(argc, argv, "--prompt", "16"));
  std::vector<Form> forms;
  {
    std::stringstream ss(arg(argc, argv, "--weights", "f32,stored"));
    for (std::string t; std::getline(ss, t, ',');) forms.push_back(parse_form(t));
  }
  nlohmann::json doc;
  doc["model"] = dir;
  doc["isa"] = core::isa_name(core::kernel_isa());
  doc["threads"] = core::num_threads();
  doc["load_average_start"] = bench::load_average();
  nlohmann::json peak_detail, bw_detail;
  const double peak = bench::sgemm_peak_gflops(peak_detail);
  double bw = bench::memory_bandwidth_gbs(bw_detail);
  doc["sgemm_peak_gflops"] = peak;
  doc["bandwidth_start"] = bw_detail;
  std::vector<std::vector<RunResult>> results(forms.size());
  for (int r = 0; r < runs; ++r) {
    for (std::size_t k = 0; k < forms.size(); ++k) {
      results[k].push_back(run(dir, forms[k], prompt, tokens));
      std::fprintf(stderr, "run %d %s: %.2f tok/s (load %.1f s)\n", r + 1, forms[k].name.c_str(),
                   1.0 / results[k].back().step_s,
                   results[k].back().load_s);
    }
  }
  nlohmann::json bw_end;
  bw = std::max(bw, bench::memory_bandwidth_gbs(bw_end));
  doc["bandwidth_end"] = bw_end;
  doc["bandwidth_gb_per_s"] = bw;
  doc["load_average_end"] = bench::load_average();
  doc["peak_rss_bytes"] = core::peak_rss_bytes();

  std::string md = fmt::format(
      "# Decode with stored 16-bit weights vs float32: {}\n\n{} runs alternating the forms, each a {}-token prompt "
      "then {} decoding steps (median step per run, median of the runs). sgemm peak {:.1f} GFLOP/s, memory "
      "bandwidth {:.1f} GB/s (best of bench_common's reads, before and after), kernels {}, {} threads, load "
      "average {:.2f} at start and {:.2f} at end.\n\n"
      "| weights | decode tok/s (runs) | median tok/s | bytes read / token | roofline tok/s | of roofline | load s |\n"
      "|---|---|---:|---:|---:|---:|---:|\n",
      name, runs, prompt, tokens, peak, bw, doc["isa"].get<std::string>(), doc["threads"].get<int>(),
      doc["load_average_start"].get<double>(), doc["load_average_end"].get<double>());
  std::vector<double> medians;
  for (std::size_t k = 0; k < forms.size(); ++k) {
    std::vector<double> rates, loads;
    std::string list;
    for (const RunResult& r : results[k]) {
      rates.push_back(1.0 / r.step_s);
      loads.push_back(r.load_s);
      list += fmt::format("{}{:.2f}", list.empty() ? "" : ", ", 1.0 / r.step_s);
    }
    const double rate = median(rates), bytes = results[k].front().bytes_per_token;
    const double roof = bw * 1e9 / bytes;
    medians.push_back(rate);
    md += fmt::format("| {} | {} | {:.2f} | {:.3f} GB | {:.2f} | {:.0f} % | {:.1f} |\n", forms[k].name,
                      list, rate, bytes / 1e9, roof, 100.0 * rate / roof, median(loads));
    doc["forms"].push_back({{"weights", forms[k].name}, {"tokens_per_s", rates},
                            {"median_tokens_per_s", rate}, {"bytes_per_token", bytes}, {"roofline_tokens_per_s", roof},
                            {"roofline_fraction", rate / roof}, {"load_seconds", loads}});
  }
  if (forms.size() == 2) {
    md += fmt::format("\n{} / {}: {:.2f}x\n", forms[1].name, forms[0].name, medians[1] / medians[0]);
    doc["speedup"] = medians[1] / medians[0];
  }
  std::ofstream(out + ".json") << doc.dump(2) << "\n";
  std::ofstream(out + ".md") << md;
  std::fputs(md.c_str(), stdout);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "stored_dtype: %s\n", e.what());
  return 1;
}
