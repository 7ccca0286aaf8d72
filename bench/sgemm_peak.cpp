// sgemm throughput of the BLAS we link (OpenBLAS), in GFLOP/s (2 FLOPs per multiply-add): square
// sizes 256..2048 (the machine's peak), and the row-major y = x·Wᵀ shapes of opt-tiny's forward at
// seqlen 512 (8 windows = 4096 rows): attention projections, fc1, fc2, the LM head chunk, and the
// per-head attention GEMMs.
#include <benchmark/benchmark.h>

#include <cblas.h>

#include <vector>

namespace {

void run_sgemm(benchmark::State& state, bool trans_b) {
  const int m = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1)),
            k = static_cast<int>(state.range(2));
  std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(n) * k, 0.25f),
      c(static_cast<std::size_t>(m) * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a.data(), k,
                b.data(), trans_b ? k : n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  // Printed with an SI prefix: "101.9G/s" = 101.9 GFLOP/s.
  state.counters["FLOPS"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::OneK::kIs1000);
}

void BM_SgemmSquare(benchmark::State& state) { run_sgemm(state, false); }
BENCHMARK(BM_SgemmSquare)->Args({256, 256, 256})->Args({512, 512, 512})->Args({1024, 1024, 1024})
    ->Args({1536, 1536, 1536})->Args({2048, 2048, 2048})->ArgNames({"m", "n", "k"})->UseRealTime();

// x: [rows, in] · Wᵀ, W: [out, in]  ->  m = rows, n = out, k = in.
void BM_SgemmLinearXWt(benchmark::State& state) { run_sgemm(state, true); }
BENCHMARK(BM_SgemmLinearXWt)
    ->Args({4096, 256, 256})     // q/k/v/out_proj
    ->Args({4096, 1024, 256})    // fc1
    ->Args({4096, 256, 1024})    // fc2
    ->Args({256, 50272, 256})    // LM head chunk
    ->Args({64, 512, 64})        // attention scores block (Q·Kᵀ)
    ->ArgNames({"m", "n", "k"})
    ->UseRealTime();

// Attention ·V block: P [64, keys] · V [keys, 64].
void BM_SgemmAttentionPV(benchmark::State& state) { run_sgemm(state, false); }
BENCHMARK(BM_SgemmAttentionPV)->Args({64, 64, 512})->ArgNames({"m", "n", "k"})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
