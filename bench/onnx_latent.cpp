// Helpers of bench/run_onnx.sh (ONNX Runtime against latentllm on a real shape):
//   onnx_latent --model SYNTH --ratio R --out DIR [--dtype F16|BF16]   a latent checkpoint of the
//       random-weight checkpoint SYNTH (latentllm-synth) with random factors at latentllm's planned ranks
//       (random_latent.hpp), streamed: each layer is widened, given its factors, written to a per-layer
//       factor file under DIR.layers and released, so that the memory is one layer's whatever the model
//       (the Llama-3-8B shape's latent takes 19 GB in float32); speed and memory only, never quality;
//   onnx_latent --machine                           {"sgemm_peak_gflops", "read_bandwidth_gb_per_s",
//       "load_average"} of this machine now, as JSON on stdout (bench_common.hpp).
#include <cstdio>
#include <filesystem>
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
      std::fprintf(stderr, "usage: onnx_latent --model SYNTH --ratio R --out DIR [--dtype F16|BF16] | --machine 1\n");
      return 2;
    }
    const DType dtype = parse_dtype(bench::arg(argc, argv, "--dtype", "F16"));
    auto m = model::Model::load(dir, {.lazy = true});
    const compress::RankPlan plan = bench::latentllm_plan(*m, ratio);
    const std::filesystem::path layers = out + ".layers";  // [layer-<i>.safetensors] float32 factors
    std::filesystem::create_directories(layers);
    std::mt19937_64 rng(7);
    for (int i = 0; i < m->num_layers(); ++i) {  // one dense float32 layer at a time
      m->load_layer(i);
      bench::randomize_layer(*m, i, plan, rng);
      checkpoint::write_layer_factors(checkpoint::layer_factors_file(layers, i), m->layer(i));
      m->release_layer(i);
    }
    checkpoint::SaveOptions opt;
    opt.dtype = dtype;
    opt.layer_factors_dir = layers;
    opt.info = {{"method", "latentllm"}, {"ratio", ratio}, {"note", "random factors (bench/onnx_latent)"}};
    checkpoint::save(*m, out, opt);
    std::filesystem::remove_all(layers);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_latent: %s\n", e.what());
    return 1;
  }
}
