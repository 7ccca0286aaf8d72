// Fuzz target: the validating reader of packed quantized tensors (src/quant/pack.cpp,
// quant::read_packed) and, for what it accepts, unpacking and dequantizing.
//
// Input: a header of 10 little-endian int16 values: bits, group, cols, the codes tensor's shape (3 dims),
// the scales' shape (2 dims), the zero points' shape (2 dims); then the codes' bytes, kSplit, the
// scales' bytes, kSplit, the zero points' bytes (F16 values; an odd last byte is dropped).
// An accepted matrix must unpack to codes within [0, 2^q − 1], pack back to the same bytes (the one
// stored form the padding rule guarantees) and dequantize to finite values.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "quant/pack.hpp"
#include "support.hpp"

namespace {

using namespace latentllm;

std::vector<std::uint16_t> halves(std::string_view b) {
  std::vector<std::uint16_t> out(b.size() / 2);
  if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * 2);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t kHeader = 20;
  if (size < kHeader) return 0;
  std::int16_t h[10];
  std::memcpy(h, data, kHeader);
  const auto parts = fuzz::split_input(data + kHeader, size - kHeader, 3);
  const std::vector<std::uint8_t> codes(parts[0].begin(), parts[0].end());
  const std::vector<std::uint16_t> scales = halves(parts[1]), zeros = halves(parts[2]);
  quant::PackedTensors t;
  t.codes_shape = {h[3], h[4], h[5]};
  t.scales_shape = {h[6], h[7]};
  t.zeros_shape = {h[8], h[9]};
  t.codes = codes;
  t.scales = scales;
  t.zeros = zeros;
  fuzz::accept_typed_errors([&] {
    const quant::PackedMatrix p = quant::read_packed("input", h[0], h[1], h[2], t);
    const quant::QuantizedMatrix q = quant::unpack(p);
    for (const std::uint8_t c : q.codes) {
      if (c > q.spec.maxq()) __builtin_trap();
    }
    if (quant::pack(q).codes != p.codes) __builtin_trap();
    const MatrixD w = quant::dequantize(q);
    if (!w.allFinite()) __builtin_trap();
  });
  return 0;
}
