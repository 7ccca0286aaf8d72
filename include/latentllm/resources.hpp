// Process resource figures reported by long-running commands.
#pragma once

#include <cstdint>

namespace latentllm::core {

// Peak resident set size of this process so far, in bytes (getrusage ru_maxrss).
std::int64_t peak_rss_bytes();

// Installed physical memory in bytes (sysconf); 0 when unknown.
std::int64_t physical_memory_bytes();

// Keeps freed large blocks in the heap for reuse (glibc mallopt: mmap and trim thresholds of 1 GiB).
// Compression allocates many short-lived [f, n] double matrices of tens to hundreds of MiB. glibc
// serves blocks above its mmap threshold (32 MiB at most by default) with fresh zeroed pages every
// time, and the page faults took over half of joint up-down's time (opt-tiny 20 %: 206 s -> 115 s,
// system time 150 s -> 43 s). Process-wide, so for programs (the CLI, the benchmarks) to call at
// start; the library itself never changes allocator settings.
void reuse_large_allocations();

}  // namespace latentllm::core
