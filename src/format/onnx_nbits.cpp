#include "format/onnx_nbits.hpp"

#include <cmath>

#include <fmt/format.h>

#include "latentllm/error.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::format {
namespace {

// Every zero point an integer in [0, maxq]: then MatMulNBits' uint8 zero points hold them.
bool integer_zeros(const quant::PackedMatrix& p) {
  const float maxq = static_cast<float>((1 << p.bits) - 1);
  for (const std::uint16_t h : p.zeros) {
    const float z = f16_to_f32(h);
    if (!(z >= 0.0f && z <= maxq && z == std::nearbyint(z))) return false;
  }
  return true;
}

// [N·⌈n_g·bits/8⌉]: zero point g of row n at bits [g·bits, (g + 1)·bits) of the row's bytes, low bits
// first (bits divides 8).
std::vector<std::uint8_t> packed_zeros(const quant::PackedMatrix& p) {
  const std::int64_t n_g = p.groups(), row_bytes = (n_g * p.bits + 7) / 8;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(p.rows * row_bytes), 0);
  for (std::int64_t r = 0; r < p.rows; ++r) {
    for (std::int64_t g = 0; g < n_g; ++g) {
      const auto z = static_cast<unsigned>(f16_to_f32(p.zeros[static_cast<std::size_t>(r * n_g + g)]));
      const std::int64_t bit = g * p.bits;
      out[static_cast<std::size_t>(r * row_bytes + bit / 8)] |= static_cast<std::uint8_t>(z << (bit % 8));
    }
  }
  return out;
}

}  // namespace

std::string nbits_unsupported(int bits, int group) {
  if (bits != 2 && bits != 4 && bits != 8) return fmt::format("{}-bit codes (MatMulNBits takes 2, 4 or 8 bits)", bits);
  if (group < 16 || group > 256 || (group & (group - 1)) != 0) {
    return fmt::format("groups of {} (MatMulNBits takes blocks of 16, 32, 64, 128 or 256)", group);
  }
  return "";
}

NBitsTensors nbits_tensors(const quant::PackedMatrix& p) {
  if (const std::string why = nbits_unsupported(p); !why.empty()) {
    throw Error(fmt::format("MatMulNBits of a [{}, {}] matrix: {}", p.rows, p.cols, why));
  }
  NBitsTensors t;
  t.N = p.rows;
  t.K = p.cols;
  t.bits = p.bits;
  t.block_size = p.group;
  t.b_dims = {p.rows, p.groups(), quant::group_bytes(p.spec())};
  t.b = p.codes;
  t.scales = p.scales;
  if (integer_zeros(p)) {
    t.zeros_u8 = packed_zeros(p);
  } else {
    t.zeros_f16 = p.zeros;
  }
  return t;
}

}  // namespace latentllm::format
