// float32 -> F16 / BF16 rounding to nearest even, inline so loops over whole tensors vectorize (the
// safetensors writers encode gigabytes with them). The public f32_to_f16 / f32_to_bf16
// (latentllm/tensor.hpp) are these functions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace latentllm::core {

inline std::uint16_t f32_to_f16_rne(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan (keep nan quiet)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: round x / 2^-24 to nearest even
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // exact
    const float r = std::nearbyint(scaled);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(r));
  }
  // normal: rebias exponent, round mantissa to nearest even
  std::uint32_t m = abs + 0xc8000000u;  // exponent - 112
  m += 0xfffu + ((m >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (m >> 13));
}

inline std::uint16_t f32_to_bf16_rne(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

}  // namespace latentllm::core
