// core::MemoryPlan (latentllm/resources.hpp): named byte counts against a budget.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>

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

namespace {

// The first number of a file ("max" or anything unreadable: -1).
std::int64_t read_number(const char* path) {
  std::ifstream in(path);
  std::int64_t v = -1;
  if (!(in >> v)) return -1;
  return v;
}

// MemAvailable of /proc/meminfo in bytes (-1: unknown).
std::int64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

}  // namespace

MemoryBudget budget_from(std::int64_t physical, std::int64_t available, std::int64_t cgroup_limit,
                         std::int64_t cgroup_usage, std::int64_t own_rss) {
  constexpr std::int64_t kGiB = std::int64_t{1} << 30, kMargin = kGiB / 2;
  MemoryBudget b{physical - 2 * kGiB, "physical memory - 2 GiB"};
  // What this process holds already is available to it.
  if (available >= 0 && available + own_rss - kMargin < b.bytes) {
    b = {available + own_rss - kMargin, "available memory (MemAvailable + this process - 512 MiB)"};
  }
  // A limit far above the machine's memory means none ("max", or v1's page-rounded 2^63).
  if (cgroup_limit > 0 && cgroup_limit < (std::int64_t{1} << 60)) {
    const std::int64_t others = cgroup_usage > own_rss ? cgroup_usage - own_rss : 0;
    if (cgroup_limit - others - kMargin < b.bytes) {
      b = {cgroup_limit - others - kMargin, "cgroup limit (less the rest of the cgroup - 512 MiB)"};
    }
  }
  b.bytes = std::max(b.bytes, kGiB);
  return b;
}

MemoryBudget default_budget() {
  std::int64_t limit = read_number("/sys/fs/cgroup/memory.max"), usage = read_number("/sys/fs/cgroup/memory.current");
  if (limit < 0) {
    limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    usage = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  return budget_from(physical_memory_bytes(), mem_available(), limit, usage, current_rss_bytes());
}

std::int64_t default_memory_budget() { return default_budget().bytes; }

}  // namespace latentllm::core
