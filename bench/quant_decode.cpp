// Decode speed of a quantized latent model (4-bit factors, 8-bit LM head: compress --bits 4 --head-bits 8)
// against the same latent model with 16-bit factors and head, and the dense 16-bit model, all with their
// weights as stored (LoadOptions::Weights::Stored, huge pages, as generate loads them), timed step by
// step interleaved in one process; each against the roofline of the bytes it reads per token at the
// memory bandwidth measured beside it. Writes <out>.json and <out>.md.
//
//   quant_decode --model DIR --work DIR [--ratio 0.4] [--bits 4] [--head-bits 8] [--group 128]
//                [--contexts 128,512] [--steps 16] [--out bench/results/decode/NAME-q4] [--name NAME]
//
// DIR is a 16-bit dense checkpoint (a random-weight one from latentllm-synth). The latent versions are
// random factors at latentllm's planned ranks (bench/random_latent.hpp: speed only), written under
// --work as latent checkpoints in the model's 16-bit type: once as they are, once with B and A quantized
// by round to nearest (q bits, groups of G) and the head by model::quantize_table. Each decode at context
// C fills the cache with C − steps − 2 random positions, runs 2 untimed steps and `steps` timed ones per
// arm, the arms taking turns step by step; the median step counts (bench/decode.cpp's protocol). Then
// each model alone under model::set_profiling at the last context: the split of a step's time.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "core/gemm16.hpp"
#include "random_latent.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/resources.hpp"
#include "model/weight_table.hpp"
#include "quant/pack.hpp"

namespace {

using namespace latentllm;
using bench::arg;
using bench::Clock;
using bench::seconds_since;
namespace fs = std::filesystem;

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const std::size_t h = t.size() / 2;
  return t.empty() ? 0.0 : t.size() % 2 ? t[h] : 0.5 * (t[h - 1] + t[h]);
}

// Bytes of a matrix as held: packed codes, scales and zero points; 2 per 16-bit value; 4 per float.
std::int64_t held_bytes(const model::Weight& w) {
  if (const auto& q = w.packed()) return quant::packed_bytes(q->rows, q->cols, q->spec());
  if (w.half() != nullptr) return 2 * w.rows() * w.cols();
  return 4 * w.rows() * w.cols();
}

// Bytes a one-token forward reads from the weights: every decoder-layer matrix as held (and its bias,
// block-identity indices, the norms in float32) and the LM head as held; one embedding row is noise.
std::int64_t weight_bytes_per_token(const model::Model& m) {
  std::int64_t b = 0;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (const auto& l : m.layer(i).linears) {
      b += held_bytes(l.weight) + held_bytes(l.B) + held_bytes(l.A) + 4 * l.bias.size() +
           4 * static_cast<std::int64_t>(l.perm.size());
    }
    for (const auto& [name, v] : m.layer(i).norms) b += 4 * v.size();
  }
  const model::WeightTable& h = m.head_weight();
  if (const quant::PackedMatrix* q = h.packed()) return b + quant::packed_bytes(q->rows, q->cols, q->spec());
  return b + (h.view16() ? 2 : 4) * h.size();
}

// A matrix quantized by round to nearest on each group's min–max grid and packed.
model::Weight quantized(const model::Weight& w, const quant::QuantSpec& spec) {
  const MatrixD d = w.f32().cast<double>();
  return std::make_shared<const quant::PackedMatrix>(quant::pack(quant::rtn(d, spec, "bench")));
}

// The two latent checkpoints under `work` (16-bit factors; quantized factors and head), written once.
void write_latents(const std::string& dir, const fs::path& lat16, const fs::path& latq, double ratio,
                   const quant::QuantSpec& factors, const quant::QuantSpec& head, DType dtype) {
  if (fs::exists(lat16 / "config.json") && fs::exists(latq / "config.json")) return;
  auto m = model::Model::load(dir);  // float32, eager
  bench::randomize_latent(*m, ratio, 7);
  checkpoint::SaveOptions so;
  so.dtype = dtype;
  so.overwrite = true;
  checkpoint::save(*m, lat16, so);
  for (int i = 0; i < m->num_layers(); ++i)
    for (auto& l : m->layer(i).linears) {
      if (!l.factored()) continue;
      l.B = quantized(l.B, factors);
      l.A = quantized(l.A, factors);
    }
  so.head = model::quantize_table(m->head_weight(), head, "lm_head");
  checkpoint::save(*m, latq, so);
}

void fill_cache(model::KvCache& cache, int layers, int n) {
  for (int i = 0; i < layers; ++i) {
    auto& l = cache.layer(i);
    l.k.topRows(n) = MatrixF::Random(n, l.k.cols()) * 0.5f;
    l.v.topRows(n) = MatrixF::Random(n, l.v.cols()) * 0.5f;
  }
  cache.advance(n);
}

// Median seconds per step of each model at context C, the models taking turns step by step.
std::vector<double> decode_seconds(const std::vector<const model::Model*>& ms, int C, int steps) {
  std::vector<std::unique_ptr<model::KvCache>> caches;
  MatrixF logits;
  std::int32_t id = 3;
  for (const model::Model* m : ms) {
    caches.push_back(std::make_unique<model::KvCache>(*m, C, model::KvCacheMode::Auto));
    fill_cache(*caches.back(), m->num_layers(), C - steps - 2);
    for (int w = 0; w < 2; ++w) m->forward_cached(std::span<const std::int32_t>(&id, 1), *caches.back(), logits);
  }
  std::vector<std::vector<double>> t(ms.size());
  for (int s = 0; s < steps; ++s) {
    for (std::size_t k = 0; k < ms.size(); ++k) {
      const auto t0 = Clock::now();
      ms[k]->forward_cached(std::span<const std::int32_t>(&id, 1), *caches[k], logits);
      t[k].push_back(seconds_since(t0));
    }
    id = static_cast<std::int32_t>((id * 7919 + 13) % 500);
  }
  std::vector<double> med;
  for (auto& v : t) med.push_back(median(v));
  return med;
}

// Where a decode step's time goes (model::ForwardProfile) at context C: `steps` steps of m alone after
// the interleaved timing, per step: the decoder layers' matrices, the LM head, attention and the rest;
// the matrices' and the head's bytes over their seconds as a fraction of the bandwidth.
nlohmann::json split(const model::Model& m, int C, int steps, double bw) {
  model::KvCache cache(m, C, model::KvCacheMode::Auto);
  fill_cache(cache, m.num_layers(), C - steps - 2);
  MatrixF logits;
  std::int32_t id = 3;
  m.forward_cached(std::span<const std::int32_t>(&id, 1), cache, logits);
  model::set_profiling(true);
  model::reset_forward_profile();
  for (int s = 0; s < steps; ++s) m.forward_cached(std::span<const std::int32_t>(&id, 1), cache, logits);
  const model::ForwardProfile p = model::forward_profile();
  model::set_profiling(false);
  const model::WeightTable& h = m.head_weight();
  const double head_bytes = h.packed() ? static_cast<double>(quant::packed_bytes(h.rows(), h.cols(), h.packed()->spec()))
                                       : (h.view16() ? 2.0 : 4.0) * static_cast<double>(h.size());
  const double layer_bytes = static_cast<double>(weight_bytes_per_token(m)) - head_bytes;
  const double n = steps;
  return {{"linear_s", p.linear_s / n}, {"head_s", p.head_s / n}, {"attention_s", p.attention_s / n},
          {"other_s", p.other_s / n}, {"linear_fraction_of_bandwidth", layer_bytes / (p.linear_s / n) / 1e9 / bw},
          {"head_fraction_of_bandwidth", head_bytes / (p.head_s / n) / 1e9 / bw}};
}

}  // namespace

int main(int argc, char** argv) try {
  bench::check_args(argc, argv, {"--model", "--work", "--ratio", "--bits", "--head-bits", "--group", "--contexts",
                                 "--steps", "--out", "--name"},
                    "bench/quant_decode.cpp");
  core::reuse_large_allocations();
  set_log_callback([](LogLevel, std::string_view) {});
  const std::string dir = arg(argc, argv, "--model", "");
  const fs::path work = arg(argc, argv, "--work", "");
  const std::string name = arg(argc, argv, "--name", fs::path(dir).filename().string());
  const std::string out = arg(argc, argv, "--out", "bench/results/decode/" + name + "-q4");
  const double ratio = std::stod(arg(argc, argv, "--ratio", "0.4"));
  const int bits = std::stoi(arg(argc, argv, "--bits", "4"));
  const int head_bits = std::stoi(arg(argc, argv, "--head-bits", "8"));
  const int group = std::stoi(arg(argc, argv, "--group", "128"));
  const int steps = std::stoi(arg(argc, argv, "--steps", "16"));
  std::vector<int> contexts;
  {
    std::stringstream ss(arg(argc, argv, "--contexts", "128,512"));
    for (std::string c; std::getline(ss, c, ',');) contexts.push_back(std::stoi(c));
  }
  if (dir.empty() || work.empty()) throw std::runtime_error("--model and --work are required");

  const double load_before = bench::load_average();
  const auto dense_cfg = model::load_config(fs::path(dir) / "config.json");
  const DType dtype = dense_cfg.torch_dtype == "float16" ? DType::F16 : DType::BF16;
  const fs::path lat16 = work / fmt::format("{}-latent{}", name, static_cast<int>(ratio * 100));
  const fs::path latq = work / fmt::format("{}-latent{}-q{}-h{}-g{}", name, static_cast<int>(ratio * 100), bits,
                                           head_bits, group);
  const auto tw = Clock::now();
  write_latents(dir, lat16, latq, ratio, {bits, group, quant::Grid::MinMax}, {head_bits, group, quant::Grid::MinMax},
                dtype);
  std::fprintf(stderr, "latent checkpoints ready (%.0f s)\n", seconds_since(tw));

  nlohmann::json bw_detail, peak_detail;
  const double bw = bench::memory_bandwidth_gbs(bw_detail);
  const double peak = bench::sgemm_peak_gflops(peak_detail);
  std::fprintf(stderr, "read bandwidth %.1f GB/s, sgemm peak %.1f GFLOP/s\n", bw, peak);

  const model::LoadOptions stored{.weights = model::LoadOptions::Weights::Stored, .huge_pages = true};
  const auto dense = model::Model::load(dir, stored);
  const auto l16 = model::Model::load(lat16, stored);
  const auto lq = model::Model::load(latq, stored);
  const std::vector<const model::Model*> ms = {lq.get(), l16.get(), dense.get()};
  const std::vector<std::string> names = {
      fmt::format("latent {:.0f} %, {}-bit factors (g{}), {}-bit head", ratio * 100, bits, group, head_bits),
      fmt::format("latent {:.0f} %, {}", ratio * 100, dtype_name(dtype)), fmt::format("dense {}", dtype_name(dtype))};
  std::vector<std::int64_t> wbytes;
  for (const model::Model* m : ms) wbytes.push_back(weight_bytes_per_token(*m));

  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t k = 0; k < ms.size(); ++k) rows.push_back({{"variant", names[k]}, {"weight_bytes_per_token", wbytes[k]}});
  for (int C : contexts) {
    const std::vector<double> med = decode_seconds(ms, C, steps);
    for (std::size_t k = 0; k < ms.size(); ++k) {
      const model::KvCache probe(*ms[k], 1, model::KvCacheMode::Auto);
      const double bytes = static_cast<double>(wbytes[k]) + static_cast<double>(probe.bytes_per_token()) * C;
      const double roofline = bw * 1e9 / bytes;
      rows[k]["decode"][std::to_string(C)] = {
          {"tokens_per_s", 1.0 / med[k]}, {"bytes_per_token", bytes}, {"roofline_tokens_per_s", roofline},
          {"fraction_of_roofline", 1.0 / med[k] / roofline}, {"achieved_gb_per_s", bytes / med[k] / 1e9},
          {"speedup_over_latent16", med[1] / med[k]}, {"speedup_over_dense", med[2] / med[k]}};
      std::fprintf(stderr, "%s @%d: %.2f tok/s, %.0f %% of roofline, %.2fx latent 16-bit, %.2fx dense\n",
                   names[k].c_str(), C, 1.0 / med[k], 100.0 / med[k] / roofline, med[1] / med[k], med[2] / med[k]);
    }
  }
  const int C_split = contexts.back();
  for (std::size_t k = 0; k < ms.size(); ++k) {
    rows[k]["split"] = split(*ms[k], C_split, steps, bw);
    const auto& sp = rows[k]["split"];
    std::fprintf(stderr, "%s @%d split: matrices %.1f ms (%.0f %% of bandwidth), head %.1f ms (%.0f %%), attention "
                 "%.1f ms, other %.1f ms\n", names[k].c_str(), C_split, 1e3 * sp["linear_s"].get<double>(),
                 100 * sp["linear_fraction_of_bandwidth"].get<double>(), 1e3 * sp["head_s"].get<double>(),
                 100 * sp["head_fraction_of_bandwidth"].get<double>(), 1e3 * sp["attention_s"].get<double>(),
                 1e3 * sp["other_s"].get<double>());
  }
  const auto& c = dense->config();
  nlohmann::json j = {{"model", dir}, {"name", name}, {"layers", c.num_hidden_layers}, {"hidden_size", c.hidden_size},
                      {"vocab_size", c.vocab_size}, {"ratio", ratio}, {"bits", bits}, {"head_bits", head_bits},
                      {"group", group}, {"steps", steps}, {"threads", core::num_threads()},
                      {"isa", core::isa_name(core::kernel_isa())}, {"load_average_before", load_before},
                      {"load_average_after", bench::load_average()}, {"read_bandwidth_gb_per_s", bw},
                      {"bandwidth_detail", bw_detail}, {"sgemm_peak_gflops", peak}, {"variants", rows}};
  std::ofstream(out + ".json") << j.dump(2) << "\n";

  std::string md = fmt::format(
      "# Quantized decode: {}\n\nGenerated by `bench/quant_decode` (bench/quant_decode.cpp). {} layers, d {}, V {}; "
      "latent versions: random factors at latentllm's planned ranks (speed only). Weights as stored "
      "(16-bit or packed, huge pages). Threads {} ({}); load average before / after {:.2f} / {:.2f} (other jobs "
      "shared the machine). Read bandwidth {:.1f} GB/s, sgemm peak {:.1f} GFLOP/s (same process). Steps "
      "interleaved across the three models; median of {} steps.\n\n| variant | weight MB/token |",
      name, c.num_hidden_layers, c.hidden_size, c.vocab_size, core::num_threads(), core::isa_name(core::kernel_isa()),
      load_before, bench::load_average(), bw, peak, steps);
  for (int C : contexts) md += fmt::format(" @{} tok/s (% roofline) | @{} vs latent 16-bit | @{} vs dense |", C, C, C);
  md += "\n|---|---:|";
  for (std::size_t i = 0; i < contexts.size(); ++i) md += "---:|---:|---:|";
  md += "\n";
  for (const auto& r : rows) {
    md += fmt::format("| {} | {:.1f} |", r["variant"].get<std::string>(), r["weight_bytes_per_token"].get<double>() / 1e6);
    for (int C : contexts) {
      const auto& d = r["decode"][std::to_string(C)];
      md += fmt::format(" {:.2f} ({:.0f} %) | {:.2f}x | {:.2f}x |", d["tokens_per_s"].get<double>(),
                        100 * d["fraction_of_roofline"].get<double>(), d["speedup_over_latent16"].get<double>(),
                        d["speedup_over_dense"].get<double>());
    }
    md += "\n";
  }
  md += fmt::format("\nWhere a step goes at context {} (model::ForwardProfile, each model alone, {} steps after the "
                    "interleaved ones): ms per token, and the bytes of the layers' matrices and of the head over their "
                    "time as a fraction of the read bandwidth.\n\n| variant | matrices ms (% bandwidth) | head ms (% "
                    "bandwidth) | attention ms | other ms |\n|---|---:|---:|---:|---:|\n", C_split, steps);
  for (const auto& r : rows) {
    const auto& sp = r["split"];
    md += fmt::format("| {} | {:.1f} ({:.0f} %) | {:.1f} ({:.0f} %) | {:.1f} | {:.1f} |\n", r["variant"].get<std::string>(),
                      1e3 * sp["linear_s"].get<double>(), 100 * sp["linear_fraction_of_bandwidth"].get<double>(),
                      1e3 * sp["head_s"].get<double>(), 100 * sp["head_fraction_of_bandwidth"].get<double>(),
                      1e3 * sp["attention_s"].get<double>(), 1e3 * sp["other_s"].get<double>());
  }
  std::ofstream(out + ".md") << md;
  std::printf("%s", md.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "quant_decode: %s\n", e.what());
  return 1;
}
