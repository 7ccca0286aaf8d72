// The library's threads: one pool (src/core/parallel.hpp) runs every parallel part of the forward
// pass, the calibration statistics and the joint solvers, each thread calling single-threaded BLAS
// on its share; OpenBLAS itself always runs single-threaded (its threads split a call by their number,
// which changes the result's bits). A loop too small to pay for waking a thread runs on the calling
// thread (docs/ARCHITECTURE.md, "Threads").
#pragma once

namespace latentllm::core {

// Sets the pool's threads (the caller included); OpenBLAS stays single-threaded. n = 0 uses every core.
void set_num_threads(int n);
// The pool's threads.
int num_threads();
// How long an idle pool thread spins before it sleeps, in pause instructions (about 10-30 ns each);
// 0 sleeps at once (the pool before it spun), < 0 restores the default (2000). For benchmarks.
void set_pool_spin(int pauses);

}  // namespace latentllm::core
