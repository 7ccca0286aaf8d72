// Fuzz target: GPT-2 byte-level BPE (src/io/bpe_gpt2.cpp, bpe_model.cpp, hf_components.cpp, regex.cpp)
// loading and encoding.
// Input: vocab.json, kSplit, merges.txt, kSplit, tokenizer_config.json (empty: none), kSplit, the text
// to encode (the rest, any bytes).
#include <cstdint>

#include "tokenizer_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace latentllm::fuzz;
  const auto p = split_input(data, size, 4);
  run_tokenizer({{"vocab.json", p[0]}, {"merges.txt", p[1]}, {"tokenizer_config.json", p[2]}}, p[3]);
  return 0;
}
