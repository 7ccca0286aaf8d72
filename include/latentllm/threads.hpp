// The library's threads: one pool (src/core/parallel.hpp) runs every parallel part of the forward
// pass, the calibration statistics and the joint solvers, each thread calling single-threaded BLAS
// on its share; OpenBLAS's own threads serve the BLAS and LAPACK calls made outside the pool.
#pragma once

namespace latentllm::core {

// Sets the pool's threads (the caller included) and OpenBLAS's. n = 0 uses every core.
void set_num_threads(int n);
// The pool's threads.
int num_threads();

}  // namespace latentllm::core
