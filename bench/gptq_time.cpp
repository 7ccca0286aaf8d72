// Seconds of GPTQ (src/quant/gptq.cpp) and of round to nearest on one [rows, cols] weight with a
// [cols, cols] input second moment, beside this machine's dgemm peak measured in the same run: what
// quantizing a module costs (GPTQ: three d³/3 Cholesky-type factorizations of H and the lazy updates,
// about rows·cols² multiply-adds in dgemm).
//
//   gptq_time [--rows 2048] [--cols 2048] [--bits 4] [--group 128] [--act-order 0]
//
// Prints one JSON object to stdout. Single-threaded BLAS, as the quantizers run.
#include <cstdio>
#include <random>
#include <string>

#include "bench_common.hpp"
#include "quant/gptq.hpp"

using namespace latentllm;
using bench::arg;

int main(int argc, char** argv) try {
  bench::check_args(argc, argv, {"--rows", "--cols", "--bits", "--group", "--act-order"}, "bench/gptq_time.cpp");
  const Eigen::Index rows = std::stoll(arg(argc, argv, "--rows", "2048"));
  const Eigen::Index cols = std::stoll(arg(argc, argv, "--cols", "2048"));
  const quant::QuantSpec spec{std::stoi(arg(argc, argv, "--bits", "4")), std::stoi(arg(argc, argv, "--group", "128")),
                              quant::Grid::MinMax};
  quant::GptqOptions opt;
  opt.act_order = arg(argc, argv, "--act-order", "0") == "1";
  opt.static_groups = opt.act_order;
  const double load_before = bench::load_average();
  core::BlasSingleThreaded one;
  const double dgemm = bench::dgemm_peak_gflops();
  std::mt19937_64 rng(1);
  std::normal_distribution<double> n;
  MatrixD w(rows, cols), x(cols, 2 * cols);  // [rows, cols], inputs [cols, 2·cols]
  for (double& v : w.reshaped()) v = n(rng);
  for (double& v : x.reshaped()) v = n(rng);
  const MatrixD h = x * x.transpose();  // [cols, cols]
  auto t0 = bench::Clock::now();
  const quant::GptqResult g = quant::gptq(w, h, spec, opt, "bench");
  const double gptq_s = bench::seconds_since(t0);
  t0 = bench::Clock::now();
  const quant::QuantizedMatrix r = quant::rtn(w, spec, "bench");
  const double rtn_s = bench::seconds_since(t0);
  const double e_gptq = quant::output_error(w, quant::dequantize(g.q), h);
  const double e_rtn = quant::output_error(w, quant::dequantize(r), h);
  const nlohmann::json out = {{"shape", {rows, cols}}, {"bits", spec.bits}, {"group", spec.group},
                              {"act_order", opt.act_order}, {"gptq_seconds", gptq_s}, {"rtn_seconds", rtn_s},
                              {"dgemm_peak_gflop_per_s", dgemm}, {"output_error_gptq_over_rtn", e_gptq / e_rtn},
                              {"load_average_before", load_before}, {"load_average_after", bench::load_average()}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gptq_time: %s\n", e.what());
  return 1;
}
