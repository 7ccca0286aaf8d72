// Process resource figures reported by long-running commands.
#pragma once

#include <cstdint>

namespace latentllm::core {

// Peak resident set size of this process so far, in bytes (getrusage ru_maxrss).
std::int64_t peak_rss_bytes();

}  // namespace latentllm::core
