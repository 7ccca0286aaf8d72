// The lexical layer of the Jinja subset (io/jinja.hpp): the source cut into text, {{ }} and {% %}
// segments with jinja2's whitespace rules, and a tag's content cut into tokens. Internal to src/io.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "io/jinja.hpp"

namespace latentllm::io::jinja {

struct Segment {
  enum class Kind { Text, Output, Statement } kind;
  std::string content;
  int line = 0;
};

struct Token {
  enum class Kind { Name, String, Int, Float, Op, End } kind;
  std::string text;  // Name, Op: as written; String: unescaped
  Value value;       // Int, Float
};

// The segments of a template: trim_blocks, lstrip_blocks, the `-` and `+` modifiers, comments dropped and
// the one trailing newline removed, as jinja2's lexer does. FormatError for an unclosed tag.
std::vector<Segment> segment(std::string_view src, const std::string& origin);
// The tokens of one tag's content; `where` ("<origin>: line N") names it in errors.
std::vector<Token> tokenize(std::string_view s, const std::string& where);

}  // namespace latentllm::io::jinja
