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

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void run(Job& job) {
    std::lock_guard serial(run_mutex_);  // one job at a time if several threads call in
    {
      std::lock_guard lock(mutex_);
      job_ = &job;
      ++generation_;
      busy_ = static_cast<int>(workers_.size());
    }
    wake_.notify_all();
    t_in_pool = true;
    job.work();
    t_in_pool = false;
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop() {
    t_in_pool = true;
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      Job* job = job_;
      lock.unlock();
      job->work();
      lock.lock();
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mutex_, mutex_;
  std::condition_variable wake_, done_;
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
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
