#include "io/json_depth.hpp"

#include <fmt/format.h>

#include "latentllm/error.hpp"

namespace latentllm::io {

void check_json_depth(std::string_view text, const std::string& origin, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw FormatError(fmt::format("{}: JSON nesting too deep (expected at most {} levels, got more at byte {})",
                                      origin, max_depth, i));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

}  // namespace latentllm::io
