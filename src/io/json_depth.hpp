// A nesting limit for the JSON files we read (config.json, tokenizer files, shard indexes).
// nlohmann's parser is iterative, but copying, dumping and comparing a document recurse once per
// level, so a hostile file of a million '[' would overflow the stack long after parsing succeeded.
#pragma once

#include <string>
#include <string_view>

namespace latentllm::io {

// Far beyond any Hugging Face file (they nest fewer than 10 levels), far below a stack overflow.
inline constexpr int kMaxJsonDepth = 64;

// Scans `text` (before parsing it) and throws FormatError "<origin>: JSON nesting too deep (expected at
// most 64 levels, got more at byte N)". Brackets inside strings do not count; malformed text is left
// for the parser to report.
void check_json_depth(std::string_view text, const std::string& origin, int max_depth = kMaxJsonDepth);

}  // namespace latentllm::io
