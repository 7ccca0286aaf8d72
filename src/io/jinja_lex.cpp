// Jinja's lexical layer (io/jinja_lex.hpp): segments with jinja2's whitespace rules, tokens with Python's
// string escapes.
#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <fmt/format.h>

#include "io/jinja_lex.hpp"
#include "io/unicode.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

int line_at(std::string_view s, std::size_t pos) {
  int n = 1;
  for (std::size_t i = 0; i < pos && i < s.size(); ++i) n += s[i] == '\n';
  return n;
}

// The end of the tag opened at `from` (the index of its closing delimiter), skipping quoted strings;
// npos when unclosed.
std::size_t tag_end(std::string_view s, std::size_t from, std::string_view close) {
  if (close == "#}") return s.find(close, from);
  char quote = 0;
  for (std::size_t i = from; i + 1 < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (s.compare(i, 2, close) == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

// Python's string escapes as jinja2 applies them (unicode-escape): unknown escapes keep the backslash.
std::size_t unescape(std::string_view s, std::size_t i, char quote, std::string& out, const std::string& where) {
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == quote) return i + 1;
    if (c != '\\' || i + 1 >= s.size()) {
      out += c;
      continue;
    }
    const char e = s[++i];
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\n': break;
      case 'x':
      case 'u':
      case 'U': {
        const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (i + n >= s.size() || !std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i + 1),
                                              s.begin() + static_cast<std::ptrdiff_t>(i + 1 + n),
                                              [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; }))
          throw FormatError(fmt::format("{}: syntax (expected {} hex digits after \\{}, got \"{}\")", where, n, e,
                                        s.substr(i + 1, std::min(n, s.size() - i - 1))));
        const auto cp = static_cast<std::uint32_t>(std::stoul(std::string(s.substr(i + 1, n)), nullptr, 16));
        i += n;
        append_utf8(out, cp);
        break;
      }
      default: out += '\\'; out += e;
    }
  }
  throw FormatError(fmt::format("{}: syntax (expected a closing {} of the string, got the end of the tag)", where,
                                quote));
}

}  // namespace

std::vector<Segment> segment(std::string_view src, const std::string& origin) {
  if (src.ends_with("\r\n")) src.remove_suffix(2);  // jinja2's keep_trailing_newline = False
  else if (src.ends_with("\n")) src.remove_suffix(1);
  std::vector<Segment> out;
  std::size_t pos = 0;
  while (pos <= src.size()) {
    std::size_t start = std::string_view::npos;
    for (const char* open : {"{{", "{%", "{#"}) start = std::min(start, src.find(open, pos));
    std::string text(src.substr(pos, start == std::string_view::npos ? std::string_view::npos : start - pos));
    if (start == std::string_view::npos) {
      if (!text.empty()) out.push_back({Segment::Kind::Text, text, line_at(src, pos)});
      break;
    }
    const char kind = src[start + 1];
    const char mod = start + 2 < src.size() ? src[start + 2] : 0;
    if (mod == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (kind != '{' && mod != '+') {  // lstrip_blocks: a block or comment tag alone on its line start
      const std::size_t nl = text.rfind('\n');
      const std::size_t l = nl == std::string::npos ? 0 : nl + 1;
      const bool line_start = nl != std::string::npos || pos == 0 || src[pos - 1] == '\n';
      if (line_start && text.find_first_not_of(" \t", l) == std::string::npos) text.resize(l);
    }
    if (!text.empty()) out.push_back({Segment::Kind::Text, text, line_at(src, pos)});
    const std::string_view close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const std::size_t body = start + 2 + (mod == '-' || mod == '+' ? 1 : 0);
    const std::size_t end = tag_end(src, body, close);
    const int line = line_at(src, start);
    if (end == std::string_view::npos) {
      throw FormatError(fmt::format("{}: line {}: unclosed tag (expected {}, got the end of the template)", origin,
                                    line, close));
    }
    const bool strip_after = end > body && src[end - 1] == '-';
    const bool keep_newline = end > body && src[end - 1] == '+';
    const std::size_t content_end = strip_after || keep_newline ? end - 1 : end;
    const std::string content(src.substr(body, content_end - body));
    if (kind == '{') out.push_back({Segment::Kind::Output, content, line});
    if (kind == '%') out.push_back({Segment::Kind::Statement, content, line});
    pos = end + 2;
    if (strip_after) {
      while (pos < src.size() && is_space(src[pos])) ++pos;
    } else if (kind != '{' && !keep_newline) {  // trim_blocks: the newline after a block or comment tag
      if (src.compare(pos, 2, "\r\n") == 0) pos += 2;
      else if (pos < src.size() && src[pos] == '\n') ++pos;
    }
  }
  return out;
}

std::vector<Token> tokenize(std::string_view s, const std::string& where) {
  static const std::vector<std::string> kOps = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}",
                                                ",",  ".",  ":",  "|",  "=",  "+",  "-", "*", "/", "%", "~", "<", ">"};
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (is_space(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::Name, std::string(s.substr(i, j - i)), {}});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      bool is_float = false;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        for (++j; j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])); ++j) {
        }
      }
      std::string digits;
      for (char d : s.substr(i, j - i))
        if (d != '_') digits += d;
      try {
        if (is_float) out.push_back({Token::Kind::Float, digits, Value(std::stod(digits))});
        else out.push_back({Token::Kind::Int, digits, Value(static_cast<std::int64_t>(std::stoll(digits)))});
      } catch (const std::out_of_range&) {  // Python's integers are unbounded; ours are 64-bit
        throw FormatError(fmt::format("{}: syntax (expected a number within 64 bits, got {})", where, digits));
      }
      i = j;
    } else if (c == '\'' || c == '"') {
      Token t{Token::Kind::String, "", {}};
      i = unescape(s, i + 1, c, t.text, where);
      out.push_back(std::move(t));
    } else {
      const auto op = std::find_if(kOps.begin(), kOps.end(), [&](const std::string& o) { return s.substr(i).starts_with(o); });
      if (op == kOps.end()) {
        throw FormatError(fmt::format("{}: syntax (expected an expression, got '{}')", where, c));
      }
      out.push_back({Token::Kind::Op, *op, {}});
      i += op->size();
    }
  }
  out.push_back({Token::Kind::End, "", {}});
  return out;
}

}  // namespace latentllm::io::jinja
