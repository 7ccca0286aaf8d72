// Python's value semantics over JSON values, as the Jinja renderer (jinja_eval.cpp) needs them: an
// undefined value, truthiness, == across int/float/bool, str() and repr(), json.dumps. Internal to src/io.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "io/jinja.hpp"

namespace latentllm::io::jinja {

Value undefined();                    // jinja2's Undefined (nlohmann's discarded value)
bool is_undefined(const Value& v);
bool truthy(const Value& v);          // Python's bool()
bool is_numeric(const Value& v);      // int, float or bool (bool is an int in Python)
bool is_int(const Value& v);          // int or bool
std::int64_t as_int(const Value& v);
double as_double(const Value& v);
bool py_eq(const Value& a, const Value& b);  // Python's ==
std::string py_float(double d);              // Python's repr of a float ("1.0", "1e-05", "inf")
std::string py_repr_str(const std::string& s);  // Python's repr of a str
std::string py_repr(const Value& v);
std::int64_t code_points(const std::string& s);  // Python's len of a str
// str.capitalize() / str.title() (m is "capitalize" or "title"), ASCII.
std::string apply_case(const std::string& s, const std::string& m);
// str.replace(from, to): every non-overlapping occurrence, left to right.
std::string replace_all(std::string s, const std::string& from, const std::string& to);
// str.split(sep): on sep, or on runs of whitespace without empty pieces when sep is absent.
Value split(const std::string& s, const std::optional<std::string>& sep);
inline constexpr const char* kWhitespace = " \t\n\r\f\v";

}  // namespace latentllm::io::jinja
