// docs/ERRORS.md as test data (issue 5, item 6): the catalogue of bad inputs is kept in sync with the
// code by running one case per table row and matching the message the code gives against the row's
// pattern. A section's test fails when a row has no case, a case has no row, the message or the
// exception type differs from the row, or the section is missing from the doc; every catalogue
// section of the doc must be owned by one test (kOwners below).
//
// Catalogue tables are the Markdown tables whose header is `| id | case | exception | message pattern |`.
// The pattern cell holds one or more backquoted patterns separated by " / " (any may match); in a
// pattern `<…>` (angle brackets around any text) stands for one or more characters and `…` for any
// (possibly empty) text; everything else must match exactly, and the pattern must cover the whole
// message. The exception cell is a latentllm exception type (`IoError`, `FormatError`, `ConfigError`,
// `NumericError`) or `note` for a recorded numerical fallback (NumericNote::message()).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "latentllm/error.hpp"
#include "test_support.hpp"

namespace latentllm::test {

struct DocRow {
  std::string section;  // the "## " heading the table is under
  std::string id;
  std::string case_text;
  std::string exception;
  std::vector<std::string> patterns;
  int line = 0;
};

// Which test checks each catalogue section. A section added to the doc without an owner, or an owner
// whose section left the doc, fails ErrorsDoc.EverySectionIsOwned.
inline const std::map<std::string, std::string>& doc_owners() {
  static const std::map<std::string, std::string> kOwners = {
      {"Safetensors files (`io::SafetensorsFile`)", "test_errors_io"},
      {"Checkpoint directories (`io::TensorStore`)", "test_errors_io"},
      {"Writing safetensors (`io::write_safetensors`)", "test_errors_io"},
      {"Streaming safetensors writer (`io::SafetensorsWriter`)", "test_safetensors_stream"},
      {"config.json (`model::load_config`, `model::parse_config`)", "test_errors_config"},
      {"Tokenizers (`io::load_tokenizer`)", "test_errors_config"},
      {"Datasets and calibration text (`io::read_jsonl_texts`, `io::build_eval_text`, `calib::sample_calibration`)",
       "test_errors_config"},
      {"Command line (`latentllm`, every command)", "test_errors_cli"},
      {"Compress options (`latentllm compress`)", "test_errors_cli"},
      {"Output and resources (`latentllm compress`, `checkpoint::save`)", "test_errors_cli"},
      {"Evaluation options (`latentllm ppl`)", "test_errors_cli"},
      {"Generation (`latentllm generate`, `eval::generate`, `model::KvCache`)", "test_errors_cli"},
      {"Export (`latentllm export`, `format::export_checkpoint`)", "test_export"},
      {"ONNX export (`latentllm export --format onnx`)", "test_export_onnx"},
      {"Images (`image::load_image`, `image::load_processor_config`)", "test_image"},
      {"Multimodal checkpoints (`model::LlavaModel`)", "test_llava"},
      {"Multimodal evaluation (`latentllm eval`, `eval::scienceqa`, `latentllm generate --image`)", "test_scienceqa"},
      {"LLaVA-NeXT inputs (`model::LlavaModel`, `image::preprocess_anyres`)", "test_llava_next"},
      {"Quantization (`quant::rtn`, `quant::gptq`, `quant::quantize_factors`, `quant::read_packed`, `quant::gemv`)",
       "test_errors_quant"},
      {"Sparsity (`compress --method sparse|wanda|sparsegpt`, `compress::sparse_hard`, `compress::sparse_fista`, "
       "`compress::wanda`, `compress::sparsegpt`)",
       "test_errors_sparse"},
      {"Chat requests (`latentllm serve`)", "test_serve"},
      {"Chat templates (`io::ChatTemplate`, `io::conv_prompt`, `io::jinja::Template`)", "test_chat_template"},
      {"Zero-shot multiple choice (`latentllm eval --task mc`, `eval::mc`)", "test_mc_formats"},
      {"Numerics (`compress`, `ppl`)", "test_errors_numerics"},
      {"Numerical fallbacks (not errors)", "test_errors_numerics"},
  };
  return kOwners;
}

// docs/ERRORS.md of this checkout; LATENTLLM_ERRORS_DOC overrides it (the checker's own tests).
inline std::filesystem::path errors_doc_path() {
  if (const char* p = std::getenv("LATENTLLM_ERRORS_DOC")) return p;
  return std::filesystem::path(LATENTLLM_TEST_DATA_DIR).parent_path().parent_path() / "docs" / "ERRORS.md";
}

namespace detail {

inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Cells of a Markdown table row ("| a | b |"); "\|" is a literal bar.
inline std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cur += '|';
      ++i;
    } else if (line[i] == '|') {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  return out;
}

// The backquoted spans of a cell.
inline std::vector<std::string> code_spans(const std::string& cell) {
  std::vector<std::string> out;
  for (std::size_t b = cell.find('`'); b != std::string::npos;) {
    const std::size_t e = cell.find('`', b + 1);
    if (e == std::string::npos) break;
    out.push_back(cell.substr(b + 1, e - b - 1));
    b = cell.find('`', e + 1);
  }
  return out;
}

// Pattern tokens: literal text, or a wildcard (min_len 1 for <…>, 0 for "…").
struct Token {
  std::string literal;
  bool wildcard = false;
  std::size_t min_len = 0;
};

inline std::vector<Token> tokenize(const std::string& pattern) {
  static const std::string kEllipsis = "\xE2\x80\xA6";  // …
  std::vector<Token> out;
  std::string lit;
  auto flush = [&] {
    if (!lit.empty()) out.push_back({lit, false, 0});
    lit.clear();
  };
  for (std::size_t i = 0; i < pattern.size();) {
    if (pattern[i] == '<') {
      const std::size_t e = pattern.find('>', i + 1);
      if (e != std::string::npos && e > i + 1 && pattern.find('<', i + 1) > e) {
        flush();
        out.push_back({"", true, 1});
        i = e + 1;
        continue;
      }
    }
    if (pattern.compare(i, kEllipsis.size(), kEllipsis) == 0) {
      flush();
      out.push_back({"", true, 0});
      i += kEllipsis.size();
      continue;
    }
    lit += pattern[i++];
  }
  flush();
  return out;
}

inline bool match_from(const std::vector<Token>& t, std::size_t k, const std::string& s, std::size_t pos) {
  if (k == t.size()) return pos == s.size();
  if (!t[k].wildcard) {
    return s.compare(pos, t[k].literal.size(), t[k].literal) == 0 &&
           match_from(t, k + 1, s, pos + t[k].literal.size());
  }
  for (std::size_t end = pos + t[k].min_len; end <= s.size(); ++end) {
    if (match_from(t, k + 1, s, end)) return true;
  }
  return false;
}

}  // namespace detail

// Whether `message` matches one pattern (see the top of this file).
inline bool matches_pattern(const std::string& pattern, const std::string& message) {
  return detail::match_from(detail::tokenize(pattern), 0, message, 0);
}

// Every catalogue row of docs/ERRORS.md, in order.
inline std::vector<DocRow> load_errors_doc() {
  std::ifstream in(errors_doc_path());
  if (!in) throw std::runtime_error("cannot read " + errors_doc_path().string());
  std::vector<DocRow> rows;
  std::string line, section;
  bool in_table = false;
  int no = 0;
  while (std::getline(in, line)) {
    ++no;
    if (line.rfind("## ", 0) == 0) {
      section = detail::trim(line.substr(3));
      in_table = false;
      continue;
    }
    if (line.rfind("|", 0) != 0) {
      in_table = false;
      continue;
    }
    const auto c = detail::cells(line);
    if (c.size() == 4 && c[0] == "id" && c[1] == "case" && c[2] == "exception" && c[3] == "message pattern") {
      in_table = true;
      continue;
    }
    if (!in_table || line.rfind("|---", 0) == 0 || line.rfind("| ---", 0) == 0) continue;
    if (c.size() != 4) throw std::runtime_error(fmt::format("ERRORS.md:{}: expected 4 cells", no));
    DocRow r;
    r.section = section;
    const auto ids = detail::code_spans(c[0]);
    r.id = ids.empty() ? c[0] : ids[0];
    r.case_text = c[1];
    const auto ex = detail::code_spans(c[2]);
    r.exception = ex.empty() ? c[2] : ex[0];
    r.patterns = detail::code_spans(c[3]);
    r.line = no;
    rows.push_back(std::move(r));
  }
  return rows;
}

// The type name of a latentllm::Error.
inline std::string error_type(const Error& e) {
  if (dynamic_cast<const IoError*>(&e)) return "IoError";
  if (dynamic_cast<const FormatError*>(&e)) return "FormatError";
  if (dynamic_cast<const ConfigError*>(&e)) return "ConfigError";
  if (dynamic_cast<const NumericError*>(&e)) return "NumericError";
  return "Error";
}

// What one case produced: the exception type ("note" for a fallback, "" for none, "*" for an error
// of the CLI, which prints the message but not the type) and the message.
struct Outcome {
  std::string type;
  std::string message;
};

// Runs a library case: its Error (type, message), or an empty type if it threw nothing.
inline Outcome outcome_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {error_type(e), e.what()};
  } catch (const std::exception& e) {
    return {"std::exception", e.what()};
  }
  return {"", "(no exception)"};
}

using CaseFn = std::function<Outcome()>;  // one case per row id; may produce several outcomes in turn
struct Case {
  std::string id;
  std::vector<CaseFn> runs;  // every run must match the row (e.g. each bad ratio of a range row)
};

// Checks every row of `section` against `cases` (both directions), as described at the top.
inline void check_section(const std::string& section, const std::vector<Case>& cases) {
  ASSERT_TRUE(doc_owners().count(section)) << "section not in doc_owners(): " << section;
  const auto rows = load_errors_doc();
  std::map<std::string, const Case*> by_id;
  for (const Case& c : cases) {
    EXPECT_TRUE(by_id.emplace(c.id, &c).second) << "two cases for " << c.id;
  }
  std::set<std::string> seen;
  for (const DocRow& r : rows) {
    if (r.section != section) continue;
    seen.insert(r.id);
    SCOPED_TRACE(fmt::format("ERRORS.md:{} [{}] {}", r.line, r.id, r.case_text));
    EXPECT_FALSE(r.patterns.empty()) << "no backquoted pattern";
    const auto it = by_id.find(r.id);
    if (it == by_id.end()) {
      ADD_FAILURE() << "catalogued case without a test";
      continue;
    }
    ASSERT_FALSE(it->second->runs.empty());
    static const std::set<std::string> kTypes = {"IoError", "FormatError", "ConfigError", "NumericError", "note"};
    EXPECT_TRUE(kTypes.count(r.exception)) << "exception column: " << r.exception;
    for (const CaseFn& run : it->second->runs) {
      const Outcome o = run();
      if (o.type != "*" && kTypes.count(r.exception)) {
        EXPECT_EQ(o.type, r.exception) << o.message;
      }
      bool any = false;
      for (const auto& p : r.patterns) any = any || matches_pattern(p, o.message);
      EXPECT_TRUE(any) << "message: " << o.message << "\npattern: " << r.patterns.front();
    }
  }
  EXPECT_FALSE(seen.empty()) << "no catalogue rows under \"## " << section << "\"";
  for (const Case& c : cases) EXPECT_TRUE(seen.count(c.id)) << "test case " << c.id << " has no row in the doc";
}

// A library case: runs f, expects a latentllm::Error.
inline CaseFn lib(std::function<void()> f) {
  return [f] { return outcome_of(f); };
}

// The rest of the line at `pos` (stdout, flushed at exit, may follow the error line on a pipe).
inline std::string cli_error_line(const std::string& out, std::size_t pos) {
  const auto end = out.find('\n', pos);
  return out.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

// A CLI case: runs `latentllm <args>`; a latentllm::Error is exit status 1 and one line
// "latentllm: error: <message>" on stderr (type "*": the CLI does not print it).
inline CaseFn cli(std::string args) {
  return [args] {
    std::string out;
    const int rc = run_command(cli_path().string() + " " + args, out);
    const std::string tag = "latentllm: error: ";
    const auto pos = out.rfind(tag);
    if (rc != 1 || pos == std::string::npos) return Outcome{fmt::format("exit status {}", rc), out};
    return Outcome{"*", cli_error_line(out, pos + tag.size())};
  };
}

}  // namespace latentllm::test
