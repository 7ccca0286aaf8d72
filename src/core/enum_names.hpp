// An enum's names in one table: value <-> name, and the list of names for messages. Every enum a user
// names on the command line or in a file (junctions, pre-conditioners, datasets, ...) parses through one.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "latentllm/error.hpp"

namespace latentllm::core {

template <typename E>
struct Named {
  E value;
  std::string_view name;
};

template <typename E, std::size_t N>
struct EnumNames {
  std::array<Named<E>, N> rows;

  constexpr std::string_view name(E v) const {
    for (const auto& r : rows)
      if (r.value == v) return r.name;
    return "?";
  }
  constexpr std::optional<E> find(std::string_view s) const {
    for (const auto& r : rows)
      if (r.name == s) return r.value;
    return std::nullopt;
  }
  constexpr std::array<E, N> values() const {
    std::array<E, N> v{};
    for (std::size_t i = 0; i < N; ++i) v[i] = rows[i].value;
    return v;
  }
  // "a, b, c" (last_sep ", ") or "a, b or c" (last_sep " or ").
  std::string list(std::string_view last_sep = " or ") const {
    std::string s;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) s += i + 1 == N ? last_sep : std::string_view(", ");
      s += rows[i].name;
    }
    return s;
  }
  // The value named `s`; ConfigError(fmt::format(message, list(last_sep), s)) for any other name.
  E parse(std::string_view s, std::string_view message, std::string_view last_sep = " or ") const {
    if (auto v = find(s)) return *v;
    throw ConfigError(fmt::format(fmt::runtime(message), list(last_sep), s));
  }
};

template <typename E, typename... Rows>
constexpr EnumNames<E, sizeof...(Rows)> enum_names(Rows... rows) {
  return {{{rows...}}};
}

}  // namespace latentllm::core
