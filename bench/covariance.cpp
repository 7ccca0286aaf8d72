// Covariance accumulation XᵀX of one calibration site (calib::SiteStats::add), in double products
// (widen + dsyrk, the default) and in float products summed in double per block of 1024 tokens
// (PipelineOptions::covariance_f32), against the sgemm and dgemm peaks measured in the same run.
// Rates count the n·w·(w+1) FLOPs of the upper triangle. Widths: OPT-1.3B's d (2048) and ffn (8192),
// a window of 2048 tokens per call, as compress passes them.
#include <benchmark/benchmark.h>

#include <cblas.h>

#include <vector>

#include "latentllm/calib.hpp"
#include "latentllm/tensor.hpp"

namespace {

using namespace latentllm;

void BM_CovarianceAdd(benchmark::State& state) {
  const int w = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1));
  const bool f32 = state.range(2) != 0;
  const MatrixF x = MatrixF::Random(n, w);
  calib::SiteStats st;
  st.reset(w);
  for (auto _ : state) st.add_upper(x, 0, f32);  // as the pipeline: one symmetrize() per layer, not per batch
  benchmark::DoNotOptimize(st.xtx.data());
  state.counters["FLOPS"] = benchmark::Counter(double(n) * w * (w + 1), benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::OneK::kIs1000);
}
BENCHMARK(BM_CovarianceAdd)
    ->Args({2048, 2048, 0})->Args({2048, 2048, 1})->Args({8192, 2048, 0})->Args({8192, 2048, 1})
    ->ArgNames({"w", "n", "f32"})->UseRealTime()->Unit(benchmark::kMillisecond);

template <typename T>
void BM_GemmPeak(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  std::vector<T> a(std::size_t(m) * m, T(0.5)), c(std::size_t(m) * m);
  for (auto _ : state) {
    if constexpr (sizeof(T) == 4)
      cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, m, m, m, 1.0f, a.data(), m, a.data(), m, 0.0f, c.data(), m);
    else
      cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, m, m, m, 1.0, a.data(), m, a.data(), m, 0.0, c.data(), m);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * m * m * m, benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::OneK::kIs1000);
}
BENCHMARK(BM_GemmPeak<float>)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GemmPeak<double>)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
