// Decode speed of a dense model and its latent versions (issue 14 item 4): tokens/s of one-token
// forwards over a KV cache at several context lengths, against the roofline of this machine's memory
// bandwidth (bytes read per token: every weight once + the cache at that context, measured in the same
// process); prefill against the sgemm peak; KV-cache bytes per position. Writes <out>.json and <out>.md.
//
//   decode --model DIR [--name NAME] [--latent compress|random] [--contexts 128,512,2048] [--steps 8]
//          [--prefill 128] [--prefill-runs 5] [--threads N] [--shared ../shared]
//          [--out bench/results/decode/NAME] [--pool-baseline 1] [--pool-spin N]
//
// Every decode and prefill runs at N threads (--threads, default 0 = every core) and at 1 thread, the
// two interleaved step by step (decode) or run by run (prefill, the median of --prefill-runs), and
// the tables give both with the ratio N / 1.
//
// --pool-baseline 1 also times every decode with the pool's threads sleeping at once between parallel
// regions (core::set_pool_spin(0): the pool before its short spin), its steps interleaved with the
// spinning pool's, and reports the ratio. --pool-spin N sets the spinning arms' spin (pause
// instructions before a pool thread sleeps; default the library's, 0 = the sleeping pool).
//
// Latent versions at 20 % and 40 %:
//   compress: latentllm with the library API on 8 TinyStories windows of 64 tokens (the fixtures);
//   random:   every attention and MLP module replaced by random factors B: [d', r], A: [r, d − r] in
//             block-identity form with the ranks latentllm would plan (compress::plan_model), for
//             random-weight checkpoints of real shapes (latentllm-synth): they measure speed only.
// A decode at context C: the cache holds C − steps − 2 positions of random entries (the speed of a step
// does not depend on them; prefilling 2048 tokens of a 1.3 B model would take minutes), then 2 warm-up
// steps and `steps` timed ones, the last attending to C positions; the median step counts. The timed
// steps of a latent variant go round with the dense model's (and the sleeping pool's, below), each arm
// with its own cache, so the speedups are ratios of the same moments on a drifting machine. Contexts beyond
// max_position_embeddings are skipped (reported).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "random_latent.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/threads.hpp"
#include "latentllm/tokenizer.hpp"

namespace {

using namespace latentllm;
using bench::arg;
using bench::Clock;
using bench::seconds_since;
using model::KvCacheMode;

struct Variant {
  std::string name;   // "dense", "latent 20 %", ...
  double ratio = 0;   // 0 = dense
  KvCacheMode mode = KvCacheMode::Dense;
};

// Bytes a one-token forward reads from the weights: every decoder-layer module (factors, biases,
// block-identity indices) and norm, the LM head (the vocabulary · its input width), one embedding row.
std::int64_t weight_bytes_per_token(const model::Model& m) {
  std::int64_t floats = 0;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (const auto& l : m.layer(i).linears) floats += l.num_params() + static_cast<std::int64_t>(l.perm.size());
    for (const auto& [name, v] : m.layer(i).norms) floats += v.size();
  }
  const auto& c = m.config();
  const std::int64_t p = c.word_embed_proj_dim > 0 ? c.word_embed_proj_dim : c.hidden_size;
  floats += c.vocab_size * p + 2 * c.hidden_size;
  return floats * 4;
}

// Multiply-adds of the modules per token (prefill FLOPs), and of the attention per layer for T new
// positions after none (causal: T·(T+1)/2 scores and as many ·V terms per head).
double linear_macs_per_token(const model::Model& m) {
  double macs = 0;
  for (int i = 0; i < m.num_layers(); ++i)
    for (const auto& l : m.layer(i).linears) macs += static_cast<double>(l.num_params() - l.bias.size());
  return macs;
}

std::unique_ptr<model::Model> compressed(const std::string& dir, const std::string& shared, double ratio) {
  auto m = model::Model::load(dir);
  const auto tok = io::load_tokenizer(dir);
  calib::CalibOptions co;
  co.source = "text";
  co.data = shared + "/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt";
  co.nsamples = 8;
  co.seqlen = 64;
  const auto ids = calib::sample_calibration(*tok, co);
  compress::CompressOptions opt;
  opt.method = compress::Method::LatentLlm;
  opt.ratio = ratio;
  compress::compress_model(*m, ids, co.seqlen, opt);
  return m;
}

// Fills the first n positions of every layer's cache with random entries and marks them cached.
void fill_cache(model::KvCache& cache, int layers, int n) {
  for (int i = 0; i < layers; ++i) {
    auto& l = cache.layer(i);
    l.k.topRows(n) = MatrixF::Random(n, l.k.cols()) * 0.5f;
    l.v.topRows(n) = MatrixF::Random(n, l.v.cols()) * 0.5f;
  }
  cache.advance(n);
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const std::size_t h = t.size() / 2;
  return t.empty() ? 0.0 : t.size() % 2 ? t[h] : 0.5 * (t[h - 1] + t[h]);
}

// One arm of an interleaved measurement: a model, its cache form, the pool's threads and idle behaviour.
struct Arm {
  const model::Model* m;
  KvCacheMode mode;
  int threads = 0;             // core::set_num_threads before each of its steps (0 = every core)
  bool sleeping_pool = false;  // core::set_pool_spin(0): the pool before its short spin
};

// Sets the pool's threads when they differ from n (0: every core). A change rebuilds the pool, whose
// new workers spin before they first sleep: wait that out, so that the next forward finds them as
// the previous one of its own left them.
void use_threads(int n, int all) {
  if (core::num_threads() == (n > 0 ? n : all)) return;
  core::set_num_threads(n);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Seconds per decode step at context C (see the header) of every arm, or empty when C does not fit:
// each arm gets its own cache, and the timed steps go round the arms (one step each per round), so
// that all of them see the same machine at the same time (a shared or virtual machine's bandwidth
// drifts by tens of percent over minutes); the median of each arm's steps counts.
// A change of thread count between arms rebuilds the pool: each arm then first runs its step untimed
// and rewinds its cache (its pool's threads started, caches warm), so that the timed step sees the
// pool as a decode loop does.
std::vector<double> decode_seconds(const std::vector<Arm>& arms, int C, int steps, int spin, int all) {
  bool switches = false;
  for (const Arm& a : arms) switches = switches || a.threads != arms[0].threads;
  for (const Arm& a : arms)
    if (C > a.m->config().max_position_embeddings || C < steps + 3) return {};
  std::vector<std::unique_ptr<model::KvCache>> caches;
  MatrixF logits;
  std::int32_t id = 3;
  for (const Arm& a : arms) {
    use_threads(a.threads, all);
    caches.push_back(std::make_unique<model::KvCache>(*a.m, C, a.mode));
    fill_cache(*caches.back(), a.m->num_layers(), C - steps - 2);
    for (int w = 0; w < 2; ++w) a.m->forward_cached(std::span<const std::int32_t>(&id, 1), *caches.back(), logits);
  }
  std::vector<std::vector<double>> t(arms.size());
  for (int s = 0; s < steps; ++s) {
    for (std::size_t k = 0; k < arms.size(); ++k) {
      core::set_pool_spin(arms[k].sleeping_pool ? 0 : spin);
      use_threads(arms[k].threads, all);
      if (switches) {
        const int len = caches[k]->length();
        arms[k].m->forward_cached(std::span<const std::int32_t>(&id, 1), *caches[k], logits);
        caches[k]->clear();
        caches[k]->advance(len);
      }
      const auto t0 = Clock::now();
      arms[k].m->forward_cached(std::span<const std::int32_t>(&id, 1), *caches[k], logits);
      t[k].push_back(seconds_since(t0));
    }
    id = static_cast<std::int32_t>((id * 7919 + 13) % 500);
  }
  core::set_pool_spin(spin);
  std::vector<double> med;
  for (auto& v : t) med.push_back(median(v));
  return med;
}

}  // namespace

int main(int argc, char** argv) try {
  latentllm::bench::check_args(argc, argv, {"--shared", "--model", "--name", "--latent", "--steps", "--prefill", "--out",
                                            "--pool-baseline", "--pool-spin", "--contexts", "--threads",
                                            "--prefill-runs"},
                               "bench/decode.cpp");
  core::reuse_large_allocations();
  set_log_callback([](LogLevel, std::string_view) {});
  const std::string shared = arg(argc, argv, "--shared", "../shared");
  const std::string model_dir = arg(argc, argv, "--model", shared + "/models/opt-tiny");
  const std::string name = arg(argc, argv, "--name", std::filesystem::path(model_dir).filename().string());
  const std::string latent_route = arg(argc, argv, "--latent", "compress");
  const int steps = std::stoi(arg(argc, argv, "--steps", "8"));
  const int prefill = std::stoi(arg(argc, argv, "--prefill", "128"));
  const int prefill_runs = std::stoi(arg(argc, argv, "--prefill-runs", "5"));
  const int threads = std::stoi(arg(argc, argv, "--threads", "0"));  // N (0: every core)
  core::set_num_threads(threads);
  const int all = core::num_threads();
  const std::string out = arg(argc, argv, "--out", "bench/results/decode/" + name);
  const bool pool_baseline = arg(argc, argv, "--pool-baseline", "1") == "1";
  const int spin = std::stoi(arg(argc, argv, "--pool-spin", "-1"));  // the spinning arms' (-1: the default)
  core::set_pool_spin(spin);
  std::vector<int> contexts;
  {
    std::stringstream ss(arg(argc, argv, "--contexts", "128,512,2048"));
    for (std::string c; std::getline(ss, c, ',');) contexts.push_back(std::stoi(c));
  }

  const double load_before = bench::load_average();
  nlohmann::json bw_detail, peak_detail;
  const double bw = bench::memory_bandwidth_gbs(bw_detail);
  const double peak = bench::sgemm_peak_gflops(peak_detail);
  std::fprintf(stderr, "%s: read bandwidth %.1f GB/s, sgemm peak %.1f GFLOP/s\n", name.c_str(), bw, peak);

  std::vector<Variant> variants = {{"dense", 0, KvCacheMode::Dense},
                                   {"latent 20 %", 0.2, KvCacheMode::Auto},
                                   {"latent 40 %", 0.4, KvCacheMode::Auto},
                                   {"latent 40 %, dense cache", 0.4, KvCacheMode::Dense}};
  nlohmann::json rows = nlohmann::json::array();
  // The dense model stays loaded: its steps are interleaved with every latent variant's (the speedup).
  const std::unique_ptr<model::Model> dense = model::Model::load(model_dir);
  std::unique_ptr<model::Model> latent;
  double current = -1;  // the ratio `latent` holds
  for (const Variant& v : variants) {
    if (v.ratio > 0 && v.ratio != current) {
      latent.reset();
      latent = latent_route == "random" ? model::Model::load(model_dir) : compressed(model_dir, shared, v.ratio);
      if (latent_route == "random") bench::randomize_latent(*latent, v.ratio, 7);
      current = v.ratio;
    }
    model::Model* m = v.ratio > 0 ? latent.get() : dense.get();
    std::vector<Variant> runs = {v};
    // Where auto does not cache every factored module as latents (RoPE keys, compute-bound absorbed
    // attention), also measure the forced latent cache.
    if (v.ratio == 0.4 && v.mode == KvCacheMode::Auto &&
        model::KvCache(*m, 1, KvCacheMode::Auto).bytes_per_token() !=
            model::KvCache(*m, 1, KvCacheMode::Latent).bytes_per_token()) {
      runs.push_back({m->attention().rope ? "latent 40 %, latent cache (keys decompressed per step)"
                                          : "latent 40 %, latent cache",
                      0.4, KvCacheMode::Latent});
    }
    for (const Variant& run : runs) {
      const std::int64_t wbytes = weight_bytes_per_token(*m);
      const model::KvCache probe(*m, 1, run.mode);
      const std::int64_t kv_per_pos = probe.bytes_per_token();
      nlohmann::json row = {{"variant", run.name}, {"ratio", run.ratio},
                            {"kv_cache", std::string(model::kv_cache_mode_name(run.mode))},
                            {"weight_bytes_per_token", wbytes}, {"kv_cache_bytes_per_token", kv_per_pos},
                            {"kv_cache_layers", probe.describe()}};
      for (int C : contexts) {
        // Arms: this variant at N threads and at 1; with the pool baseline at N with a sleeping pool;
        // for a latent variant the dense model (dense cache, N threads, spinning pool).
        std::vector<Arm> arms = {{m, run.mode, threads, false}, {m, run.mode, 1, false}};
        if (pool_baseline) arms.push_back({m, run.mode, threads, true});
        if (run.ratio > 0) arms.push_back({dense.get(), KvCacheMode::Dense, threads, false});
        const std::vector<double> med = decode_seconds(arms, C, steps, spin, all);
        if (med.empty()) {
          row["decode"][std::to_string(C)] = nullptr;
          continue;
        }
        const double s = med[0], s_one = med[1], s_sleep = pool_baseline ? med[2] : 0.0;
        const double s_dense = run.ratio > 0 ? med.back() : s;
        const double bytes = static_cast<double>(wbytes) + static_cast<double>(kv_per_pos) * C;
        const double roofline = bw * 1e9 / bytes;
        row["decode"][std::to_string(C)] = {{"tokens_per_s", 1.0 / s}, {"bytes_per_token", bytes},
                                            {"roofline_tokens_per_s", roofline}, {"fraction_of_roofline", 1.0 / s / roofline},
                                            {"achieved_gb_per_s", bytes / s / 1e9},
                                            {"one_thread_tokens_per_s", 1.0 / s_one},
                                            {"one_thread_fraction_of_roofline", 1.0 / s_one / roofline},
                                            {"speedup_over_one_thread", s_one / s}};
        if (pool_baseline) {
          row["decode"][std::to_string(C)]["sleeping_pool_tokens_per_s"] = 1.0 / s_sleep;
          row["decode"][std::to_string(C)]["speedup_over_sleeping_pool"] = s_sleep / s;
        }
        row["decode"][std::to_string(C)]["dense_tokens_per_s_interleaved"] = 1.0 / s_dense;
        row["decode"][std::to_string(C)]["speedup_over_dense"] = s_dense / s;
        std::fprintf(stderr, "%s %s context %d: %.2f tokens/s (roofline %.2f, %.0f %%; 1 thread %.2f, %.2fx; sleeping "
                     "pool %.2f; dense interleaved %.2f, %.2fx)\n", name.c_str(), run.name.c_str(), C, 1.0 / s,
                     roofline, 100.0 / s / roofline, 1.0 / s_one, s_one / s, pool_baseline ? 1.0 / s_sleep : 0.0,
                     1.0 / s_dense, s_dense / s);
      }
      const int P = std::min<int>(prefill, static_cast<int>(m->config().max_position_embeddings));
      std::vector<std::int32_t> ids(static_cast<std::size_t>(P));
      for (int i = 0; i < P; ++i) ids[static_cast<std::size_t>(i)] = (i * 7919 + 13) % 500;
      // Prefill at N threads and at 1, alternating run by run; each run's pool warmed by one
      // untimed prefill; the median of each.
      std::vector<double> pn, p1;
      for (int rep = 0; rep < prefill_runs; ++rep) {
        for (int th : {threads, 1}) {
          use_threads(th, all);
          MatrixF logits;
          for (int timed = 0; timed < 2; ++timed) {
            model::KvCache cache(*m, P, run.mode);
            const auto t0 = Clock::now();
            m->forward_cached(ids, cache, logits, true);
            if (timed) (th == 1 ? p1 : pn).push_back(seconds_since(t0));
          }
        }
      }
      use_threads(threads, all);
      const double ps = median(pn), ps_one = median(p1);
      const auto& a = m->attention();
      const double flops = 2.0 * linear_macs_per_token(*m) * P +
                           2.0 * 2.0 * a.num_heads * a.head_dim * (P * (P + 1.0) / 2.0) * m->num_layers();
      row["prefill"] = {{"tokens", P}, {"seconds", ps}, {"tokens_per_s", P / ps}, {"gflops", flops / ps / 1e9},
                        {"fraction_of_sgemm_peak", flops / ps / 1e9 / peak}, {"one_thread_seconds", ps_one},
                        {"one_thread_tokens_per_s", P / ps_one}, {"speedup_over_one_thread", ps_one / ps}};
      std::fprintf(stderr, "%s %s prefill %d: %.1f tokens/s, %.1f GFLOP/s (%.0f %% of peak); 1 thread %.1f tokens/s, "
                   "%.2fx\n", name.c_str(), run.name.c_str(), P, P / ps, flops / ps / 1e9, 100 * flops / ps / 1e9 / peak,
                   P / ps_one, ps_one / ps);
      rows.push_back(row);
    }
  }
  const auto& c = dense->config();
  nlohmann::json j = {{"model", model_dir}, {"name", name}, {"latent_route", latent_route},
                      {"architecture", c.architecture}, {"layers", c.num_hidden_layers},
                      {"hidden_size", c.hidden_size}, {"heads", c.num_attention_heads},
                      {"kv_heads", c.num_key_value_heads}, {"head_dim", c.head_dim},
                      {"max_position_embeddings", c.max_position_embeddings}, {"steps", steps},
                      {"threads", core::num_threads()}, {"load_average_before", load_before},
                      {"load_average_after", bench::load_average()}, {"read_bandwidth_gb_per_s", bw},
                      {"bandwidth_detail", bw_detail}, {"sgemm_peak_gflops", peak}, {"variants", rows}};
  std::ofstream(out + ".json") << j.dump(2) << "\n";

  std::string md = fmt::format("# Decode speed: {}\n\nGenerated by `bench/run_decode.sh` (bench/decode.cpp). {} ({} layers, "
                               "d {}, H {} / H_kv {}, d_h {}, max positions {}); latent versions by {}. "
                               "Threads {}; load average before / after {:.2f} / {:.2f}. Read bandwidth {:.1f} GB/s, "
                               "sgemm peak {:.1f} GFLOP/s (same process).\n\n",
                               name, c.architecture, c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
                               c.num_key_value_heads, c.head_dim, c.max_position_embeddings,
                               latent_route == "random" ? "random factors at latentllm's planned ranks (speed only)"
                                                        : "latentllm compression (library API)",
                               core::num_threads(), load_before, bench::load_average(), bw, peak);
  md += "| variant | KV bytes/position | weight MB/token |";
  for (int C : contexts) md += fmt::format(" decode @{} tok/s (% roofline) |", C);
  md += " prefill tok/s (% sgemm peak) |\n|---|---:|---:|";
  for (std::size_t i = 0; i < contexts.size(); ++i) md += "---:|";
  md += "---:|\n";
  for (const auto& r : rows) {
    md += fmt::format("| {} | {} | {:.1f} |", r["variant"].get<std::string>(), r["kv_cache_bytes_per_token"].get<std::int64_t>(),
                      r["weight_bytes_per_token"].get<double>() / 1e6);
    for (int C : contexts) {
      const auto& d = r["decode"][std::to_string(C)];
      md += d.is_null() ? " — (context > max positions) |"
                        : fmt::format(" {:.2f} ({:.0f} %) |", d["tokens_per_s"].get<double>(),
                                      100 * d["fraction_of_roofline"].get<double>());
    }
    md += fmt::format(" {:.1f} ({:.0f} %) |\n", r["prefill"]["tokens_per_s"].get<double>(),
                      100 * r["prefill"]["fraction_of_sgemm_peak"].get<double>());
  }
  // A table with a row per variant (latent_only: without the dense one) and a column per context.
  auto context_table = [&](const std::string& head, bool latent_only,
                           const std::function<std::string(const nlohmann::json&)>& cell) {
    md += "| variant |";
    for (int C : contexts) md += fmt::format(" {} @{} |", head, C);
    md += "\n|---|";
    for (std::size_t i = 0; i < contexts.size(); ++i) md += "---:|";
    md += "\n";
    for (const auto& r : rows) {
      if (latent_only && r["ratio"].get<double>() == 0) continue;
      md += fmt::format("| {} |", r["variant"].get<std::string>());
      for (int C : contexts) {
        const auto& d = r["decode"][std::to_string(C)];
        md += d.is_null() ? " — |" : cell(d);
      }
      md += "\n";
    }
  };
  md += "\nSpeedup over the dense model, whose steps were interleaved with each latent variant's (same contexts, "
        "same moments: the ratio is robust to the machine's drift, the tokens/s above less so): latent tok/s / "
        "dense tok/s.\n\n";
  context_table("speedup", true, [](const nlohmann::json& d) {
    return fmt::format(" {:.2f} / {:.2f} = {:.2f}x |", d["tokens_per_s"].get<double>(),
                       d["dense_tokens_per_s_interleaved"].get<double>(), d["speedup_over_dense"].get<double>());
  });
  md += fmt::format("\nThreads: the same decodes and prefills at {} threads and at 1, interleaved (decode step by step, "
                    "prefill run by run, medians): tokens/s at {} / at 1 = speedup (below 1: the threads cost).\n\n",
                    all, all);
  md += "| variant |";
  for (int C : contexts) md += fmt::format(" decode @{} |", C);
  md += " prefill |\n|---|";
  for (std::size_t i = 0; i <= contexts.size(); ++i) md += "---:|";
  md += "\n";
  for (const auto& r : rows) {
    md += fmt::format("| {} |", r["variant"].get<std::string>());
    for (int C : contexts) {
      const auto& d = r["decode"][std::to_string(C)];
      md += d.is_null() ? " — |"
                        : fmt::format(" {:.0f} / {:.0f} = {:.2f}x |", d["tokens_per_s"].get<double>(),
                                      d["one_thread_tokens_per_s"].get<double>(),
                                      d["speedup_over_one_thread"].get<double>());
    }
    const auto& pf = r["prefill"];
    md += fmt::format(" {:.0f} / {:.0f} = {:.2f}x |\n", pf["tokens_per_s"].get<double>(),
                      pf["one_thread_tokens_per_s"].get<double>(), pf["speedup_over_one_thread"].get<double>());
  }
  if (pool_baseline) {
    md += "\nThe same decodes with the pool's threads sleeping at once between parallel regions (the pool before "
          "its short spin, `core::set_pool_spin(0)`), same process: tokens/s and the spinning pool's speedup.\n\n";
    context_table("sleeping pool (speedup)", false, [](const nlohmann::json& d) {
      return fmt::format(" {:.2f} ({:.2f}x) |", d["sleeping_pool_tokens_per_s"].get<double>(),
                         d["speedup_over_sleeping_pool"].get<double>());
    });
  }
  std::ofstream(out + ".md") << md;
  std::printf("%s", md.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "decode: %s\n", e.what());
  return 1;
}
