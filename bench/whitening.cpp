// The two whitening routes of compress/math/whitening.hpp on one [d, d] weight and a full-rank damped
// covariance, d = 1024, 2048, 4096 (rank 20 % of d), measured in the same process:
//   Whiten            whiten(C): dpotrf, or dsyevd + forming P and P⁺ (two [d, d] products)
//   RouteWork         whiten(C), W·F and V_rᵀ·F⁺: everything of asvd-rootcov that depends on the route
//   LocalRootCov      the whole asvd-rootcov (adds the SVD of W·F, the same for both routes; d ≤ 2048)
// plus this machine's dgemm/sgemm peak. Prints a table of spectral / Cholesky time ratios and, with
// --md <file>, writes it as Markdown; Google Benchmark's own --benchmark_out=<file>.json keeps the raw
// timings (the peaks and the load average are in its context).
//
//   build/bench/whitening --benchmark_out=bench/results/whitening.json --benchmark_out_format=json
//                         --md bench/results/whitening.md   (one command line)
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "compress/math/asvd.hpp"
#include "compress/math/whitening.hpp"
#include "latentllm/compress.hpp"

namespace {

using latentllm::MatrixD;
namespace compress = latentllm::compress;

struct Problem {
  MatrixD w;   // [d, d]
  MatrixD c;   // [d, d]  X·Xᵀ over 2d tokens with correlated, decaying features
  MatrixD vt;  // [r, d]  stands in for V_rᵀ of the SVD
  latentllm::calib::SiteStats stats;
};

MatrixD gaussian(std::mt19937_64& rng, int rows, int cols) {
  std::normal_distribution<double> nd(0.0, 1.0);
  MatrixD m(rows, cols);
  for (double& x : m.reshaped()) x = nd(rng);
  return m;
}

const Problem& problem(int d) {
  static std::map<int, Problem> cache;
  auto it = cache.find(d);
  if (it != cache.end()) return it->second;
  std::mt19937_64 rng(static_cast<std::uint64_t>(d));
  Problem p;
  p.w = gaussian(rng, d, d);
  MatrixD mix = gaussian(rng, d, d);  // [d, d]
  for (int j = 0; j < d; ++j) mix.col(j) *= std::pow(10.0, -3.0 * j / d);
  const MatrixD x = mix * gaussian(rng, d, 2 * d);  // [d, n]
  p.c = x * x.transpose();
  p.vt = gaussian(rng, d / 5, d);
  p.stats = latentllm::calib::SiteStats{p.c, {}, {}, 2 * static_cast<std::int64_t>(d)};
  return cache.emplace(d, std::move(p)).first->second;
}

// state.range(0) = d, range(1) = 1 for the spectral route.
template <typename F>
void run(benchmark::State& state, F&& body) {
  const Problem& p = problem(static_cast<int>(state.range(0)));
  std::optional<compress::SpectralWhiteningScope> spectral;
  if (state.range(1) != 0) spectral.emplace();
  for (auto _ : state) body(p);
  state.SetLabel(state.range(1) != 0 ? "spectral" : "cholesky");
}

void BM_Whiten(benchmark::State& state) {
  run(state, [](const Problem& p) {
    benchmark::DoNotOptimize(compress::whiten(p.c, compress::kDefaultLambdaRel, "b"));
  });
}

void BM_RouteWork(benchmark::State& state) {
  run(state, [](const Problem& p) {
    const compress::Whitening wh = compress::whiten(p.c, compress::kDefaultLambdaRel, "b");
    benchmark::DoNotOptimize(wh.times(p.w));
    benchmark::DoNotOptimize(wh.times_pinv(p.vt));
  });
}

void BM_LocalRootCov(benchmark::State& state) {
  run(state, [](const Problem& p) {
    benchmark::DoNotOptimize(compress::local_rootcov(p.w, {}, p.stats, static_cast<int>(p.vt.rows()),
                                                     compress::kDefaultLambdaRel, "b"));
  });
}

// Few iterations: one spectral whitening at d = 4096 is tens of seconds on two cores.
void register_all() {
  for (int d : {1024, 2048, 4096}) {
    const int iters = d == 1024 ? 5 : d == 2048 ? 2 : 1;
    for (int spectral : {0, 1}) {
      const auto add = [&](const char* name, void (*fn)(benchmark::State&)) {
        benchmark::RegisterBenchmark(name, fn)->Args({d, spectral})->ArgNames({"d", "spectral"})->Iterations(iters)
            ->Unit(benchmark::kMillisecond)->UseRealTime();
      };
      add("BM_Whiten", BM_Whiten);
      add("BM_RouteWork", BM_RouteWork);
      if (d <= 2048) add("BM_LocalRootCov", BM_LocalRootCov);
    }
  }
}

// Console output as usual, and every run's time kept for the ratio table.
class Collector : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, std::map<int, std::map<int, double>>> ms;  // name -> d -> spectral -> ms

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const std::string full = r.benchmark_name();  // "BM_Whiten/d:1024/spectral:0/..."
      const std::string name = full.substr(3, full.find('/') - 3);
      const int d = std::stoi(full.substr(full.find("d:") + 2));
      const int spectral = std::stoi(full.substr(full.find("spectral:") + 9));
      ms[name][d][spectral] = r.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

// B·A of asvd-rootcov by both routes at d: ‖ΔB·A‖ / ‖B·A‖.
double route_difference(int d) {
  const Problem& p = problem(d);
  const auto fit = [&] {
    return compress::local_rootcov(p.w, {}, p.stats, d / 5, compress::kDefaultLambdaRel, "b").dense();
  };
  const MatrixD chol = fit();
  compress::SpectralWhiteningScope spectral;
  const MatrixD spec = fit();
  return (chol - spec).norm() / spec.norm();
}

std::string table(const Collector& c, double dgemm, double sgemm, double load, const std::map<int, double>& diff) {
  std::string md = "# Whitening routes: Cholesky vs spectral (asvd-rootcov, W [d, d], rank d/5, λ = 1e-4)\n\n";
  md += fmt::format("dgemm peak {:.1f} GFLOP/s, sgemm peak {:.1f} GFLOP/s (OpenBLAS, measured in the same process). "
                    "Load average before: {:.2f}.\n\n", dgemm, sgemm, load);
  md += "| what | d | Cholesky ms | spectral ms | spectral / Cholesky |\n|---|---:|---:|---:|---:|\n";
  for (const auto& [name, by_d] : c.ms) {
    for (const auto& [d, t] : by_d) {
      if (t.count(0) == 0 || t.count(1) == 0) continue;
      md += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} |\n", name, d, t.at(0), t.at(1), t.at(1) / t.at(0));
    }
  }
  md += "\nWhiten: whiten(C) alone (dpotrf, or dsyevd and forming P, P⁺). RouteWork: whiten(C), W·F and V_rᵀ·F⁺, "
        "all of asvd-rootcov that depends on the route. LocalRootCov: the whole asvd-rootcov, whose SVD of W·F "
        "(the same for both routes) dominates at these sizes; d = 4096 is left out (one SVD is about a minute). "
        "Two shared cores: other processes add noise of ±30 %.\n";
  md += "\nB·A difference between the routes (‖ΔB·A‖ / ‖B·A‖):";
  for (const auto& [d, e] : diff) md += fmt::format(" d = {}: {:.1e};", d, e);
  md.back() = '.';
  return md + "\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string md_path = latentllm::bench::arg(argc, argv, "--md", "");
  const double load = latentllm::bench::load_average();
  nlohmann::json detail;
  const double sgemm = latentllm::bench::sgemm_peak_gflops(detail);
  const double dgemm = latentllm::bench::dgemm_peak_gflops();
  benchmark::AddCustomContext("dgemm_peak_gflops", fmt::format("{:.1f}", dgemm));
  benchmark::AddCustomContext("sgemm_peak_gflops", fmt::format("{:.1f}", sgemm));
  benchmark::AddCustomContext("load_average_before", fmt::format("{:.2f}", load));
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--md") {
      ++i;
      continue;
    }
    args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  register_all();
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::Shutdown();
  std::map<int, double> diff;
  for (int d : {1024, 2048}) diff[d] = route_difference(d);
  const std::string md = table(collector, dgemm, sgemm, load, diff);
  std::fputs(md.c_str(), stdout);
  if (!md_path.empty()) std::ofstream(md_path) << md;
  return 0;
}
