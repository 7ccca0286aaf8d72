// Continuous batching (`latentllm serve`): aggregate greedy decode tokens/s of B = 1, 2, 4, 8 concurrent
// streams through Model::forward_batch (the step serve runs), each stream at its own context, against one
// stream in the same process (rounds interleaved, best of them), with the sgemm peak and the memory read
// bandwidth measured beside it; and how many conversations of 2048 tokens fit one --max-memory, dense
// against latent 40 % with a latent KV cache (random factors at latentllm's planned ranks, bench/random_latent.hpp;
// weights counted as F16 as the checkpoint stores them).
//   serve_batch --model DIR [--name N] [--steps 16] [--context 128] [--rounds 3] [--max-memory 20G] [--ratio 0.4]
//               [--out bench/results/serve/NAME]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/model.hpp"
#include "latentllm/resources.hpp"
#include "random_latent.hpp"

namespace {

using namespace latentllm;
using json = nlohmann::ordered_json;

// Seconds of `steps` batched decoding steps of B streams, each prefilled with `context` random tokens.
double decode_seconds(const model::Model& m, int B, int context, int steps, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> tok(3, static_cast<std::int32_t>(m.config().vocab_size / 2));
  std::vector<std::unique_ptr<model::KvCache>> caches;
  std::vector<model::KvCache*> ptrs;
  std::vector<std::int32_t> ids;
  MatrixF logits;
  for (int b = 0; b < B; ++b) {
    caches.push_back(std::make_unique<model::KvCache>(m, context + steps, model::KvCacheMode::Dense));
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(context));
    for (auto& t : prompt) t = tok(rng);
    m.forward_cached(prompt, *caches.back(), logits, true);
    ptrs.push_back(caches.back().get());
    ids.push_back(tok(rng));
  }
  const auto t0 = bench::Clock::now();
  for (int s = 0; s < steps; ++s) {
    m.forward_batch(ids, ptrs, logits);
    for (int b = 0; b < B; ++b) {  // greedy, as serve's temperature 0
      Eigen::Index j = 0;
      logits.row(b).maxCoeff(&j);
      ids[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(j);
    }
  }
  return bench::seconds_since(t0);
}

// Bytes of m's decoder-layer linears and norms as F16 (2 per value), plus what lies outside the layers
// as stored.
std::int64_t f16_weight_bytes(const model::Model& m) {
  std::int64_t b = m.footprint().tables + m.footprint().other;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (const auto& l : m.layer(i).linears) b += 2 * l.num_params() + 4 * static_cast<std::int64_t>(l.perm.size());
    for (const auto& [name, v] : m.layer(i).norms) b += 2 * v.size();
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) try {
  bench::check_args(argc, argv, {"--model", "--name", "--steps", "--context", "--rounds", "--max-memory", "--ratio", "--out"},
                    __FILE__);
  using bench::arg;
  const std::string dir = arg(argc, argv, "--model", "");
  const std::string name = arg(argc, argv, "--name", std::filesystem::path(dir).filename().string());
  const int steps = std::stoi(arg(argc, argv, "--steps", "16"));
  const int context = std::stoi(arg(argc, argv, "--context", "128"));
  const int rounds = std::stoi(arg(argc, argv, "--rounds", "3"));
  const std::string max_memory = arg(argc, argv, "--max-memory", "20G");
  const double ratio = std::stod(arg(argc, argv, "--ratio", "0.4"));
  const std::string out = arg(argc, argv, "--out", "bench/results/serve/" + name);
  const double load_before = bench::load_average();

  nlohmann::json peak_detail, bw_detail;
  const double peak = bench::sgemm_peak_gflops(peak_detail);
  const double bw = bench::memory_bandwidth_gbs(bw_detail);

  model::LoadOptions lo;
  lo.weights = model::LoadOptions::Weights::Stored;  // serve's default: F16 kept as stored
  lo.huge_pages = true;                              // as generate and serve's decoding read them
  auto m = model::Model::load(dir, lo);
  const std::int64_t weight_bytes = m->footprint().all_layers() + m->footprint().tables + m->footprint().other;

  // Rounds interleave the batch sizes; each size's best round counts (the least disturbed by the other
  // processes on the machine).
  const std::vector<int> sizes = {1, 2, 4, 8};
  std::vector<double> best(sizes.size(), 1e30);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const double s = decode_seconds(*m, sizes[k], context, steps, 7 + static_cast<std::uint64_t>(r));
      best[k] = std::min(best[k], s);
      std::fprintf(stderr, "round %d: %d streams: %.3f s for %d steps\n", r, sizes[k], s, steps);
    }
  }
  json rows = json::array();
  const double one = steps / best[0];
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const double tps = sizes[k] * steps / best[k];
    const double step_s = best[k] / steps;
    rows.push_back({{"streams", sizes[k]}, {"step_ms", 1e3 * step_s}, {"aggregate_tokens_per_s", tps},
                    {"ratio_to_one_stream", tps / one},
                    {"weight_read_gb_per_s", static_cast<double>(weight_bytes) / step_s / 1e9},
                    {"fraction_of_bandwidth", static_cast<double>(weight_bytes) / step_s / 1e9 / bw},
                    {"linear_gflops", 2.0 * static_cast<double>(weight_bytes) / 2.0 * sizes[k] / step_s / 1e9},
                    {"fraction_of_sgemm_peak", 2.0 * static_cast<double>(weight_bytes) / 2.0 * sizes[k] / step_s / 1e9 / peak}});
  }

  // Conversations of min(2048, context) tokens in one --max-memory: serve's KV budget (the plan's budget
  // less the weights, one prompt's activations and the runtime) over each one's cache.
  const std::int64_t budget = core::parse_bytes(max_memory, "--max-memory");
  const int conv = static_cast<int>(std::min<std::int64_t>(m->config().max_position_embeddings, 2048));
  const core::MemoryPlan plan = eval::plan_inference_memory(*m, m->config().max_position_embeddings, budget);
  std::int64_t runtime = 0;  // activations, runtime and widened panels: the same for both models
  for (const auto& item : plan.items)
    if (!item.name.starts_with("KV cache") && !item.name.starts_with("weights")) runtime += item.bytes;
  const auto fit = [&](std::int64_t weights, std::int64_t per_token) {
    const std::int64_t kv = budget - weights - runtime;
    return json{{"weights_bytes", weights}, {"kv_budget_bytes", kv}, {"kv_bytes_per_token", per_token},
                {"conversation_bytes", per_token * conv}, {"conversations", std::max<std::int64_t>(kv, 0) / (per_token * conv)}};
  };
  const json dense = fit(weight_bytes, model::KvCache(*m, 1, model::KvCacheMode::Dense).bytes_per_token());
  bench::randomize_latent(*m, ratio, 11);
  const json latent = fit(f16_weight_bytes(*m), model::KvCache(*m, 1, model::KvCacheMode::Latent).bytes_per_token());
  const double conv_ratio = static_cast<double>(latent["conversations"].get<std::int64_t>()) /
                            static_cast<double>(std::max<std::int64_t>(dense["conversations"].get<std::int64_t>(), 1));

  const json report = {{"model", name}, {"dir", dir}, {"steps", steps}, {"context", context}, {"rounds", rounds},
                       {"threads", core::num_threads()}, {"load_average_before", load_before},
                       {"load_average_after", bench::load_average()}, {"sgemm_peak_gflops", peak},
                       {"sgemm_detail", peak_detail}, {"bandwidth_gb_per_s", bw}, {"bandwidth_detail", bw_detail},
                       {"weights_stored_bytes", weight_bytes}, {"decode", rows},
                       {"max_memory", max_memory}, {"conversation_tokens", conv}, {"dense", dense},
                       {"latent", {{"ratio", ratio}, {"kv_cache", "latent"}, {"fit", latent}}},
                       {"latent_over_dense_conversations", conv_ratio}};
  std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  std::ofstream(out + ".json") << report.dump(2) << "\n";
  std::ofstream csv(out + ".csv");
  csv << "streams,step_ms,aggregate_tokens_per_s,ratio_to_one_stream,fraction_of_bandwidth,fraction_of_sgemm_peak\n";
  for (const auto& r : rows) {
    csv << r["streams"].get<int>() << "," << r["step_ms"].get<double>() << "," << r["aggregate_tokens_per_s"].get<double>()
        << "," << r["ratio_to_one_stream"].get<double>() << "," << r["fraction_of_bandwidth"].get<double>() << ","
        << r["fraction_of_sgemm_peak"].get<double>() << "\n";
  }
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "serve_batch: %s\n", e.what());
  return 1;
}
