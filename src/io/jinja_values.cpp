// Python's value semantics over JSON values (io/jinja_values.hpp) and the printers of io/jinja.hpp.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "io/jinja_values.hpp"

namespace latentllm::io::jinja {

Value undefined() { return Value(Value::value_t::discarded); }
bool is_undefined(const Value& v) { return v.is_discarded(); }

bool truthy(const Value& v) {
  if (v.is_discarded() || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

bool is_numeric(const Value& v) { return v.is_number() || v.is_boolean(); }
bool is_int(const Value& v) { return v.is_number_integer() || v.is_boolean(); }
std::int64_t as_int(const Value& v) { return v.is_boolean() ? v.get<bool>() : v.get<std::int64_t>(); }
double as_double(const Value& v) { return v.is_boolean() ? v.get<bool>() : v.get<double>(); }

bool py_eq(const Value& a, const Value& b) {
  if (is_numeric(a) && is_numeric(b)) {
    if (is_int(a) && is_int(b)) return as_int(a) == as_int(b);
    return as_double(a) == as_double(b);
  }
  if (a.is_discarded() || b.is_discarded()) return a.is_discarded() && b.is_discarded();
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!py_eq(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items()) {
      const auto it = b.find(k);
      if (it == b.end() || !py_eq(v, *it)) return false;
    }
    return true;
  }
  return a == b;
}

std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// Python's repr of a string: single quotes unless it holds a single quote and no double quote.
std::string py_repr_str(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (const char c : s) {
    if (c == q || c == '\\') out += std::string("\\") + c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out + q;
}

std::string py_repr(const Value& v) { return v.is_string() ? py_repr_str(v.get<std::string>()) : to_python_str(v); }

namespace {

void dump_json(const Value& v, int indent, int depth, std::string& out) {
  const std::string pad = indent >= 0 ? "\n" + std::string(static_cast<std::size_t>(indent * (depth + 1)), ' ') : "";
  const std::string end = indent >= 0 ? "\n" + std::string(static_cast<std::size_t>(indent * depth), ' ') : "";
  const std::string sep = indent >= 0 ? "," : ", ";
  if (v.is_array()) {
    if (v.empty()) {
      out += "[]";
      return;
    }
    out += "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      out += (i ? sep : "") + pad;
      dump_json(v[i], indent, depth + 1, out);
    }
    out += end + "]";
  } else if (v.is_object()) {
    if (v.empty()) {
      out += "{}";
      return;
    }
    out += "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      out += (first ? "" : sep) + pad + Value(k).dump(-1, ' ', false, Value::error_handler_t::replace) + ": ";
      first = false;
      dump_json(x, indent, depth + 1, out);
    }
    out += end + "}";
  } else if (v.is_number_float()) {
    out += py_float(v.get<double>());
  } else if (v.is_discarded()) {
    out += "null";
  } else {
    out += v.dump(-1, ' ', false, Value::error_handler_t::replace);  // ensure_ascii=False
  }
}

}  // namespace

// Number of Unicode code points (Python's len of a str).
std::int64_t code_points(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

std::string to_python_str(const Value& v) {
  if (v.is_discarded()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number()) return py_float(v.get<double>());
  std::string out;
  if (v.is_array()) {
    out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + py_repr(v[i]);
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (const auto& [k, x] : v.items()) {
    out += (first ? "" : ", ") + py_repr_str(k) + ": " + py_repr(x);
    first = false;
  }
  return out + "}";
}

std::string to_json(const Value& v, int indent) {
  std::string out;
  dump_json(v, indent, 0, out);
  return out;
}

std::string apply_case(const std::string& s, const std::string& m) {
  std::string r = s;
  bool start = true;
  for (char& c : r) {
    const auto u = static_cast<unsigned char>(c);
    if (m == "capitalize") c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
    else c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
    start = m == "capitalize" ? false : !std::isalpha(u);
  }
  return r;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

Value split(const std::string& s, const std::optional<std::string>& sep) {
  Value out = Value::array();
  if (!sep) {  // runs of whitespace, no empty pieces
    std::size_t i = 0;
    while ((i = s.find_first_not_of(kWhitespace, i)) != std::string::npos) {
      const std::size_t j = std::min(s.find_first_of(kWhitespace, i), s.size());
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  std::size_t i = 0;
  for (std::size_t j; (j = s.find(*sep, i)) != std::string::npos && !sep->empty(); i = j + sep->size())
    out.push_back(s.substr(i, j - i));
  out.push_back(s.substr(i));
  return out;
}

}  // namespace latentllm::io::jinja
