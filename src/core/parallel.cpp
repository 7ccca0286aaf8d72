#include "core/parallel.hpp"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/gemm.hpp"
#include "latentllm/error.hpp"
#include "latentllm/threads.hpp"

namespace latentllm::core {
namespace {

// Below this many multiply-adds a single sgemm call is cheaper than splitting.
constexpr double kParallelMacs = 1 << 18;
// Row blocks of a split GEMM (enough rows for the sgemm kernels to run at speed) and column blocks
// (a multiple of the kernels' register tile width).
constexpr std::int64_t kRowBlock = 256;
constexpr std::int64_t kColBlock = 2048;

thread_local bool t_in_pool = false;

struct Job {
  std::int64_t n = 0, grain = 1;
  const std::function<void(std::int64_t, std::int64_t)>* body = nullptr;
  std::atomic<std::int64_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;

  void work() {
    for (;;) {
      const std::int64_t b = next.fetch_add(grain);
      if (b >= n) return;
      try {
        (*body)(b, std::min(n, b + grain));
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(n);  // stop handing out chunks
      }
    }
  }
};

// Each thread spins on the job counter for a short while (kDefaultSpin pauses, about 20-60 µs) before it
// blocks: back-to-back regions (decoding runs two GEMVs a factored module, about 300 regions a
// token on the OPT-1.3B shape) then start without a futex wake-up, which costs tens of microseconds
// on a virtual machine, while an idle pool still sleeps (bounded spin, never OpenMP's ~300k).
constexpr int kDefaultSpin = 2000;
std::atomic<int> g_spin{kDefaultSpin};  // set_pool_spin

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    stop_.store(true);
    notify(wake_);
    for (auto& t : workers_) t.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void run(Job& job) {
    std::lock_guard serial(run_mutex_);  // one job at a time if several threads call in
    job_.store(&job, std::memory_order_relaxed);
    busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    notify(wake_);
    t_in_pool = true;
    job.work();
    t_in_pool = false;
    if (!spin_until([&] { return busy_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [&] { return busy_.load(std::memory_order_acquire) == 0; });
    }
    job_.store(nullptr, std::memory_order_relaxed);
  }

 private:
  template <typename Pred>
  static bool spin_until(Pred pred) {
    const int spin = g_spin.load(std::memory_order_relaxed);
    for (int i = 0; i < spin; ++i) {
      if (pred()) return true;
      cpu_relax();
    }
    return pred();
  }
  // The state a waiter's predicate reads was changed before: taking the mutex orders that change
  // before a waiter's check-then-sleep, so no wake-up is lost.
  void notify(std::condition_variable& cv) {
    { std::lock_guard lock(mutex_); }
    cv.notify_all();
  }

  void loop() {
    t_in_pool = true;
    std::uint64_t seen = 0;
    auto woken = [&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; };
    for (;;) {
      if (!spin_until(woken)) {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, woken);
      }
      if (stop_.load(std::memory_order_acquire)) return;
      seen = generation_.load(std::memory_order_acquire);
      job_.load(std::memory_order_relaxed)->work();
      if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) notify(done_);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mutex_, mutex_;
  std::condition_variable wake_, done_;
  std::atomic<Job*> job_{nullptr};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> busy_{0};
  std::atomic<bool> stop_{false};
};

int default_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

std::mutex g_pool_mutex;
std::unique_ptr<Pool> g_pool;

Pool& pool() {
  std::lock_guard lock(g_pool_mutex);
  if (!g_pool) g_pool = std::make_unique<Pool>(default_threads());
  return *g_pool;
}

}  // namespace

void set_num_threads(int n) {
  const int threads = n > 0 ? n : default_threads();
  {
    std::lock_guard lock(g_pool_mutex);
    if (!g_pool || g_pool->threads() != threads) {
      g_pool.reset();
      g_pool = std::make_unique<Pool>(threads);
    }
  }
  core::set_blas_threads(threads);
}

bool in_parallel_region() { return t_in_pool; }

void set_pool_spin(int pauses) { g_spin.store(pauses < 0 ? kDefaultSpin : pauses, std::memory_order_relaxed); }

int num_threads() { return pool().threads(); }

void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  Pool& p = pool();
  if (t_in_pool || p.threads() == 1 || n <= grain) {
    for (std::int64_t b = 0; b < n; b += grain) body(b, std::min(n, b + grain));
    return;
  }
  Job job;
  job.n = n;
  job.grain = grain;
  job.body = &body;
  p.run(job);
  if (job.error) std::rethrow_exception(job.error);
}

BlasSingleThreaded::BlasSingleThreaded() : saved_(openblas_get_num_threads()) {
  if (saved_ > 1) openblas_set_num_threads(1);
}

BlasSingleThreaded::~BlasSingleThreaded() {
  if (saved_ > 1) openblas_set_num_threads(saved_);
}

void parallel_xwt(const MatrixF& x, const MatrixF& w, MatrixF& y, bool accumulate) {
  const std::int64_t n = x.rows(), in = x.cols(), out = w.rows();
  if (w.cols() != in) throw Error(fmt::format("parallel_xwt: inner dimension (expected {}, got {})", w.cols(), in));
  if (!accumulate) {
    y.resize(n, out);
  } else if (y.rows() != n || y.cols() != out) {
    throw Error(fmt::format("parallel_xwt: accumulator shape (expected [{}, {}], got [{}, {}])", n, out, y.rows(),
                            y.cols()));
  }
  const double macs = static_cast<double>(n) * static_cast<double>(in) * static_cast<double>(out);
  // The split below does not depend on the thread count (one thread runs the same blocks in turn),
  // so results are bit-identical for any --threads.
  if (t_in_pool || macs < kParallelMacs || n == 0 || out == 0 || in == 0) {
    core::matmul_xwt(x, w, y, accumulate);
    return;
  }
  const float beta = accumulate ? 1.0f : 0.0f;
  const int ld_in = static_cast<int>(in), ld_out = static_cast<int>(out);
  BlasSingleThreaded single;
  // Tall x (the decoder's linears): row blocks. Short x with a wide W (the LM head): column blocks.
  if (n >= 2 * kRowBlock) {
    parallel_for(n, kRowBlock, [&](std::int64_t r0, std::int64_t r1) {
      core::sgemm_rm(false, true, static_cast<int>(r1 - r0), ld_out, ld_in, 1.0f, x.data() + r0 * in, ld_in,
                     w.data(), ld_in, beta, y.data() + r0 * out, ld_out);
    });
  } else {
    parallel_for(out, kColBlock, [&](std::int64_t c0, std::int64_t c1) {
      core::sgemm_rm(false, true, static_cast<int>(n), static_cast<int>(c1 - c0), ld_in, 1.0f, x.data(), ld_in,
                     w.data() + c0 * in, ld_in, beta, y.data() + c0, ld_out);
    });
  }
}

}  // namespace latentllm::core
