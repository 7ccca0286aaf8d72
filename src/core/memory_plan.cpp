// core::MemoryPlan (latentllm/resources.hpp): named byte counts against a budget.
#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "latentllm/error.hpp"
#include "latentllm/resources.hpp"

namespace latentllm::core {

void MemoryPlan::add(std::string name, std::int64_t bytes, std::string detail) {
  items.push_back({std::move(name), bytes, std::move(detail)});
}

std::int64_t MemoryPlan::total() const {
  std::int64_t t = 0;
  for (const auto& i : items) t += i.bytes;
  return t;
}

std::string MemoryPlan::describe() const {
  std::string out = fmt::format("{}: {} of {} budget ({})\n", title, format_bytes(total()), format_bytes(budget),
                                fits() ? "fits" : "does not fit");
  std::size_t width = 0;
  for (const auto& i : items) width = std::max(width, i.name.size());
  for (const auto& i : items) {
    out += fmt::format("  {:<{}}  {:>10}{}{}\n", i.name, width, format_bytes(i.bytes), i.detail.empty() ? "" : "  ",
                       i.detail);
  }
  return out;
}

std::string MemoryPlan::summary() const {
  std::string out;
  for (const auto& i : items) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", i.name, format_bytes(i.bytes));
  return out;
}

std::string gib_option(std::int64_t bytes) {
  const std::int64_t gib = std::int64_t{1} << 30;
  return fmt::format("{}G", (bytes + gib - 1) / gib);
}

std::string format_bytes(std::int64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024 && bytes > -1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", v, kUnits[u]);
}

std::int64_t parse_bytes(const std::string& text, const std::string& what) {
  const auto fail = [&] {
    return ConfigError(fmt::format("{} (expected a byte count such as 20G, 512M or 21474836480, got {})", what, text));
  };
  // Number: digits with at most one '.', then the unit (no sign, exponent or hex, which stod accepts).
  std::size_t i = 0;
  bool dot = false, digit = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digit = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digit) throw fail();
  std::string unit = text.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit == "B") {
    unit.clear();
  } else if (unit.size() == 3 && unit.ends_with("IB")) {
    unit.resize(1);
  } else if (unit.size() == 2 && unit.ends_with("B")) {
    unit.resize(1);
  }
  static const std::string kUnits = "KMGT";
  const auto u = unit.size() == 1 ? kUnits.find(unit[0]) : std::string::npos;
  if (!unit.empty() && u == std::string::npos) throw fail();
  const double scale = unit.empty() ? 1.0 : std::ldexp(1.0, 10 * (static_cast<int>(u) + 1));
  const double bytes = std::stod(text.substr(0, i)) * scale;
  // Whole bytes: "1.5G" is, "1.5" is not.
  if (bytes < 1 || bytes > std::ldexp(1.0, 62) || bytes != std::floor(bytes)) throw fail();
  return static_cast<std::int64_t>(bytes);
}

std::int64_t default_memory_budget() {
  constexpr std::int64_t kGiB = std::int64_t{1} << 30;
  return std::max(physical_memory_bytes() - 2 * kGiB, kGiB);
}

}  // namespace latentllm::core
