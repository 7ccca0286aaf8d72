// Decode products over quantized weights (src/quant/gemv.cpp) against this machine's memory bandwidth,
// measured in the same process: y = W'·x over a stack of [rows, cols] matrices far larger than the
// caches (each product reads its weights from memory, as a decode step does), for 4- and 8-bit packed
// codes and, as the baseline, the 16-bit GEMV decode uses today (core::xwt16 on F16 weights). Reports
// per kernel the median seconds per matrix, the GB/s of the bytes it must read (packed codes + scales +
// zeros, or the F16 weights) and that rate as a fraction of the measured read bandwidth (the roofline).
//
//   quant_gemv [--rows 4096] [--cols 4096] [--group 128] [--mib 256] [--passes 7] [--threads N]
//
// Prints one JSON object to stdout. The machine is shared: figures under load are not final (the
// 1-minute load average before and after is in the output).
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench_common.hpp"
#include "core/gemm16.hpp"
#include "latentllm/tensor.hpp"
#include "quant/gemv.hpp"

using namespace latentllm;
using bench::arg;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One random packed matrix at `bits` (the codes' values do not change the speed).
quant::PackedMatrix random_packed(std::int64_t rows, std::int64_t cols, int bits, int group, std::mt19937& rng) {
  quant::PackedMatrix p;
  p.rows = rows;
  p.cols = cols;
  p.bits = bits;
  p.group = group;
  p.codes.resize(static_cast<std::size_t>(rows * p.row_bytes()));
  for (auto& c : p.codes) c = static_cast<std::uint8_t>(rng());
  p.scales.assign(static_cast<std::size_t>(rows * p.groups()), f32_to_f16(0.01f));
  p.zeros.assign(p.scales.size(), f32_to_f16(7.5f));
  return p;
}

// Seconds per matrix of `product(i)` over n matrices, the median of `passes` passes over all of them.
template <typename F>
double seconds_per_matrix(int n, int passes, F&& product) {
  std::vector<double> per;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = bench::Clock::now();
    for (int i = 0; i < n; ++i) product(i);
    per.push_back(bench::seconds_since(t0) / n);
  }
  return median(per);
}

nlohmann::json row(const std::string& name, double bytes, double flops, double s, double bw) {
  const double gbs = bytes / s / 1e9;
  return {{"kernel", name}, {"bytes_per_matrix", bytes}, {"seconds_per_matrix", s}, {"gb_per_s", gbs},
          {"fraction_of_bandwidth", gbs / bw}, {"gflop_per_s", flops / s / 1e9}};
}

}  // namespace

int main(int argc, char** argv) try {
  bench::check_args(argc, argv, {"--rows", "--cols", "--group", "--mib", "--passes", "--threads"},
                    "bench/quant_gemv.cpp");
  const std::int64_t rows = std::stoll(arg(argc, argv, "--rows", "4096"));
  const std::int64_t cols = std::stoll(arg(argc, argv, "--cols", "4096"));
  const int group = std::stoi(arg(argc, argv, "--group", "128"));
  const double mib = std::stod(arg(argc, argv, "--mib", "256"));
  const int passes = std::stoi(arg(argc, argv, "--passes", "7"));
  core::set_num_threads(std::stoi(arg(argc, argv, "--threads", "0")));

  const double load_before = bench::load_average();
  nlohmann::json bw_detail, peak_detail;
  const double bw = bench::memory_bandwidth_gbs(bw_detail);
  const double peak = bench::sgemm_peak_gflops(peak_detail);
  std::fprintf(stderr, "read bandwidth %.1f GB/s, sgemm peak %.1f GFLOP/s\n", bw, peak);

  std::mt19937 rng(1);
  std::vector<float> x(static_cast<std::size_t>(cols)), y(static_cast<std::size_t>(rows));
  for (float& v : x) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(cols);
  nlohmann::json kernels = nlohmann::json::array();

  for (int bits : {4, 8}) {
    const quant::PackedMatrix one = random_packed(rows, cols, bits, group, rng);
    const double bytes = static_cast<double>(one.codes.size()) + 4.0 * static_cast<double>(one.scales.size());
    const int n = std::max(2, static_cast<int>(mib * 1048576.0 / bytes));
    std::vector<quant::PackedMatrix> stack(static_cast<std::size_t>(n), one);  // [n] distinct copies in memory
    const double s = seconds_per_matrix(n, passes, [&](int i) { quant::gemv(stack[static_cast<std::size_t>(i)], x, y); });
    kernels.push_back(row(fmt::format("int{} G={}{}", bits, group, quant::gemv_vectorized(one) ? "" : " (portable)"),
                          bytes, flops, s, bw));
  }
  {
    // The 16-bit baseline: F16 weights, the GEMV decode runs today, rows split over the pool.
    const double bytes = 2.0 * static_cast<double>(rows * cols);
    const int n = std::max(2, static_cast<int>(mib * 1048576.0 / bytes));
    std::vector<std::vector<std::uint16_t>> data(static_cast<std::size_t>(n),
                                                 std::vector<std::uint16_t>(static_cast<std::size_t>(rows * cols),
                                                                            f32_to_f16(0.01f)));
    const double s = seconds_per_matrix(n, passes, [&](int i) {
      Matrix16 w;
      w.dtype = DType::F16;
      w.rows = rows;
      w.cols = cols;
      w.data = data[static_cast<std::size_t>(i)].data();
      core::parallel_for(rows, 128, [&](std::int64_t r0, std::int64_t r1) {
        core::xwt16(x.data(), 1, static_cast<int>(cols), w, r0, r1, 0.0f, y.data() + r0, static_cast<int>(rows));
      });
    });
    kernels.push_back(row("f16 (gemm16 GEMV)", bytes, flops, s, bw));
  }
  const nlohmann::json out = {
      {"shape", {rows, cols}}, {"group", group}, {"threads", core::num_threads()},
      {"isa", std::string(core::isa_name(core::kernel_isa()))}, {"read_bandwidth_gb_per_s", bw},
      {"bandwidth_detail", bw_detail}, {"sgemm_peak_gflop_per_s", peak}, {"kernels", kernels},
      {"load_average_before", load_before}, {"load_average_after", bench::load_average()}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "quant_gemv: %s\n", e.what());
  return 1;
}
