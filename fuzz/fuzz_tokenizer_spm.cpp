// Fuzz target: SentencePiece tokenizer.model (src/io/sentencepiece_tokenizer.cpp over libsentencepiece)
// loading and encoding.
// Input: tokenizer_config.json (empty: none), kSplit, the text to encode, kSplit, tokenizer.model (the
// rest: a serialized ModelProto, any bytes).
#include <cstdint>

#include "tokenizer_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace latentllm::fuzz;
  const auto p = split_input(data, size, 3);
  run_tokenizer({{"tokenizer.model", p[2]}, {"tokenizer_config.json", p[0]}}, p[1]);
  return 0;
}
