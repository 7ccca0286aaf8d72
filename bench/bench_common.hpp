// Helpers shared by the end-to-end benchmarks: this machine's sgemm/dgemm peak measured in the
// same process, the load average, and argument lookup.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <initializer_list>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/parallel.hpp"
#include "latentllm/threads.hpp"

namespace latentllm::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Best sgemm GFLOP/s over square sizes, each the best of several repetitions, run two ways: one
// OpenBLAS call on all cores (its own threads), and one single-threaded call per core running
// concurrently (how the forward's thread pool drives sgemm). The peak is the better of the two.
inline double sgemm_peak_gflops(nlohmann::json& detail) {
  double best = 0;
  const int threads = latentllm::core::num_threads();
  for (int n : {1024, 1536, 2048}) {
    const auto size = static_cast<std::size_t>(n) * n;
    std::vector<float> a(size, 0.5f), b(size, 0.25f), c(size * threads);
    double blas = 0, pool = 0;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = Clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      blas = std::max(blas, 2.0 * n * n * n / seconds_since(t0) / 1e9);
      latentllm::core::BlasSingleThreaded single;
      t0 = Clock::now();
      latentllm::core::parallel_for(threads, 1, [&](std::int64_t t, std::int64_t) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                    c.data() + static_cast<std::size_t>(t) * size, n);
      });
      pool = std::max(pool, 2.0 * n * n * n * threads / seconds_since(t0) / 1e9);
    }
    detail[std::to_string(n)] = {{"openblas_threads", blas}, {"per_core_concurrent", pool}};
    best = std::max({best, blas, pool});
  }
  return best;
}

// Memory read bandwidth in GB/s: the best of several passes over a 1 GiB float array (far beyond the
// caches): summing it split over the forward's threads in 4 MiB chunks, summing it on one thread, and
// multiplying it as a [2^16, 4096] matrix by a vector with single-threaded sgemv on 128-row blocks
// over the pool's threads (how decoding streams its weights). detail gets each rate and a memcpy rate
// (bytes read + written).
inline double memory_bandwidth_gbs(nlohmann::json& detail) {
  const std::size_t n = std::size_t{1} << 28;  // floats: 1 GiB
  const std::int64_t chunk = std::int64_t{1} << 20;
  std::vector<float> a(n, 1.0f), b(n / 2);
  const int threads = latentllm::core::num_threads();
  std::vector<double> part(static_cast<std::size_t>((static_cast<std::int64_t>(n) + chunk - 1) / chunk));
  double pool = 0, single = 0, copy = 0, gemv = 0;
  std::vector<float> x(4096, 1.0f), y(n / 4096);  // a as a row-major [n / 4096, 4096] matrix
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    latentllm::core::parallel_for(static_cast<std::int64_t>(n) / chunk, 1, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        part[static_cast<std::size_t>(c)] = Eigen::Map<const Eigen::ArrayXf>(a.data() + c * chunk, chunk).sum();
      }
    });
    pool = std::max(pool, 4.0 * n / seconds_since(t0) / 1e9);
    t0 = Clock::now();
    const double s = Eigen::Map<const Eigen::ArrayXf>(a.data(), static_cast<std::int64_t>(n / 4)).sum();
    single = std::max(single, 4.0 * (n / 4) / seconds_since(t0) / 1e9);
    part[0] += s;
    t0 = Clock::now();
    std::copy(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n / 2), b.begin());
    copy = std::max(copy, 2.0 * 4.0 * (n / 2) / seconds_since(t0) / 1e9);
    // y = a·x by single-threaded sgemv on blocks of 128 rows over the pool: how decoding reads a weight.
    {
      latentllm::core::BlasSingleThreaded one;
      t0 = Clock::now();
      latentllm::core::parallel_for(static_cast<std::int64_t>(y.size()), 128, [&](std::int64_t r0, std::int64_t r1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(r1 - r0), 4096, 1.0f, a.data() + r0 * 4096, 4096,
                    x.data(), 1, 0.0f, y.data() + r0, 1);
      });
      gemv = std::max(gemv, 4.0 * n / seconds_since(t0) / 1e9);
    }
  }
  detail = {{"threads", threads}, {"read_pool_gb_per_s", pool}, {"read_one_thread_gb_per_s", single},
            {"sgemv_pool_gb_per_s", gemv}, {"memcpy_read_plus_write_gb_per_s", copy},
            {"checksum", std::accumulate(part.begin(), part.end(), 0.0) + y[0]}};
  return std::max({pool, single, gemv});
}

// The 1-minute load average (other processes compete for the 2 cores and skew every figure).
inline double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return l;
}

// Refuses what is not `--key value` with a key of `known` (a typo or --help would otherwise run the
// whole bench with its defaults and overwrite its committed results); usage: the comment atop `source`.
inline void check_args(int argc, char** argv, std::initializer_list<std::string_view> known, const char* source) {
  for (int i = 1; i < argc; i += 2) {
    const std::string_view key = argv[i];
    const bool unknown = std::find(known.begin(), known.end(), key) == known.end();
    if (unknown || i + 1 >= argc) {
      std::string list;
      for (const auto k : known) list += (list.empty() ? "" : " ") + std::string(k);
      throw std::invalid_argument(std::string(key) + (unknown ? ": unknown option" : ": missing value") +
                                  " (expected --key value with a key of: " + list + "; usage atop " + source + ")");
    }
  }
}

inline std::string arg(int argc, char** argv, const std::string& key, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == key) return argv[i + 1];
  return fallback;
}

// Best dgemm GFLOP/s (OpenBLAS, all cores) over square sizes: the ceiling of the double-precision
// covariance and decomposition work.
inline double dgemm_peak_gflops() {
  double best = 0;
  for (int n : {1024, 1536}) {
    const auto size = static_cast<std::size_t>(n) * n;
    std::vector<double> a(size, 0.5), b(size, 0.25), c(size);
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
      best = std::max(best, 2.0 * n * n * n / seconds_since(t0) / 1e9);
    }
  }
  return best;
}

}  // namespace latentllm::bench
