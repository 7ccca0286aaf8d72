// The library's threads (latentllm/threads.hpp): one small pool whose idle workers spin only briefly
// (about 20-60 µs, so back-to-back regions start at once) and then sleep (block on a condition
// variable). OpenMP's spin-waiting (libgomp spins ~300k iterations after each
// region) next to OpenBLAS's own pthread pool, or next to any other busy process on a 2-core machine,
// burned most of the cycles in measurements (bench/results/threads).
// So every parallel part of the forward runs here, GEMMs included: each thread calls a
// single-threaded sgemm on its share of the output. Work is handed out in chunks dynamically, so a
// descheduled thread delays only the chunk it holds, and the caller never waits for a worker that
// took none. A loop whose stated Work is too small to pay for a wake-up runs on the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <Eigen/Core>

#include "latentllm/tensor.hpp"

namespace latentllm::core {

// Per-thread float scratch aligned like Eigen's own matrices. Eigen's vectorized reductions (sum,
// max) handle an unaligned head with scalar steps, so their summation order depends on the address
// alignment; a fixed alignment makes results bit-identical whichever thread runs a task.
using ScratchF = std::vector<float, Eigen::aligned_allocator<float>>;


// True on a thread that is running a parallel_for body.
bool in_parallel_region();

// Runs body(begin, end) over [0, n) in chunks of at most `grain` items (end − begin <= grain), on
// the forward's threads. Returns when every chunk is done; rethrows the first exception a chunk
// threw. Calls from inside a body run their chunks serially, on the thread of that body: the task
// graph's jobs (src/graph) are chunks of one region, so a job's own loops never wait for the pool and
// never put more threads to work than --threads.
void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& body);

// The whole work of a loop: floating-point operations and bytes read or written (weights, inputs,
// outputs), for deciding whether it pays to hand it to other threads.
struct Work {
  double flops = 0;
  double bytes = 0;

  Work operator+(Work o) const { return {flops + o.flops, bytes + o.bytes}; }
  Work operator*(double times) const { return {flops * times, bytes * times}; }
};

// The work of a float32 product C: [m, n] = A: [m, k] · B: [k, n] (each operand read once, C written).
inline Work gemm_work(std::int64_t m, std::int64_t n, std::int64_t k) {
  const double dm = static_cast<double>(m), dn = static_cast<double>(n), dk = static_cast<double>(k);
  return {2 * dm * dn * dk, 4 * (dm * dk + dk * dn + dm * dn)};
}

// The single-thread time a loop of this work is estimated to take (seconds): the longer of its flops
// at one core's compute rate and its bytes at one core's cache/memory rate (a roofline).
double estimated_seconds(Work w);

// True when a loop of this work is worth running on the pool: its estimated time exceeds what waking
// a thread costs. That cost depends on the workers' state, so the threshold has two levels: a few
// microseconds while a worker is still spinning after the last region (back-to-back regions of one
// forward), about a hundred while every worker sleeps (a futex wake-up, and on a loaded machine the
// worker's scheduling). False on one thread and inside a parallel region.
bool worth_splitting(Work w);

// parallel_for(n, grain, body) when worth_splitting(work), else the same chunks in order on the
// calling thread: the decision changes who runs a chunk, never the chunks, so results stay
// bit-identical whatever it decides.
void parallel_for(std::int64_t n, std::int64_t grain, Work work,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

// Makes OpenBLAS single-threaded for its lifetime (restores the previous thread count), so that
// the pool's threads can each call sgemm without oversubscribing the cores.
class BlasSingleThreaded {
 public:
  BlasSingleThreaded();
  ~BlasSingleThreaded();
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  int saved_;
};

// y = x·Wᵀ (+ y if accumulate). x: [n, in], w: [out, in], y: [n, out] (resized unless accumulate).
// Split by row blocks of y (tall x) or column blocks (the LM head), one single-threaded sgemm each.
void parallel_xwt(const MatrixF& x, const MatrixF& w, MatrixF& y, bool accumulate = false);

}  // namespace latentllm::core
