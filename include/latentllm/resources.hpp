// Process resource figures reported by long-running commands, and the memory plan commands check
// against a budget before they start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace latentllm::core {

// Peak resident set size of this process so far, in bytes (getrusage ru_maxrss).
std::int64_t peak_rss_bytes();

// Installed physical memory in bytes (sysconf); 0 when unknown.
std::int64_t physical_memory_bytes();

// Keeps freed large blocks in the heap for reuse (glibc mallopt: mmap and trim thresholds of 1 GiB).
// Compression allocates many short-lived [f, n] double matrices of tens to hundreds of MiB. glibc
// serves blocks above its mmap threshold (32 MiB at most by default) with fresh zeroed pages every
// time, and the page faults can take a large part of joint up-down's time. Process-wide, so for
// programs (the CLI, the benchmarks) to call at
// start; the library itself never changes allocator settings.
void reuse_large_allocations();

// What a command will hold in memory at its peak, item by item, against a budget: planned before any
// work so that a run that cannot fit says so at once instead of being killed midway. `ppl` builds
// one per evaluation mode (eval::plan_perplexity_memory); `compress` is meant to do the same.
struct MemoryItem {
  std::string name;      // "hidden states", "one layer (float32)", ...
  std::int64_t bytes = 0;
  std::string detail;    // how it was counted, e.g. "140 windows x 2048 tokens x 2048 x 4 B"
};

struct MemoryPlan {
  std::string title;       // the mode the plan is for, e.g. "layer-major"
  std::int64_t budget = 0;  // bytes
  std::vector<MemoryItem> items;

  void add(std::string name, std::int64_t bytes, std::string detail = {});
  std::int64_t total() const;
  bool fits() const { return total() <= budget; }
  // "<title>: <total> of <budget> budget (fits|does not fit)", then one line per item
  // "  <name padded>  <size>  <detail>".
  std::string describe() const;
  // "<name> <size>, <name> <size>, ..." on one line (for error messages).
  std::string summary() const;
};

// 1536 -> "1.50 KiB": B, KiB, MiB, GiB, TiB with two decimals (bytes as an integer).
std::string format_bytes(std::int64_t bytes);
// A byte count: whole bytes ("21474836480") or a decimal number with a binary unit K, M, G or T,
// optionally followed by "iB" or "B" (case-insensitive: "20G", "20GiB", "1.5g", "512M" = 512 MiB).
// Throws ConfigError "<what> (expected a byte count such as 20G, 512M or 21474836480, got <text>)"
// for anything else, a count of 0 or one beyond 2^62.
std::int64_t parse_bytes(const std::string& text, const std::string& what);
// The default budget of commands that plan their memory, and which bound set it (`source`, printed with
// the plan): physical memory minus 2 GiB, lowered to the memory available now (MemAvailable of
// /proc/meminfo plus this process's resident bytes, less 512 MiB) and to the limit of the cgroup the
// process runs in (cgroup v2 memory.max or v1 memory.limit_in_bytes, less what the cgroup holds beside
// this process and 512 MiB); at least 1 GiB.
struct MemoryBudget {
  std::int64_t bytes = 0;
  std::string source;  // "physical memory - 2 GiB", "available memory", "cgroup limit"
};
MemoryBudget default_budget();
std::int64_t default_memory_budget();  // default_budget().bytes
// The same from the figures given (bytes; < 0: unknown), for tests.
MemoryBudget budget_from(std::int64_t physical, std::int64_t available, std::int64_t cgroup_limit,
                         std::int64_t cgroup_usage, std::int64_t own_rss);
// This process's resident bytes now (/proc/self/statm); 0 when unknown.
std::int64_t current_rss_bytes();
// "10G": a byte count rounded up to whole GiB, for --max-memory advice in messages.
std::string gib_option(std::int64_t bytes);

}  // namespace latentllm::core
