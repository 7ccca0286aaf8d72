// docs/ERRORS.md covers every message the CLI can print: each error thrown in tools/latentllm/ (the CLI's
// own checks) has a catalogue row whose pattern holds the message's longest literal fragment, so a new
// message without a row fails here (the rows themselves are checked against the code by the ErrorsDoc
// tests of each section).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "errors_doc.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;

// The first string literal of each `throw XError(` / `throw XError(fmt::format(` in `text`, with its line.
std::vector<std::pair<int, std::string>> thrown_literals(const std::string& text) {
  static const std::regex kThrow(R"re(throw\s+\w*Error\(\s*(?:fmt::format\(\s*)?"((?:[^"\\]|\\.)*)")re");
  std::vector<std::pair<int, std::string>> out;
  for (std::sregex_iterator it(text.begin(), text.end(), kThrow), end; it != end; ++it) {
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + it->position(), '\n'));
    std::string lit = (*it)[1].str();
    lit = std::regex_replace(lit, std::regex(R"(\\")"), "\"");
    out.emplace_back(line, lit);
  }
  return out;
}

// The longest run of the literal between fmt placeholders ({}, {:.2f}, ...).
std::string longest_fragment(const std::string& lit) {
  std::string best, cur;
  for (std::size_t i = 0; i < lit.size(); ++i) {
    if (lit[i] == '{') {
      const auto close = lit.find('}', i);
      if (close != std::string::npos) {
        if (cur.size() > best.size()) best = cur;
        cur.clear();
        i = close;
        continue;
      }
    }
    cur += lit[i];
  }
  return cur.size() > best.size() ? cur : best;
}

TEST(ErrorsDoc, EveryCliMessageHasARow) {
  std::vector<std::string> patterns;
  for (const DocRow& r : load_errors_doc())
    for (const auto& p : r.patterns) patterns.push_back(p);
  ASSERT_FALSE(patterns.empty());
  const fs::path tools = errors_doc_path().parent_path().parent_path() / "tools" / "latentllm";
  int checked = 0;
  for (const auto& e : fs::directory_iterator(tools)) {
    if (e.path().extension() != ".cpp") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    for (const auto& [line, lit] : thrown_literals(ss.str())) {
      const std::string fragment = longest_fragment(lit);
      if (fragment.size() < 8) continue;  // too short to tell rows apart: "{}: {}"
      ++checked;
      const bool found = std::any_of(patterns.begin(), patterns.end(),
                                     [&](const std::string& p) { return p.find(fragment) != std::string::npos; });
      EXPECT_TRUE(found) << e.path().filename().string() << ":" << line << ": no docs/ERRORS.md row holds \""
                         << fragment << "\" (message \"" << lit << "\")";
    }
  }
  EXPECT_GT(checked, 20);  // the scan found the CLI's messages
}

}  // namespace
}  // namespace latentllm::test
