// write_safetensors: the layout the reference serializer produces (8-byte little-endian header
// length, compact JSON header padded with spaces to a multiple of 8 so the data region starts
// aligned, tensors back to back), except that tensors keep the caller's order.
#include <bit>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/mapped_file.hpp"
#include "io/safetensors_header.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"

namespace latentllm::io {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// The value count of one tensor: data.size() must equal numel(shape) (= nbytes / dtype size).
void check_count(const TensorToWrite& t, std::uint64_t nbytes, const std::string& origin) {
  const std::uint64_t numel = nbytes / dtype_size(t.dtype);
  if (numel != t.data.size()) {
    throw FormatError(fmt::format("{}: tensor {}: value count for shape [{}] (expected {}, got {})", origin, t.name,
                                  fmt::join(t.shape, ", "), numel, t.data.size()));
  }
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string origin = path.string();
  std::set<std::string> seen;
  std::vector<detail::HeaderEntry> entries;  // the header: names, dtypes, shapes, data offsets
  std::uint64_t data_size = 0;
  for (const auto& t : tensors) {
    detail::check_tensor_name(t.name, seen, origin);
    const std::uint64_t nbytes = detail::checked_nbytes(t.name, t.dtype, t.shape, origin);
    check_count(t, nbytes, origin);
    entries.push_back({t.name, t.dtype, t.shape, data_size, data_size + nbytes});
    data_size += nbytes;  // cannot overflow: every tensor's values exist in memory as floats
  }
  const std::string header = detail::serialize_header(entries, metadata, origin);

  std::vector<std::byte> buf(8 + header.size() + data_size);  // the whole file
  const std::uint64_t n = header.size();
  std::memcpy(buf.data(), &n, 8);  // little-endian (static_assert above)
  std::memcpy(buf.data() + 8, header.data(), header.size());
  std::byte* out = buf.data() + 8 + header.size();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    detail::encode_values(tensors[i].dtype, tensors[i].data, out);
    out += entries[i].end - entries[i].begin;
  }
  core::write_file_atomic(path, buf);
}

}  // namespace latentllm::io
