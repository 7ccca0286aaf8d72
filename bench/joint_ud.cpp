// Joint up-down (compress/math/joint_ud.hpp) with its token passes in double and in float, on random MLPs
// of real shapes (random weights: time only, and how far float moves the result), ranks at 20 %:
//   opt-tiny     d 256,  f 1024, ReLU (paper path), 32768 tokens (its 64 × 512 calibration)
//   opt-1.3b     d 2048, f 8192, ReLU (paper path), 4096 tokens (the passes scale linearly in tokens)
//   llama-like   d 2048, f 5632, SiLU gated (extension), 2048 tokens
// Each shape runs both precisions in the same process; the table gives the time ratio, the relative
// difference of the final output losses, and the dgemm/sgemm peaks measured here.
//
//   build/bench/joint_ud [--threads T] [--only SHAPE] --md bench/results/joint_ud.md --json bench/results/joint_ud.json
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "compress/math/joint_ud.hpp"
#include "compress/plan/rank_plan.hpp"
#include "latentllm/threads.hpp"

namespace {

using latentllm::MatrixD;
using latentllm::MatrixF;
namespace compress = latentllm::compress;
namespace bench = latentllm::bench;

struct Shape {
  const char* name;
  int d, f, n;
  bool gated;
};

MatrixD gaussian(std::mt19937_64& rng, int rows, int cols, double scale) {
  std::normal_distribution<double> nd(0.0, scale);
  MatrixD m(rows, cols);
  for (double& x : m.reshaped()) x = nd(rng);
  return m;
}

struct Problem {
  compress::MlpDense w;
  MatrixF x;  // [n, d] correlated inputs (decaying spectrum), with a mean
};

Problem make(const Shape& s) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(s.d * 131 + s.f));
  Problem p;
  p.w.act = s.gated ? latentllm::model::Activation::Silu : latentllm::model::Activation::Relu;
  p.w.gated = s.gated;
  p.w.w_up = gaussian(rng, s.f, s.d, 1.0 / std::sqrt(s.d));
  if (s.gated) p.w.w_gate = gaussian(rng, s.f, s.d, 1.0 / std::sqrt(s.d));
  p.w.w_down = gaussian(rng, s.d, s.f, 1.0 / std::sqrt(s.f));
  if (!s.gated) {
    p.w.b_up = gaussian(rng, s.f, 1, 0.1);
    p.w.b_down = gaussian(rng, s.d, 1, 0.1);
  }
  MatrixD mix = gaussian(rng, s.d, s.d, 1.0 / std::sqrt(s.d));
  for (int j = 0; j < s.d; ++j) mix.col(j) *= std::pow(10.0, -1.5 * j / s.d);
  const MatrixD x = (gaussian(rng, s.n, s.d, 1.0) * mix.transpose()).rowwise() + gaussian(rng, 1, s.d, 0.3).row(0);
  p.x = x.cast<float>();
  return p;
}

struct Run {
  double seconds = 0, loss_local = 0, loss_best = 0, energy = 0;
};

Run run(const Problem& p, const Shape& s, bool f32) {
  compress::UdOptions o;
  const auto r = static_cast<int>(compress::max_rank_for_budget(s.f, s.d, 0.8 * s.f * s.d, compress::Junction::BlockIdentity));
  o.ranks = {r, s.gated ? r : 0, r};
  o.f32_passes = f32;
  const auto t0 = bench::Clock::now();
  const compress::UdResult res = compress::joint_ud(p.w, p.x, o, s.name);
  Run out;
  out.seconds = bench::seconds_since(t0);
  out.loss_local = res.loss_local;
  out.loss_best = res.best_iter >= 0 ? res.loss[static_cast<std::size_t>(res.best_iter)] : res.loss_local;
  out.energy = res.output_energy;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string md_path = bench::arg(argc, argv, "--md", "");
  const std::string json_path = bench::arg(argc, argv, "--json", "");
  const std::string only = bench::arg(argc, argv, "--only", "");
  latentllm::core::set_num_threads(std::stoi(bench::arg(argc, argv, "--threads", "0")));
  const double load = bench::load_average();
  nlohmann::json detail;
  const double sgemm = bench::sgemm_peak_gflops(detail);
  const double dgemm = bench::dgemm_peak_gflops();
  const std::vector<Shape> shapes = {{"opt-tiny", 256, 1024, 32768, false},
                                     {"opt-1.3b", 2048, 8192, 4096, false},
                                     {"llama-like", 2048, 5632, 2048, true}};
  nlohmann::json js = {{"sgemm_peak_gflops", sgemm}, {"dgemm_peak_gflops", dgemm}, {"load_average_before", load},
                       {"threads", latentllm::core::num_threads()}, {"runs", nlohmann::json::array()}};
  std::string md = "# Joint up-down: token passes in double vs float (random MLPs of real shapes, ranks at 20 %)\n\n";
  md += fmt::format("sgemm peak {:.1f} GFLOP/s, dgemm peak {:.1f} GFLOP/s (OpenBLAS, measured in the same process), "
                    "{} threads. Load average before: {:.2f}.\n\n", sgemm, dgemm, latentllm::core::num_threads(), load);
  md += "| shape | d | f | tokens | path | f64 s | f32 s | f64 / f32 | loss f64 (rel) | loss f32 (rel) | |Δ| / loss |\n"
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n";
  for (const Shape& s : shapes) {
    if (!only.empty() && only != s.name) continue;
    const Problem p = make(s);
    if (bench::arg(argc, argv, "--f32-only", "0") == "1") {  // for profiling
      std::fprintf(stderr, "%s: f32 %.2f s\n", s.name, run(p, s, true).seconds);
      continue;
    }
    const Run d = run(p, s, false), f = run(p, s, true);
    const double diff = std::abs(f.loss_best - d.loss_best) / d.loss_best;
    std::fprintf(stderr, "%s: f64 %.2f s, f32 %.2f s\n", s.name, d.seconds, f.seconds);
    md += fmt::format("| {} | {} | {} | {} | {} | {:.2f} | {:.2f} | {:.2f}× | {:.5f} | {:.5f} | {:.1e} |\n", s.name, s.d,
                      s.f, s.n, s.gated ? "extension (SiLU, gated)" : "paper (ReLU)", d.seconds, f.seconds,
                      d.seconds / f.seconds, d.loss_best / d.energy, f.loss_best / f.energy, diff);
    js["runs"].push_back({{"shape", s.name}, {"d", s.d}, {"f", s.f}, {"tokens", s.n}, {"gated", s.gated},
                          {"f64_seconds", d.seconds}, {"f32_seconds", f.seconds}, {"f64_loss", d.loss_best},
                          {"f32_loss", f.loss_best}, {"local_loss", d.loss_local}, {"output_energy", d.energy}});
  }
  md += "\nLoss: the true MLP output loss ‖Y − Ŷ‖² of the returned factors over the calibration tokens, relative to "
        "the output energy ‖Y − mean Y‖²; each precision computes it from its own statistics.\n";
  std::fputs(md.c_str(), stdout);
  if (!md_path.empty()) std::ofstream(md_path) << md;
  if (!json_path.empty()) std::ofstream(json_path) << js.dump(2) << "\n";
  return 0;
}
