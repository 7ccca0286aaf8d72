// Helpers shared by the libFuzzer targets in this folder (one target per fuzz_*.cpp).
//
// A target feeds one input to a library entry point and accepts exactly one outcome besides success:
// a latentllm::Error (the typed exception for bad input). Anything else -- another exception, a
// sanitizer report, a crash, a leak, a timeout, an allocation over -rss_limit_mb -- is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "latentllm/error.hpp"

namespace latentllm::fuzz {

// Separates the files of a multi-file input (e.g. vocab.json, merges.txt, text). The corpus
// generator scripts/gen_fuzz_corpus.py and fuzz/*.dict use the same bytes.
inline constexpr std::string_view kSplit = "\n@@split@@\n";

// The first n - 1 kSplit-separated parts of `data`, and the rest as the n-th part (which may contain
// kSplit). Missing parts are empty.
std::vector<std::string_view> split_input(const std::uint8_t* data, std::size_t size, std::size_t n);

// Writes `content` to `name` (may contain "/") in this process's scratch directory and returns its
// path. The directory is created on first use under $TMPDIR (or /dev/shm, or the system temporary
// directory) and removed at exit.
std::filesystem::path write_scratch(const std::string& name, std::string_view content);

// Removes `name` from the scratch directory (so an optional file is absent for the next input).
void remove_scratch(const std::string& name);

// True when LATENTLLM_FUZZ_VERBOSE is set: accept_typed_errors then prints each outcome to stderr
// (to see what a seed or a crash input does: `LATENTLLM_FUZZ_VERBOSE=1 fuzz_config FILE`).
bool verbose();

// Runs fn(); a latentllm::Error is the expected failure for bad input and is swallowed.
template <typename Fn>
void accept_typed_errors(Fn&& fn) {
  try {
    fn();
    if (verbose()) std::fprintf(stderr, "accepted\n");
  } catch (const Error& e) {
    if (verbose()) std::fprintf(stderr, "typed error: %s\n", e.what());
  }
}

}  // namespace latentllm::fuzz
