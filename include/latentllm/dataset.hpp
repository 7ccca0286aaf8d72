// Evaluation and calibration text: the exact strings of the GPTQ / SparseGPT perplexity protocol,
// rebuilt from local files, and JSON-lines documents for calibration.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace latentllm::io {

enum class Dataset { WikiText2, PTB, C4, Text, StoriesValid, StoriesTest, C4Heldout };

// The documents at the end of a C4 JSON-lines file that Dataset::C4Heldout evaluates on, and that a
// calibration must leave out for that figure to be held out (calib::CalibOptions::holdout_docs).
inline constexpr std::size_t kC4HeldoutDocs = 100;

// "wikitext2", "ptb", "c4", "text", "tinystories-valid", "tinystories-test", "c4-heldout". Throws
// ConfigError listing the names for anything else.
Dataset parse_dataset(std::string_view name);
// The name parse_dataset accepts.
std::string_view dataset_name(Dataset d);

// The evaluation string of `file` (UTF-8), as the Python protocol builds it:
//  WikiText2: "\n\n".join(rows), rows = the lines of wiki.test.raw each keeping its "\n", and every
//             whitespace-only line as "" (the HF loader yields `row if row.strip() else ""`);
//             WikiText-2 raw test -> 1,294,336 chars, sha256 696cca6b...
//  PTB:       " ".join(line.strip() for line in file) (HF ptb_text_only sentences); ptb.valid.txt ->
//             393,041 chars, sha256 1f1d25ca...
//  C4:        " ".join of the "text" of the first 1100 JSON lines (no token truncation here);
//             c4-train.00000-of-01024.first1000.jsonl -> sha256 409f11b4...
//  C4Heldout: " ".join of the "text" of the last kC4HeldoutDocs (100) JSON lines: C4 text held out of
//             a calibration on the same file with --calib-holdout 100 (validation for C4-calibrated
//             models). FormatError when the file has no more documents than that.
//  Text:      the file as it is.
//  StoriesValid / StoriesTest: the validation and test halves of a file of stories separated by blank
//             lines ("\n\n"), each half joined by "\n\n": of the shared
//             TinyStories-valid.stories0001-0232.clean.txt, stories 1–116 (where defaults are chosen) and
//             117–232 (where they are reported). FormatError when the file has fewer than 2 stories.
// Lines are read as Python's text mode does (universal newlines: "\r\n" and "\r" end a line and
// become "\n"); strip() removes Python's whitespace (str.isspace: Unicode White_Space plus
// U+001C-001F), the same as ASCII whitespace for these ASCII files.
// Throws IoError if the file cannot be read, FormatError "<file>: ..." for invalid UTF-8, bad JSON
// and "<file>: empty dataset" when the file or the string has no non-whitespace text. The raw-text
// datasets (WikiText2, PTB, the stories) refuse a JSON-lines file (FormatError "<file>: a JSON-lines
// file (expected the raw text of --dataset <name>; ...)"), C4 and C4Heldout a file that is not JSON
// lines (as read_jsonl_texts).
std::string build_eval_text(Dataset dataset, const std::filesystem::path& file);

// The "text" field of each JSON line (at most `max_docs` documents; 0 = all). Blank lines are
// skipped. Throws FormatError "<file>: not a JSON-lines file (...)" when the first document line is
// plain text (not JSON, not starting with '{'), "<file>:<line>: ..." for a line that is not a JSON object with a
// string "text", and "<file>: empty dataset" when there is no document.
std::vector<std::string> read_jsonl_texts(const std::filesystem::path& file, std::size_t max_docs);

}  // namespace latentllm::io
