#include <bit>
#include <cmath>
#include <cstring>

#include "core/dtype_convert.hpp"
#include "latentllm/error.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::U8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::U8: return "U8";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "F32") return DType::F32;
  if (name == "F16") return DType::F16;
  if (name == "BF16") return DType::BF16;
  throw FormatError(fmt::format("unsupported dtype (expected F32, F16 or BF16, got {})", name));
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {  // inf / nan
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {  // zero
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<std::uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

std::uint16_t f32_to_f16(float f) { return core::f32_to_f16_rne(f); }

float bf16_to_f32(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

std::uint16_t f32_to_bf16(float f) { return core::f32_to_bf16_rne(f); }

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

void TensorView::to_f32(std::span<float> out) const {
  const auto n = static_cast<std::size_t>(numel());
  if (out.size() != n) {
    throw Error(fmt::format("{}: to_f32 buffer size (expected {}, got {})", name, n, out.size()));
  }
  to_f32(0, out);
}

void TensorView::to_f32(std::int64_t first, std::span<float> out) const {
  const auto n = out.size();
  if (first < 0 || static_cast<std::uint64_t>(first) + n > static_cast<std::uint64_t>(numel())) {
    throw Error(fmt::format("{}: to_f32 range [{}, {}) (expected within [0, {}))", name, first,
                            static_cast<std::uint64_t>(first) + n, numel()));
  }
  if (n == 0) return;  // an empty tensor: out.data() may be null, which memcpy must never get
  const std::byte* src = data + static_cast<std::size_t>(first) * dtype_size(dtype);
  switch (dtype) {
    case DType::F32:
      std::memcpy(out.data(), src, n * 4);
      break;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      break;
    case DType::BF16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      break;
    case DType::U8:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::to_integer<unsigned>(src[i]));
      break;
  }
}

std::vector<float> TensorView::to_f32() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  to_f32(out);
  return out;
}

}  // namespace latentllm
