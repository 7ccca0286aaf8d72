// latentllm error types. The library reports every failure by throwing one of these; only the CLI's
// main() turns them into a message and an exit code.
//
// Message convention (../shared/STYLE.md): "<file|tensor|layer.module>: <what> (expected X, got Y)".
// A stage that catches and rethrows adds its own context in front with `with_context`.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace latentllm {

// Base class of every error the library throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  // A copy of this error of the same dynamic type with "context: " prepended.
  [[noreturn]] virtual void rethrow_with_context(std::string_view context) const {
    throw Error(fmt::format("{}: {}", context, what()));
  }
};

#define LATENTLLM_DEFINE_ERROR(Name)                                                   \
  class Name : public Error {                                                          \
   public:                                                                             \
    explicit Name(const std::string& what) : Error(what) {}                            \
    [[noreturn]] void rethrow_with_context(std::string_view context) const override {  \
      throw Name(fmt::format("{}: {}", context, what()));                              \
    }                                                                                  \
  };

// Malformed file content: safetensors, tokenizer files, datasets, checkpoints.
LATENTLLM_DEFINE_ERROR(FormatError)
// config.json keys, unsupported architectures, invalid options.
LATENTLLM_DEFINE_ERROR(ConfigError)
// Non-finite values, failed decompositions, singular systems.
LATENTLLM_DEFINE_ERROR(NumericError)
// Files that cannot be opened, read or written.
LATENTLLM_DEFINE_ERROR(IoError)
#undef LATENTLLM_DEFINE_ERROR

// Runs fn(); if it throws a latentllm::Error, rethrows the same type with `context` prepended.
template <typename Fn>
decltype(auto) with_context(std::string_view context, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    e.rethrow_with_context(context);
  }
}

}  // namespace latentllm
