// The GPTQ / SparseGPT evaluation strings (see include/latentllm/dataset.hpp) rebuilt from files.
#include "core/enum_names.hpp"
#include "latentllm/dataset.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.hpp"
#include "io/unicode.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io {

namespace {
constexpr auto kDatasetNames = core::enum_names<Dataset>(
    core::Named<Dataset>{Dataset::WikiText2, "wikitext2"}, core::Named<Dataset>{Dataset::PTB, "ptb"},
    core::Named<Dataset>{Dataset::C4, "c4"}, core::Named<Dataset>{Dataset::Text, "text"},
    core::Named<Dataset>{Dataset::StoriesValid, "tinystories-valid"},
    core::Named<Dataset>{Dataset::StoriesTest, "tinystories-test"},
    core::Named<Dataset>{Dataset::C4Heldout, "c4-heldout"});
}  // namespace
namespace {

constexpr std::size_t kC4Docs = 1100;  // GPTQ: ' '.join(valdata[:1100]['text'])

// The lines of `text` as Python's text-mode iteration yields them: "\r\n" and "\r" are translated
// to "\n", and each line keeps its terminating "\n" (the last one may have none).
std::vector<std::string> python_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::string cur;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      cur += '\n';
      lines.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::size_t n = 0;
  for (const auto& p : parts) n += p.size() + sep.size();
  std::string out;
  out.reserve(n);
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (k > 0) out += sep;
    out += parts[k];
  }
  return out;
}

std::string read_utf8(const std::filesystem::path& file) {
  std::string text = core::read_file(file);
  check_utf8(text, file.string());
  return text;
}

[[noreturn]] void throw_empty(const std::filesystem::path& file) {
  throw FormatError(fmt::format("{}: empty dataset", file.string()));
}

// The first (validation) or second (test) half of the blank-line-separated stories of `text`.
std::string story_half(const std::string& text, bool second, const std::filesystem::path& file) {
  std::vector<std::string> stories;
  for (std::size_t pos = 0; pos <= text.size();) {
    std::size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) end = text.size();
    stories.push_back(text.substr(pos, end - pos));
    pos = end + 2;
  }
  if (stories.size() < 2) {
    throw FormatError(fmt::format("{}: expected stories separated by blank lines to split into validation and test "
                                  "halves (expected at least 2, got {})", file.string(), stories.size()));
  }
  const std::size_t half = stories.size() / 2;
  const std::vector<std::string> part(second ? stories.begin() + half : stories.begin(),
                                      second ? stories.end() : stories.begin() + half);
  return join(part, "\n\n");
}

// The first line of `text` with non-whitespace characters (empty if none).
std::string_view first_line(std::string_view text) {
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    if (!python_strip(line).empty()) return line;
    pos = end + 1;
  }
  return {};
}

// Whether `line` is one JSON-lines document ({"text": "..."}).
bool is_jsonl_document(std::string_view line) {
  const auto doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  return doc.is_object() && doc.contains("text") && doc["text"].is_string();
}

// A raw-text dataset refuses a JSON-lines file: its perplexity would be that of the JSON syntax.
std::string read_raw_text(Dataset dataset, const std::filesystem::path& file) {
  std::string text = read_utf8(file);
  if (is_jsonl_document(first_line(text))) {
    throw FormatError(fmt::format("{}: a JSON-lines file (expected the raw text of --dataset {}; JSON lines with a "
                                  "\"text\" per line are --dataset c4 or c4-heldout)", file.string(),
                                  dataset_name(dataset)));
  }
  return text;
}

}  // namespace

Dataset parse_dataset(std::string_view name) {
  return kDatasetNames.parse(name, "dataset: unknown name (expected {}, got {})");
}

std::string_view dataset_name(Dataset d) { return kDatasetNames.name(d); }

std::vector<std::string> read_jsonl_texts(const std::filesystem::path& file, std::size_t max_docs) {
  const std::string text = read_utf8(file);
  std::vector<std::string> docs;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size() && (max_docs == 0 || docs.size() < max_docs);) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (python_strip(line).empty()) continue;
    if (docs.empty() && python_strip(line).front() != '{' && !nlohmann::json::accept(line)) {
      throw FormatError(fmt::format("{}: not a JSON-lines file (expected a JSON object with a string \"text\" per "
                                    "line, got text at line {}); raw text is --dataset wikitext2, ptb, text or "
                                    "tinystories-valid / -test, --calib text", file.string(), line_no));
    }
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw FormatError(fmt::format("{}:{}: invalid JSON ({})", file.string(), line_no, e.what()));
    }
    if (!doc.is_object() || !doc.contains("text") || !doc["text"].is_string()) {
      throw FormatError(fmt::format("{}:{}: expected a JSON object with a string \"text\"", file.string(), line_no));
    }
    docs.push_back(doc["text"].get<std::string>());
  }
  if (docs.empty()) throw_empty(file);
  return docs;
}

std::string build_eval_text(Dataset dataset, const std::filesystem::path& file) {
  std::string out;
  switch (dataset) {
    case Dataset::WikiText2: {
      std::vector<std::string> rows = python_lines(read_raw_text(dataset, file));
      for (auto& row : rows)
        if (python_strip(row).empty()) row.clear();
      out = join(rows, "\n\n");
      break;
    }
    case Dataset::PTB: {
      std::vector<std::string> rows = python_lines(read_raw_text(dataset, file));
      for (auto& row : rows) row = std::string(python_strip(row));
      out = join(rows, " ");
      break;
    }
    case Dataset::C4:
      out = join(read_jsonl_texts(file, kC4Docs), " ");
      break;
    case Dataset::C4Heldout: {
      std::vector<std::string> docs = read_jsonl_texts(file, 0);
      if (docs.size() <= kC4HeldoutDocs) {
        throw FormatError(fmt::format("{}: too few documents to hold out the last {} (expected more than {}, got {})",
                                      file.string(), kC4HeldoutDocs, kC4HeldoutDocs, docs.size()));
      }
      docs.erase(docs.begin(), docs.end() - static_cast<std::ptrdiff_t>(kC4HeldoutDocs));
      out = join(docs, " ");
      break;
    }
    case Dataset::Text:
      out = read_utf8(file);
      break;
    case Dataset::StoriesValid:
    case Dataset::StoriesTest:
      out = story_half(read_raw_text(dataset, file), dataset == Dataset::StoriesTest, file);
      break;
  }
  if (python_strip(out).empty()) throw_empty(file);
  return out;
}

}  // namespace latentllm::io
