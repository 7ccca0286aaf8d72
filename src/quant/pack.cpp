#include "quant/pack.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "latentllm/error.hpp"

namespace latentllm::quant {

namespace {

// Ors the q-bit code into the row's bit stream at bit `bit` (a 3-bit code may straddle two bytes).
void put_code(std::uint8_t* row, std::int64_t bit, unsigned code) {
  const unsigned v = code << (bit % 8);
  row[bit / 8] |= static_cast<std::uint8_t>(v & 0xffu);
  if (v > 0xffu) row[bit / 8 + 1] |= static_cast<std::uint8_t>(v >> 8);
}

unsigned get_code(const std::uint8_t* row, std::int64_t bit, int bits) {
  unsigned v = row[bit / 8];
  if (bit % 8 + bits > 8) v |= static_cast<unsigned>(row[bit / 8 + 1]) << 8;
  return (v >> (bit % 8)) & ((1u << bits) - 1u);
}

std::string shape_str(const std::vector<std::int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// The stored shape [rows, n_g] of scales or zero points and its value count.
void check_grid_tensor(std::string_view name, std::string_view what, const std::vector<std::int64_t>& shape,
                       std::size_t size, std::int64_t rows, std::int64_t n_g) {
  if (shape != std::vector<std::int64_t>{rows, n_g}) {
    throw FormatError(fmt::format("{}: {} shape (expected [{}, {}], got {})", name, what, rows, n_g, shape_str(shape)));
  }
  if (size != static_cast<std::size_t>(rows * n_g)) {
    throw FormatError(fmt::format("{}: {} (expected {} values, got {})", name, what, rows * n_g, size));
  }
}

// The codes tensor [rows, n_g, G·q/8]: returns rows.
std::int64_t check_codes(std::string_view name, const QuantSpec& spec, std::int64_t cols, const PackedTensors& t) {
  const std::int64_t n_g = spec.groups(cols), gb = group_bytes(spec);
  const auto& s = t.codes_shape;
  std::int64_t bytes = 0;
  if (s.size() != 3 || s[0] < 0 || s[1] != n_g || s[2] != gb || __builtin_mul_overflow(s[0], n_g * gb, &bytes)) {
    throw FormatError(fmt::format("{}: packed codes shape (expected [rows, {}, {}] for {} columns at {} bits in groups "
                                  "of {}, got {})", name, n_g, gb, cols, spec.bits, spec.group, shape_str(s)));
  }
  if (t.codes.size() != static_cast<std::size_t>(bytes)) {
    throw FormatError(fmt::format("{}: packed codes (expected {} bytes, got {})", name, bytes, t.codes.size()));
  }
  return s[0];
}

// Scales finite and > 0, zero points finite, each at its [row, group].
void check_grid_values(std::string_view name, const PackedMatrix& p) {
  const std::int64_t n_g = p.groups();
  for (std::size_t k = 0; k < p.scales.size(); ++k) {
    const float s = f16_to_f32(p.scales[k]), z = f16_to_f32(p.zeros[k]);
    const auto r = static_cast<std::int64_t>(k) / n_g, g = static_cast<std::int64_t>(k) % n_g;
    if (!std::isfinite(s) || !(s > 0.0f)) {
      throw FormatError(fmt::format("{}: scale at [{}, {}] (expected a finite value > 0, got {})", name, r, g, s));
    }
    if (!std::isfinite(z)) {
      throw FormatError(fmt::format("{}: zero point at [{}, {}] (expected a finite value, got {})", name, r, g, z));
    }
  }
}

// The padding after the last column of every row holds zero codes (one canonical form per matrix).
void check_padding(std::string_view name, const PackedMatrix& p) {
  const std::int64_t rb = p.row_bytes(), used = p.cols * p.bits;
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const std::uint8_t* row = p.codes.data() + r * rb;
    for (std::int64_t bit = used; bit < rb * 8; bit += p.bits) {
      const unsigned c = get_code(row, bit, p.bits);
      if (c != 0) {
        throw FormatError(fmt::format(
            "{}: padding of row {} (expected zero codes after column {}, got {} at column {})", name, r,
            p.cols - 1, c, bit / p.bits));
      }
    }
  }
}

}  // namespace

PackedMatrix pack(const QuantizedMatrix& q) {
  PackedMatrix p;
  p.rows = q.rows;
  p.cols = q.cols;
  p.bits = q.spec.bits;
  p.group = q.spec.group;
  const std::int64_t rb = p.row_bytes();
  p.codes.assign(static_cast<std::size_t>(p.rows * rb), 0);
  for (std::int64_t r = 0; r < p.rows; ++r) {
    std::uint8_t* row = p.codes.data() + r * rb;
    const std::uint8_t* in = q.codes.data() + r * q.cols;
    for (std::int64_t c = 0; c < q.cols; ++c) put_code(row, c * p.bits, in[c]);
  }
  p.scales = q.scales;
  p.zeros = q.zeros;
  return p;
}

QuantizedMatrix unpack(const PackedMatrix& p) {
  QuantizedMatrix q;
  q.rows = p.rows;
  q.cols = p.cols;
  q.spec = p.spec();
  q.codes.resize(static_cast<std::size_t>(q.rows * q.cols));
  const std::int64_t rb = p.row_bytes();
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const std::uint8_t* row = p.codes.data() + r * rb;
    std::uint8_t* out = q.codes.data() + r * q.cols;
    for (std::int64_t c = 0; c < q.cols; ++c) out[c] = static_cast<std::uint8_t>(get_code(row, c * p.bits, p.bits));
  }
  q.scales = p.scales;
  q.zeros = p.zeros;
  return q;
}

PackedMatrix read_packed(std::string_view name, int bits, int group, std::int64_t cols, const PackedTensors& t) {
  const QuantSpec spec{bits, group, Grid::MinMax};
  try {
    check_spec(spec, name);
  } catch (const ConfigError& e) {
    throw FormatError(e.what());  // stored metadata: a malformed file, not a bad option
  }
  PackedMatrix p;
  p.rows = check_codes(name, spec, cols, t);
  p.cols = cols;
  p.bits = bits;
  p.group = group;
  check_grid_tensor(name, "scales", t.scales_shape, t.scales.size(), p.rows, p.groups());
  check_grid_tensor(name, "zero points", t.zeros_shape, t.zeros.size(), p.rows, p.groups());
  p.codes.assign(t.codes.begin(), t.codes.end());
  p.scales.assign(t.scales.begin(), t.scales.end());
  p.zeros.assign(t.zeros.begin(), t.zeros.end());
  check_grid_values(name, p);
  check_padding(name, p);
  return p;
}

}  // namespace latentllm::quant
