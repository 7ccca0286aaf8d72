// Fuzz target: Hugging Face tokenizer.json (src/io/tokenizer_json.cpp, hf_tokenizer.cpp, the BPE model,
// normalizers, pre-tokenizers, regexes, NFC) loading and encoding.
// Input: tokenizer.json, kSplit, tokenizer_config.json (empty: none), kSplit, the text to encode
// (the rest, any bytes).
#include <cstdint>

#include "tokenizer_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace latentllm::fuzz;
  const auto p = split_input(data, size, 3);
  run_tokenizer({{"tokenizer.json", p[0]}, {"tokenizer_config.json", p[1]}}, p[2]);
  return 0;
}
