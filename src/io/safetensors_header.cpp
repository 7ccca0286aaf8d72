#include "io/safetensors_header.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/dtype_convert.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io::detail {
namespace {

using json = nlohmann::json;

// Every dtype name the reference knows, to tell "unsupported here" from "not a safetensors dtype".
constexpr std::array<std::string_view, 19> kReferenceDtypes = {
    "BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "I16",
    "U16",  "F16", "BF16", "I32",    "U32",     "F32",     "F64", "I64",     "U64"};

// The maximal nesting the schema needs: root object (0) > tensor entry (1) > shape array (2).
constexpr int kMaxContainerDepth = 2;

// A JSON value for an error message, cut to a readable length.
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::uint64_t read_u64_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(std::to_integer<unsigned>(p[i])) << (8 * i);
  return v;
}

// Parses the header text. The callback rejects duplicate keys (nlohmann, like serde, would keep one
// silently) and nesting beyond the schema, so a hostile header cannot build deep trees.
json parse_header_json(std::string_view text, const std::string& origin) {
  std::set<std::string> top_keys, entry_keys;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth > kMaxContainerDepth) {
      throw FormatError(fmt::format("{}: header nesting (expected at most {} levels, got more)", origin,
                                    kMaxContainerDepth + 1));
    }
    if (event == E::object_start && depth == 1) entry_keys.clear();
    if (event == E::key && depth <= 2) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!(depth == 1 ? top_keys : entry_keys).insert(key).second) {
        throw FormatError(fmt::format("{}: duplicate key {} in the header", origin, json(key).dump()));
      }
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw FormatError(fmt::format("{}: header is not valid JSON ({})", origin, e.what()));
  }
}

std::map<std::string, std::string> parse_metadata(const json& m, const std::string& origin) {
  std::map<std::string, std::string> out;
  if (m.is_null()) return out;
  if (!m.is_object()) {
    throw FormatError(fmt::format("{}: __metadata__ (expected an object of strings, got {})", origin, brief(m)));
  }
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) {
      throw FormatError(fmt::format("{}: __metadata__.{} (expected a string, got {})", origin, k, brief(v)));
    }
    out.emplace(k, v.get<std::string>());
  }
  return out;
}

const json& field(const json& entry, const char* key, const std::string& ctx) {
  const auto it = entry.find(key);
  if (it == entry.end()) throw FormatError(fmt::format("{}: missing key {}", ctx, key));
  return *it;
}

DType parse_entry_dtype(const json& v, const std::string& ctx) {
  if (!v.is_string()) throw FormatError(fmt::format("{}: dtype (expected a string, got {})", ctx, brief(v)));
  const auto& name = v.get_ref<const std::string&>();
  if (name == "F32") return DType::F32;
  if (name == "F16") return DType::F16;
  if (name == "BF16") return DType::BF16;
  if (name == "U8") return DType::U8;
  const bool known = std::find(kReferenceDtypes.begin(), kReferenceDtypes.end(), name) != kReferenceDtypes.end();
  throw FormatError(fmt::format("{}: {} dtype (expected F32, F16, BF16 or U8, got {})", ctx,
                                known ? "unsupported" : "unknown", name));
}

// A JSON value holding a non-negative integer that fits `limit`.
bool is_count(const json& v, std::uint64_t limit) {
  return v.is_number_unsigned() && v.get<std::uint64_t>() <= limit;
}

std::vector<std::int64_t> parse_shape(const json& v, const std::string& ctx) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  const bool ok = v.is_array() && std::all_of(v.begin(), v.end(), [](const json& d) { return is_count(d, kMax); });
  if (!ok) {
    throw FormatError(fmt::format("{}: shape (expected an array of non-negative integers, got {})", ctx, brief(v)));
  }
  std::vector<std::int64_t> shape;
  for (const auto& d : v) shape.push_back(static_cast<std::int64_t>(d.get<std::uint64_t>()));
  return shape;
}

std::pair<std::uint64_t, std::uint64_t> parse_offsets(const json& v, const std::string& ctx) {
  constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
  if (!v.is_array() || v.size() != 2 || !is_count(v[0], kMax) || !is_count(v[1], kMax)) {
    throw FormatError(
        fmt::format("{}: data_offsets (expected [begin, end] as non-negative integers, got {})", ctx, brief(v)));
  }
  const auto begin = v[0].get<std::uint64_t>(), end = v[1].get<std::uint64_t>();
  if (begin > end) {
    throw FormatError(fmt::format("{}: data_offsets (expected begin <= end, got [{}, {}])", ctx, begin, end));
  }
  return {begin, end};
}

// numel(shape) × dtype size must equal end − begin; every product checked for overflow.
void check_byte_length(const HeaderEntry& t, std::uint64_t data_size, const std::string& ctx) {
  std::uint64_t nbytes = dtype_size(t.dtype);
  for (const auto d : t.shape) {
    if (__builtin_mul_overflow(nbytes, static_cast<std::uint64_t>(d), &nbytes)) {
      throw FormatError(fmt::format("{}: byte length of shape [{}] × {} bytes overflows 64 bits", ctx,
                                    fmt::join(t.shape, ", "), dtype_size(t.dtype)));
    }
  }
  if (nbytes != t.end - t.begin) {
    throw FormatError(fmt::format("{}: byte length (expected {}, got {})", ctx, nbytes, t.end - t.begin));
  }
  if (t.end > data_size) {
    throw FormatError(fmt::format("{}: data_offsets [{}, {}] beyond the data region (expected end <= {}, got {})",
                                  ctx, t.begin, t.end, data_size, t.end));
  }
}

HeaderEntry parse_entry(const std::string& name, const json& e, std::uint64_t data_size, const std::string& origin) {
  const std::string ctx = fmt::format("{}: tensor {}", origin, name);
  if (!e.is_object()) {
    throw FormatError(
        fmt::format("{} (expected an object with dtype, shape and data_offsets, got {})", ctx, brief(e)));
  }
  HeaderEntry t;
  t.name = name;
  t.dtype = parse_entry_dtype(field(e, "dtype", ctx), ctx);
  t.shape = parse_shape(field(e, "shape", ctx), ctx);
  std::tie(t.begin, t.end) = parse_offsets(field(e, "data_offsets", ctx), ctx);
  check_byte_length(t, data_size, ctx);
  return t;
}

// Sorted by offset, the tensors must tile [0, data_size) exactly, as the reference's
// `Metadata::validate` + `MetadataIncompleteBuffer` require.
void check_tiling(std::vector<HeaderEntry>& ts, std::uint64_t data_size, const std::string& origin) {
  std::sort(ts.begin(), ts.end(), [](const HeaderEntry& a, const HeaderEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t pos = 0;
  const HeaderEntry* prev = nullptr;
  for (const auto& t : ts) {
    if (t.begin != pos) {
      const std::string what = t.begin < pos ? fmt::format("overlap tensor {}", prev->name)
                                             : fmt::format("leave a gap of {} bytes", t.begin - pos);
      throw FormatError(fmt::format("{}: tensor {}: data_offsets [{}, {}] {} (expected begin {}, got {})", origin,
                                    t.name, t.begin, t.end, what, pos, t.begin));
    }
    pos = t.end;
    prev = &t;
  }
  if (pos != data_size) {
    throw FormatError(fmt::format("{}: data region size (expected {} bytes, as the tensors cover, got {}: {} "
                                  "trailing bytes)",
                                  origin, pos, data_size, data_size - pos));
  }
}

}  // namespace

ParsedHeader parse_safetensors_layout(std::span<const std::byte> file, const std::string& origin) {
  if (file.size() < 8) {
    throw FormatError(fmt::format("{}: file size (expected at least 8 bytes for the header length, got {})", origin,
                                  file.size()));
  }
  ParsedHeader out;
  out.header_size = read_u64_le(file.data());
  if (out.header_size > kMaxHeaderSize) {
    throw FormatError(
        fmt::format("{}: header length too large (expected <= {}, got {})", origin, kMaxHeaderSize, out.header_size));
  }
  if (out.header_size > file.size() - 8) {
    throw FormatError(fmt::format("{}: header length beyond the end of the file (expected <= {}, got {})", origin,
                                  file.size() - 8, out.header_size));
  }
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), out.header_size);
  const json header = parse_header_json(text, origin);
  if (!header.is_object()) {
    throw FormatError(fmt::format("{}: header (expected a JSON object, got {})", origin, header.type_name()));
  }
  const std::uint64_t data_size = file.size() - 8 - out.header_size;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      out.metadata = parse_metadata(value, origin);
    } else {
      out.tensors.push_back(parse_entry(key, value, data_size, origin));
    }
  }
  check_tiling(out.tensors, data_size, origin);
  return out;
}

void check_tensor_name(const std::string& name, std::set<std::string>& seen, const std::string& origin) {
  if (name.empty() || name == "__metadata__" || !seen.insert(name).second) {
    throw FormatError(fmt::format("{}: tensor name {} (expected unique, non-empty and not __metadata__)", origin,
                                  json(name).dump(-1, ' ', false, json::error_handler_t::replace)));
  }
}

std::uint64_t checked_nbytes(const std::string& name, DType dtype, std::span<const std::int64_t> shape,
                             const std::string& origin) {
  std::uint64_t n = 1;
  bool ok = true;
  for (const auto d : shape) ok = ok && d >= 0 && !__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n);
  ok = ok && !__builtin_mul_overflow(n, static_cast<std::uint64_t>(dtype_size(dtype)), &n);
  if (!ok) {
    throw FormatError(fmt::format("{}: tensor {}: shape [{}] (expected non-negative dimensions with a 64-bit size)",
                                  origin, name, fmt::join(shape, ", ")));
  }
  return n;
}

std::string serialize_header(std::span<const HeaderEntry> entries, const std::map<std::string, std::string>& metadata,
                             const std::string& origin) {
  using ordered_json = nlohmann::ordered_json;
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  for (const auto& t : entries) {
    ordered_json e = ordered_json::object();
    e["dtype"] = std::string(dtype_name(t.dtype));
    e["shape"] = t.shape;
    e["data_offsets"] = ordered_json::array({t.begin, t.end});
    header[t.name] = std::move(e);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::type_error& e) {  // names or metadata that are not valid UTF-8
    throw FormatError(fmt::format("{}: header cannot be encoded ({})", origin, e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kMaxHeaderSize) {  // readers would refuse the file
    throw FormatError(
        fmt::format("{}: header length too large (expected <= {}, got {})", origin, kMaxHeaderSize, text.size()));
  }
  return text;
}

void encode_values(DType dtype, std::span<const float> values, std::byte* out) {
  const std::size_t n = values.size();
  switch (dtype) {
    case DType::F32:
      if (n > 0) std::memcpy(out, values.data(), n * sizeof(float));
      break;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = core::f32_to_f16_rne(values[i]);  // inline: the loop vectorizes
        std::memcpy(out + 2 * i, &h, 2);
      }
      break;
    case DType::BF16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = core::f32_to_bf16_rne(values[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      break;
    case DType::U8:  // quantized codes, integers in [0, 255] (check_u8_values)
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(static_cast<unsigned>(values[i]));
      break;
  }
}

}  // namespace latentllm::io::detail
