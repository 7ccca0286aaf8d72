#include "io/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include "io/unicode.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io {
namespace {

// Unicode White_Space as the inside of a character class.
constexpr std::string_view kWhiteSpaceClass =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// A JIT stack per thread, large enough for long whitespace runs.
pcre2_jit_stack* thread_jit_stack() {
  struct Holder {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    ~Holder() { pcre2_jit_stack_free(stack); }
  };
  thread_local Holder holder;
  return holder.stack;
}

}  // namespace

std::string rewrite_whitespace_classes(std::string_view p, const std::string& origin) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[++i];
      if (d == 's') {
        out += in_class ? std::string(kWhiteSpaceClass) : fmt::format("[{}]", kWhiteSpaceClass);
      } else if (d == 'S' && !in_class) {
        out += fmt::format("[^{}]", kWhiteSpaceClass);
      } else if (d == 'S' || d == 'h' || d == 'H') {
        // \h is a hex digit in Oniguruma but horizontal space in PCRE2; \S inside a class has no
        // simple rewrite. No tokenizer we know uses them.
        throw FormatError(fmt::format("{}: unsupported regex escape \\{}{} in pattern {}", origin, d,
                                      in_class ? " inside a character class" : "", p));
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is literal
      continue;
    }
    if (c == '[' && in_class && i + 1 < p.size() && p[i + 1] == ':') {
      throw FormatError(fmt::format("{}: unsupported nested character class in pattern {}", origin, p));
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, bool literal, const std::string& origin) : impl_(std::make_unique<Impl>()) {
  const std::string rewritten = literal ? std::string(pattern) : rewrite_whitespace_classes(pattern, origin);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  // PCRE2_LITERAL admits no PCRE2_UCP (pcre2_compile: "invalid option bits"); a literal needs no classes.
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(), options, &err,
                              &err_offset, nullptr);
  if (impl_->code == nullptr) {
    throw FormatError(fmt::format("{}: regex does not compile at offset {}: {} (pattern {})", origin, err_offset,
                                  pcre2_message(err), pattern));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
}

Regex::~Regex() = default;

void Regex::find_all(std::string_view text, std::vector<MatchRange>& out) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr), &pcre2_match_data_free);
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> ctx(pcre2_match_context_create(nullptr),
                                                                                &pcre2_match_context_free);
  pcre2_jit_stack_assign(ctx.get(), nullptr, thread_jit_stack());
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), ctx.get());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw FormatError(fmt::format("regex match failed: {}", pcre2_message(rc)));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const std::size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // empty match: step over one code point (Rust regex / Oniguruma find_iter do the same)
      if (begin >= text.size()) break;
      pos = begin + utf8_length(static_cast<unsigned char>(text[begin]));
      continue;
    }
    out.emplace_back(begin, end);
    pos = end;
  }
}

}  // namespace latentllm::io
