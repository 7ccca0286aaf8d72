// Parsing and validation of a safetensors file layout (header + data region), shared by the reader
// and its tests. The checks follow the reference implementation (huggingface/safetensors
// `SafeTensors::read_metadata` and `Metadata::validate`):
//   8-byte little-endian header length N, N <= 100,000,000, 8 + N <= file size;
//   the header is a JSON object: an optional "__metadata__" string -> string map and one entry per
//   tensor {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to the data region;
//   sorted by offset, the tensors tile the data region exactly (no gap, no overlap, no trailing byte),
//   and every tensor's byte length equals numel(shape) × dtype size, all products checked for overflow.
// We also reject duplicate tensor names and nesting deeper than the schema needs (the reference's
// serde parser keeps the last duplicate silently), and dtypes other than F32/F16/BF16.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "latentllm/tensor.hpp"

namespace latentllm::io::detail {

// The reference's header size cap (safetensors `MAX_HEADER_SIZE`).
inline constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

struct HeaderEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets into the data region, [begin, end)
  std::uint64_t end = 0;
};

struct ParsedHeader {
  std::uint64_t header_size = 0;          // N; the data region starts at byte 8 + N
  std::vector<HeaderEntry> tensors;       // sorted by data offset (file order)
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Validates the whole layout of `file` (all bytes of a safetensors file). Every FormatError message
// starts with `origin` (the file path) and names the offending tensor.
ParsedHeader parse_safetensors_layout(std::span<const std::byte> file, const std::string& origin);

// The writing side, shared by write_safetensors and SafetensorsWriter so both produce the same bytes.
// Every FormatError message starts with `origin` (the file path).
//
// Checks a tensor name: non-empty, not "__metadata__", not already in `seen` (then added to it).
void check_tensor_name(const std::string& name, std::set<std::string>& seen, const std::string& origin);
// numel(shape) × dtype size, every product checked: FormatError "<origin>: tensor <name>: shape [..]
// (expected non-negative dimensions with a 64-bit size)" otherwise.
std::uint64_t checked_nbytes(const std::string& name, DType dtype, std::span<const std::int64_t> shape,
                             const std::string& origin);
// The header the reference serializer writes: compact JSON ("__metadata__" first when not empty,
// then the entries in the order given, with their data_offsets), padded with spaces to a multiple of
// 8 bytes so the data region starts aligned. FormatError when a name or metadata is not valid UTF-8
// or the header exceeds kMaxHeaderSize.
std::string serialize_header(std::span<const HeaderEntry> entries, const std::map<std::string, std::string>& metadata,
                             const std::string& origin);
// Stores `values` as `dtype` at `out` (values.size() × dtype size bytes, little-endian): F32 as is,
// F16/BF16 rounded to nearest even (f32_to_f16 / f32_to_bf16), U8 as the integers the values are (the
// caller's codes, each in [0, 255]).
void encode_values(DType dtype, std::span<const float> values, std::byte* out);

}  // namespace latentllm::io::detail
