// Helpers of bench/run_onnx.sh (ONNX Runtime against latentllm on a real shape):
//   onnx_latent --model SYNTH --ratio R --out DIR   a latent checkpoint of the random-weight checkpoint
//       SYNTH (latentllm-synth) with random factors at latentllm's planned ranks (random_latent.hpp),
//       written one layer at a time from a lazy model (speed only: random weights, never quality);
//   onnx_latent --machine                           {"sgemm_peak_gflops", "read_bandwidth_gb_per_s",
//       "load_average"} of this machine now, as JSON on stdout (bench_common.hpp).
#include <cstdio>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/model.hpp"
#include "random_latent.hpp"

int main(int argc, char** argv) {
  using namespace latentllm;
  try {
    if (bench::arg(argc, argv, "--machine", "") == "1") {
      nlohmann::json peak_detail, bw_detail;
      const double peak = bench::sgemm_peak_gflops(peak_detail);
      const double bw = bench::memory_bandwidth_gbs(bw_detail);
      std::printf("%s\n", nlohmann::json{{"sgemm_peak_gflops", peak}, {"read_bandwidth_gb_per_s", bw},
                                         {"load_average", bench::load_average()}}.dump().c_str());
      return 0;
    }
    const std::string dir = bench::arg(argc, argv, "--model", "");
    const std::string out = bench::arg(argc, argv, "--out", "");
    const double ratio = std::stod(bench::arg(argc, argv, "--ratio", "0.3"));
    if (dir.empty() || out.empty()) {
      std::fprintf(stderr, "usage: onnx_latent --model SYNTH --ratio R --out DIR | --machine 1\n");
      return 2;
    }
    auto m = model::Model::load(dir, {.lazy = true});
    const compress::RankPlan plan = bench::latentllm_plan(*m, ratio);
    std::mt19937_64 rng(7);
    for (int i = 0; i < m->num_layers(); ++i) {  // one dense float32 layer at a time
      m->load_layer(i);
      bench::randomize_layer(*m, i, plan, rng);
    }
    checkpoint::SaveOptions opt;
    opt.dtype = DType::F16;
    opt.info = {{"method", "latentllm"}, {"ratio", ratio}, {"note", "random factors (bench/onnx_latent)"}};
    checkpoint::save(*m, out, opt);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_latent: %s\n", e.what());
    return 1;
  }
}
