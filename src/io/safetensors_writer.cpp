// write_safetensors: the layout the reference serializer produces (8-byte little-endian header
// length, compact JSON header padded with spaces to a multiple of 8 so the data region starts
// aligned, tensors back to back), except that tensors keep the caller's order.
#include <bit>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.hpp"
#include "io/safetensors_header.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"

namespace latentllm::io {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

using ordered_json = nlohmann::ordered_json;

// Byte length of one tensor; checks the name, the shape and that `data` holds numel(shape) values.
std::uint64_t checked_nbytes(const TensorToWrite& t, const std::string& origin) {
  std::uint64_t numel = 1;
  for (const auto d : t.shape) {
    if (d < 0 || __builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel)) {
      throw FormatError(fmt::format("{}: tensor {}: shape [{}] (expected non-negative dimensions with a 64-bit size)",
                                    origin, t.name, fmt::join(t.shape, ", ")));
    }
  }
  if (numel != t.data.size()) {
    throw FormatError(fmt::format("{}: tensor {}: value count for shape [{}] (expected {}, got {})", origin, t.name,
                                  fmt::join(t.shape, ", "), numel, t.data.size()));
  }
  return numel * dtype_size(t.dtype);  // cannot overflow: numel values exist in memory as floats
}

void encode(const TensorToWrite& t, std::byte* out) {
  const std::size_t n = t.data.size();
  switch (t.dtype) {
    case DType::F32:
      if (n > 0) std::memcpy(out, t.data.data(), n * sizeof(float));
      break;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = f32_to_f16(t.data[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      break;
    case DType::BF16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = f32_to_bf16(t.data[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      break;
  }
}

// The header JSON, padded with spaces to a multiple of 8 bytes (as the reference does).
std::string build_header(std::span<const TensorToWrite> tensors, std::span<const std::uint64_t> nbytes,
                         const std::map<std::string, std::string>& metadata, const std::string& origin) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    ordered_json e = ordered_json::object();
    e["dtype"] = std::string(dtype_name(t.dtype));
    e["shape"] = t.shape;
    e["data_offsets"] = ordered_json::array({offset, offset + nbytes[i]});
    header[t.name] = std::move(e);
    offset += nbytes[i];
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::type_error& e) {  // names or metadata that are not valid UTF-8
    throw FormatError(fmt::format("{}: header cannot be encoded ({})", origin, e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > detail::kMaxHeaderSize) {  // readers would refuse the file
    throw FormatError(fmt::format("{}: header length too large (expected <= {}, got {})", origin,
                                  detail::kMaxHeaderSize, text.size()));
  }
  return text;
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string origin = path.string();
  std::set<std::string_view> seen;
  std::vector<std::uint64_t> nbytes;
  std::uint64_t data_size = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !seen.insert(t.name).second) {
      throw FormatError(fmt::format("{}: tensor name {} (expected unique, non-empty and not __metadata__)", origin,
                                    nlohmann::json(t.name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
    }
    nbytes.push_back(checked_nbytes(t, origin));
    data_size += nbytes.back();
  }
  const std::string header = build_header(tensors, nbytes, metadata, origin);

  std::vector<std::byte> buf(8 + header.size() + data_size);  // the whole file
  const std::uint64_t n = header.size();
  std::memcpy(buf.data(), &n, 8);  // little-endian (static_assert above)
  std::memcpy(buf.data() + 8, header.data(), header.size());
  std::byte* out = buf.data() + 8 + header.size();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    encode(tensors[i], out);
    out += nbytes[i];
  }
  core::write_file_atomic(path, buf);
}

}  // namespace latentllm::io
