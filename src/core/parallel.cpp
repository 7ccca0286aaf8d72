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

// One core's rates for estimated_seconds: high on purpose (sgemm near its peak, reads from cache), so
// that an estimate errs short and a loop on the line stays on one thread.
constexpr double kCoreFlopsPerSecond = 100e9;
constexpr double kCoreBytesPerSecond = 40e9;
// Estimated single-thread seconds above which a loop is split (worth_splitting): while a worker spins,
// a region costs a few hundred nanoseconds plus moving its inputs and outputs between the cores; a
// sleeping worker costs a futex wake-up, tens of microseconds on a virtual machine, more when the
// other core is busy with another process.
constexpr double kSplitAwakeSeconds = 5e-6;
constexpr double kSplitAsleepSeconds = 100e-6;

thread_local bool t_in_pool = false;

struct Job {
  std::int64_t n = 0, grain = 1;
  const std::function<void(std::int64_t, std::int64_t)>* body = nullptr;
  std::atomic<std::int64_t> next{0};
  std::atomic<int> left{0};  // workers that joined this job and have finished their chunks
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

// A job is open from the moment the caller publishes it until the caller has run out of chunks; a
// worker joins it only while it is open. The caller then waits for the workers that joined (they hold
// chunks) and never for one that had not started: on a machine shared with other processes a worker
// may not be scheduled for milliseconds, and the caller runs every chunk itself meanwhile, so a
// region is never much slower than the serial loop.
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
  // True while some worker spins (it ran a region moments ago): a region starts without a wake-up.
  bool worker_awake() const { return sleeping_.load(std::memory_order_relaxed) < static_cast<int>(workers_.size()); }

  void run(Job& job) {
    std::lock_guard serial(run_mutex_);  // one job at a time if several threads call in
    job_.store(&job, std::memory_order_relaxed);
    const std::uint64_t generation = (ticket_.load(std::memory_order_relaxed) >> 32) + 1;
    ticket_.store(generation << 32 | kOpen, std::memory_order_release);  // publishes job_
    notify(wake_);
    t_in_pool = true;
    job.work();
    t_in_pool = false;
    const int joined = static_cast<int>(ticket_.fetch_and(~kOpen, std::memory_order_acq_rel) & kJoinedMask);
    auto finished = [&] { return job.left.load(std::memory_order_acquire) == joined; };
    if (!spin_until(finished)) {
      std::unique_lock lock(mutex_);
      done_.wait(lock, finished);
    }
    job_.store(nullptr, std::memory_order_relaxed);
  }

 private:
  // ticket_: the generation of the last published job (high 32 bits), whether it is open (kOpen) and
  // how many workers joined it (low bits). Only the caller changes the generation and closes a job;
  // workers only add themselves to an open one.
  static constexpr std::uint64_t kOpen = std::uint64_t{1} << 31;
  static constexpr std::uint64_t kJoinedMask = kOpen - 1;

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

  // Joins the job of `generation` if it is still open.
  bool join(std::uint64_t generation) {
    std::uint64_t t = ticket_.load(std::memory_order_acquire);
    while (t >> 32 == generation && (t & kOpen) != 0) {
      if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    }
    return false;
  }

  void loop() {
    t_in_pool = true;
    std::uint64_t seen = 0;
    auto woken = [&] {
      return stop_.load(std::memory_order_acquire) || ticket_.load(std::memory_order_acquire) >> 32 != seen;
    };
    for (;;) {
      if (!spin_until(woken)) {
        std::unique_lock lock(mutex_);
        sleeping_.fetch_add(1, std::memory_order_relaxed);
        wake_.wait(lock, woken);
        sleeping_.fetch_sub(1, std::memory_order_relaxed);
      }
      if (stop_.load(std::memory_order_acquire)) return;
      seen = ticket_.load(std::memory_order_acquire) >> 32;
      if (!join(seen)) continue;  // the caller already ran every chunk
      Job& job = *job_.load(std::memory_order_relaxed);
      job.work();
      job.left.fetch_add(1, std::memory_order_acq_rel);  // the caller may return (and the job end) from here on
      notify(done_);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mutex_, mutex_;
  std::condition_variable wake_, done_;
  std::atomic<Job*> job_{nullptr};
  std::atomic<std::uint64_t> ticket_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleeping_{0};  // workers blocked on wake_
};

int default_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

std::mutex g_pool_mutex;
std::unique_ptr<Pool> g_pool;

// OpenBLAS's own threads split a call's work by their number, and its results change with that split
// (dot products, symv, the recursive LAPACK factorizations, gemm at some counts): a decomposition run
// with as many BLAS threads as --threads gave other bytes at each count. So OpenBLAS always runs
// single-threaded, and the pool's fixed chunks are the only parallelism.
void make_blas_single_threaded() { core::set_blas_threads(1); }

Pool& pool() {
  std::lock_guard lock(g_pool_mutex);
  if (!g_pool) {
    make_blas_single_threaded();
    g_pool = std::make_unique<Pool>(default_threads());
  }
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
  make_blas_single_threaded();
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

double estimated_seconds(Work w) {
  return std::max(w.flops / kCoreFlopsPerSecond, w.bytes / kCoreBytesPerSecond);
}

bool worth_splitting(Work w) {
  if (t_in_pool) return false;
  Pool& p = pool();
  if (p.threads() == 1) return false;
  return estimated_seconds(w) >= (p.worker_awake() ? kSplitAwakeSeconds : kSplitAsleepSeconds);
}

void parallel_for(std::int64_t n, std::int64_t grain, Work work,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (worth_splitting(work)) {
    parallel_for(n, grain, body);
    return;
  }
  grain = std::max<std::int64_t>(grain, 1);
  for (std::int64_t b = 0; b < n; b += grain) body(b, std::min(n, b + grain));
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
    BlasSingleThreaded single;  // OpenBLAS would otherwise wake its own threads for a GEMV this small
    core::matmul_xwt(x, w, y, accumulate);
    return;
  }
  const float beta = accumulate ? 1.0f : 0.0f;
  const int ld_in = static_cast<int>(in), ld_out = static_cast<int>(out);
  const Work work = gemm_work(n, out, in);
  BlasSingleThreaded single;
  // Tall x (the decoder's linears): row blocks. Short x with a wide W (the LM head): column blocks.
  if (n >= 2 * kRowBlock) {
    parallel_for(n, kRowBlock, work, [&](std::int64_t r0, std::int64_t r1) {
      core::sgemm_rm(false, true, static_cast<int>(r1 - r0), ld_out, ld_in, 1.0f, x.data() + r0 * in, ld_in,
                     w.data(), ld_in, beta, y.data() + r0 * out, ld_out);
    });
  } else {
    parallel_for(out, kColBlock, work, [&](std::int64_t c0, std::int64_t c1) {
      core::sgemm_rm(false, true, static_cast<int>(n), static_cast<int>(c1 - c0), ld_in, 1.0f, x.data(), ld_in,
                     w.data() + c0 * in, ld_in, beta, y.data() + c0, ld_out);
    });
  }
}

}  // namespace latentllm::core
