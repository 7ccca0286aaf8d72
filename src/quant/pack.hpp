// Packed storage of a quantized matrix (docs/FORMAT.md "Quantized tensors"): q-bit codes in bytes and
// the [rows, n_g] half-precision scales and zero points, and the validating reader of the three tensors.
//
// Packing order: each row is a little-endian bit stream, code c of group g at bits
// [(g·G + c)·q, (g·G + c + 1)·q) of the row's groups, bit b of the stream in bit b % 8 of byte b / 8
// (least significant first); a group fills G·q/8 whole bytes (G is a multiple of 8), the last group of a
// row is padded with zero codes to G. Rows are contiguous: the codes tensor is [rows, n_g, G·q/8] bytes.
// For q = 4 that is two codes per byte, the lower-indexed one in the low nibble; for q = 8 one code per
// byte. This is ONNX Runtime's com.microsoft::MatMulNBits layout of B ([N, k_blocks, blob_size], codes
// packed low bits first along K), so a module's tensors are MatMulNBits' B, scales and (with zero points
// of the scales' type) zero_points as they are; MatMulNBits also requires G to be a power of two >= 16.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "quant/quant.hpp"

namespace latentllm::quant {

// Bytes of one group's codes, G·q/8.
inline std::int64_t group_bytes(const QuantSpec& spec) { return std::int64_t{spec.group} * spec.bits / 8; }

// Bytes a packed [rows, cols] matrix stores: its codes (the last group padded) and 2 + 2 per group
// (scale and zero point). The byte accounting of a rank–bit budget: 8·bytes / (rows·cols) bits per weight.
inline std::int64_t packed_bytes(std::int64_t rows, std::int64_t cols, const QuantSpec& spec) {
  return rows * spec.groups(cols) * (group_bytes(spec) + 4);
}

struct PackedMatrix {
  std::int64_t rows = 0, cols = 0;
  int bits = 4, group = 128;
  std::vector<std::uint8_t> codes;    // [rows, n_g, G·q/8]
  std::vector<std::uint16_t> scales;  // [rows, n_g] F16
  std::vector<std::uint16_t> zeros;   // [rows, n_g] F16, in code units

  QuantSpec spec() const { return QuantSpec{bits, group, Grid::MinMax}; }
  std::int64_t groups() const { return spec().groups(cols); }
  std::int64_t row_bytes() const { return groups() * group_bytes(spec()); }
};

// The packed form of q (its codes must be within [0, maxq], as every quantizer gives).
PackedMatrix pack(const QuantizedMatrix& q);
// The one-byte-per-code form back (the grid rule is not stored: unpack gives Grid::MinMax).
QuantizedMatrix unpack(const PackedMatrix& p);

// The three stored tensors of a quantized module, as a checkpoint holds them (shapes as stored).
struct PackedTensors {
  std::vector<std::int64_t> codes_shape;   // expected [rows, n_g, G·q/8], U8
  std::span<const std::uint8_t> codes;
  std::vector<std::int64_t> scales_shape;  // expected [rows, n_g], F16
  std::span<const std::uint16_t> scales;
  std::vector<std::int64_t> zeros_shape;   // expected [rows, n_g], F16
  std::span<const std::uint16_t> zeros;
};

// Validates and copies a module's stored tensors: `bits` and `group` from its metadata, `cols` its
// input dimension. Throws FormatError naming `name` for bits outside {2, 3, 4, 8}, a group size that is
// not a positive multiple of 8, a tensor's shape or byte count that disagrees with [rows, cols] (rows
// from the codes' first dimension), a scale that is not finite and > 0, a zero point that is not
// finite, or a non-zero padding code.
PackedMatrix read_packed(std::string_view name, int bits, int group, std::int64_t cols, const PackedTensors& t);

}  // namespace latentllm::quant
