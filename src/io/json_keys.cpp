#include "io/json_keys.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/mapped_file.hpp"
#include "io/json_depth.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io {
namespace {

using json = nlohmann::json;

bool is_int64(const json* v) {
  return v != nullptr && v->is_number_integer() &&
         (!v->is_number_unsigned() ||
          v->get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
}
bool is_positive_int(const json* v) { return is_int64(v) && v->get<std::int64_t>() > 0; }

}  // namespace

std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

json load_json_file(const std::filesystem::path& path) {
  const std::string text = core::read_file(path);
  check_json_depth(text, path.string());
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw FormatError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
  }
}

JsonKeys::JsonKeys(const json& doc, std::string origin) : doc_(doc), origin_(std::move(origin)) {
  if (!doc.is_object()) {
    throw ConfigError(fmt::format("{}: config (expected a JSON object, got {})", origin_, doc.type_name()));
  }
}

const json* JsonKeys::find(std::string_view key) const {
  const auto it = doc_.find(key);
  return it == doc_.end() || it->is_null() ? nullptr : &*it;
}

bool JsonKeys::is_null(std::string_view key) const {
  const auto it = doc_.find(key);
  return it != doc_.end() && it->is_null();
}

void JsonKeys::fail(std::string_view key, std::string_view expected, const json* got) const {
  if (got == nullptr) throw ConfigError(fmt::format("{}: missing key {} (expected {})", origin_, key, expected));
  throw ConfigError(fmt::format("{}: {} (expected {}, got {})", origin_, key, expected, brief(*got)));
}

std::int64_t JsonKeys::positive(std::string_view key) const {
  const json* v = find(key);
  if (!is_positive_int(v)) fail(key, "a positive integer", v);
  return v->get<std::int64_t>();
}

std::int64_t JsonKeys::positive_or(std::string_view key, std::int64_t fallback) const {
  return find(key) == nullptr ? fallback : positive(key);
}

double JsonKeys::positive_number_or(std::string_view key, double fallback) const {
  const json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>())) {
    fail(key, "a positive number", v);
  }
  return v->get<double>();
}

bool JsonKeys::boolean_or(std::string_view key, bool fallback) const {
  const json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) fail(key, "true or false", v);
  return v->get<bool>();
}

std::string JsonKeys::string_or(std::string_view key, std::string fallback) const {
  const json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) fail(key, "a string", v);
  return v->get<std::string>();
}

std::optional<std::int64_t> JsonKeys::token_id(std::string_view key) const {
  const json* v = find(key);
  if (v == nullptr) return std::nullopt;
  const json* id = v->is_array() && !v->empty() ? &v->front() : v;
  if (!is_int64(id)) fail(key, "an integer or a list of integers", v);
  return id->get<std::int64_t>();
}

std::vector<std::int64_t> JsonKeys::token_ids(std::string_view key) const {
  const json* v = find(key);
  if (v == nullptr) return {};
  std::vector<std::int64_t> out;
  for (const json& id : v->is_array() ? *v : json::array({*v})) {
    if (!is_int64(&id)) fail(key, "an integer or a list of integers", v);
    out.push_back(id.get<std::int64_t>());
  }
  return out;
}

void JsonKeys::check_multiple(std::string_view key, std::int64_t value, std::string_view of_key,
                              std::int64_t of) const {
  if (value % of != 0) {
    throw ConfigError(fmt::format("{}: {} {} (expected a multiple of {} {})", origin_, key, value, of_key, of));
  }
}

}  // namespace latentllm::io
