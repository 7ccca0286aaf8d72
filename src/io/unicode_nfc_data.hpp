// Unicode tables for NFC (generated into unicode_nfc_data.cpp by scripts/gen_unicode_nfc.py).
#pragma once

#include <cstddef>
#include <cstdint>

namespace latentllm::io::nfc_data {

struct CccRange {
  std::uint32_t first, last;
  std::uint8_t ccc;
};
struct Decomposition {
  std::uint32_t cp, first, second;  // second = 0: singleton decomposition
};
struct Composition {
  std::uint32_t first, second, composite;
};

extern const char kUnicodeVersion[];
extern const CccRange kCcc[];
extern const std::size_t kCccCount;
extern const Decomposition kDecomp[];
extern const std::size_t kDecompCount;
extern const Composition kComp[];
extern const std::size_t kCompCount;

}  // namespace latentllm::io::nfc_data
