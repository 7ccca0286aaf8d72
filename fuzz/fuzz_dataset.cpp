// Fuzz target: the evaluation / calibration text readers (src/io/dataset.cpp).
// Input: one selector byte, then the file. Selector % 8: 0 wikitext2, 1 ptb, 2 c4, 3 text (through
// build_eval_text), 4..7 read_jsonl_texts with max_docs = selector % 8 - 4 (0 = all).
#include <cstdint>

#include "support.hpp"
#include "latentllm/dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace latentllm;
  if (size == 0) return 0;
  const int selector = data[0] % 8;
  const auto parts = fuzz::split_input(data + 1, size - 1, 1);
  const auto path = fuzz::write_scratch("dataset.txt", parts[0]);
  fuzz::accept_typed_errors([&] {
    if (selector < 4) {
      constexpr io::Dataset kSets[] = {io::Dataset::WikiText2, io::Dataset::PTB, io::Dataset::C4, io::Dataset::Text};
      (void)io::build_eval_text(kSets[selector], path);
    } else {
      const auto docs = io::read_jsonl_texts(path, static_cast<std::size_t>(selector - 4));
      if (docs.empty()) __builtin_trap();  // documented: "empty dataset" is thrown instead
    }
  });
  return 0;
}
