// A quantized matrix as ONNX Runtime's com.microsoft::MatMulNBits reads it (the ONNX export's 4-bit
// modules; docs/QUANT.md "Exports"). MatMulNBits computes Y = A·W'ᵀ with W' [N, K] stored as B
// [N, n_blocks, blob_size] (codes packed low bits first along K, the last block zero-padded), scales
// [N·n_blocks] of A's type and optional zero points, dequantizing (code − zero_point)·scale: latentllm's
// packed layout and w' = s·(c − z) as they are (src/quant/pack.hpp), blocks being groups.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/pack.hpp"

namespace latentllm::format {

// MatMulNBits' inputs B, scales and zero_points of a packed W' [N, K], and its attributes. Scales: the
// checkpoint's F16 values (the graph reads activations in float32, so a Cast widens them, exactly, to
// the float32 MatMulNBits then wants). Zero points: when every one is an integer in [0, 2^bits − 1]
// (GPTQ's grid), uint8 codes packed like B, each row padded to whole bytes. Otherwise (the min–max grid's
// fractional origins) the checkpoint's F16 zero points, which the graph does not give MatMulNBits: ONNX
// Runtime's CPU kernel takes float zero points only at 2 and 4 bits and then dequantizes all of B on
// every call. It runs MatMulNBits without zero points (the default 2^(bits−1), its fast prepacked
// path) and subtracts the rest per group, as quant::gemv does:
//   x·W'ᵀ = Σ_g s_g·(Σ_{k∈g} c_k·x_k − z_g·Σ_{k∈g} x_k)
//         = MatMulNBits(x)[zero 2^(bits−1)] − Σ_g (z_g − 2^(bits−1))·s_g·Σ_{k∈g} x_k.
struct NBitsTensors {
  std::int64_t N = 0, K = 0;
  int bits = 0, block_size = 0;
  std::vector<std::int64_t> b_dims;     // [N, n_blocks, blob_size]
  std::vector<std::uint8_t> b;          // the packed codes as stored
  std::vector<std::uint16_t> scales;    // [N·n_blocks] F16
  std::vector<std::uint8_t> zeros_u8;   // [N·⌈n_blocks·bits/8⌉] integer zero points, or empty
  std::vector<std::uint16_t> zeros_f16; // [N·n_blocks] F16 fractional zero points, or empty

  std::int64_t blocks() const { return b_dims[1]; }
  int default_zero() const { return 1 << (bits - 1); }  // MatMulNBits' zero point when it has none
};

// Why ONNX Runtime's CPU MatMulNBits cannot hold a matrix of `bits`-bit codes in groups of `group`
// ("" when it can): it takes 2, 4 and 8 bits and blocks of 16, 32, 64, 128 or 256.
std::string nbits_unsupported(int bits, int group);
inline std::string nbits_unsupported(const quant::PackedMatrix& p) { return nbits_unsupported(p.bits, p.group); }

// The tensors of p (nbits_unsupported(p) must be ""; Error otherwise).
NBitsTensors nbits_tensors(const quant::PackedMatrix& p);

}  // namespace latentllm::format
