// The jsonl layouts of the zero-shot tasks as lm-evaluation-harness's task configs turn them into
// requests (lm_eval/tasks/<task>/*.yaml and utils.py: doc_to_text, doc_to_choice, doc_to_target,
// target_delimiter " "), and the TinyStories next-sentence task.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <random>
#include <regex>

#include <fmt/format.h>

#include "core/random.hpp"
#include "io/json_keys.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/mc.hpp"

namespace latentllm::eval::mc {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& key, const std::string& expected, const json* got) {
  throw FormatError(fmt::format("{}: {} (expected {}, got {})", where, key, expected,
                                got ? io::brief(*got) : std::string("nothing")));
}

const json* find(const json& doc, const std::string& key) {
  const auto it = doc.find(key);
  return it == doc.end() ? nullptr : &*it;
}

std::string text(const json& doc, const std::string& key, const std::string& where) {
  const json* v = find(doc, key);
  if (!v || !v->is_string()) bad(where, key, "a string", v);
  return v->get<std::string>();
}

std::vector<std::string> texts(const json* v, const std::string& key, const std::string& where) {
  if (!v || !v->is_array() || v->size() < 2 ||
      !std::all_of(v->begin(), v->end(), [](const json& x) { return x.is_string(); }))
    bad(where, key, "a list of at least 2 strings", v);
  return v->get<std::vector<std::string>>();
}

// An index given as an integer or a string of digits (HellaSwag's label is "3").
int index_of(const json& doc, const std::string& key, int n, const std::string& where) {
  const json* v = find(doc, key);
  int i = -1;
  if (v && v->is_number_integer()) i = v->get<int>();
  if (v && v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (!s.empty() && s.size() < 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      i = std::stoi(s);
  }
  if (i < 0 || i >= n) bad(where, key, fmt::format("an index 0..{} of the choices", n - 1), v);
  return i;
}

Item standard(std::string context, std::vector<std::string> choices, int gold, const std::string& delimiter = " ") {
  Item it;
  it.contexts = {std::move(context)};
  for (const std::string& c : choices) it.continuations.push_back(delimiter + c);
  it.choices = std::move(choices);
  it.gold = gold;
  return it;
}

// ARC and OpenBookQA: {"choices": {"text": [...], "label": [...]}, "answerKey": "B"}; the gold is the
// label's position (lm-eval: choices.label.index(answerKey), OpenBookQA with answerKey.lstrip()).
std::pair<std::vector<std::string>, int> labelled_choices(const json& doc, const std::string& where) {
  const json* c = find(doc, "choices");
  if (!c || !c->is_object()) bad(where, "choices", "an object with text and label lists", c);
  std::vector<std::string> choice_text = texts(find(*c, "text"), "choices.text", where);
  const std::vector<std::string> labels = texts(find(*c, "label"), "choices.label", where);
  if (labels.size() != choice_text.size())
    bad(where, "choices.label", fmt::format("{} labels, one per choice", choice_text.size()), find(*c, "label"));
  std::string key = text(doc, "answerKey", where);
  key.erase(0, key.find_first_not_of(' '));
  const auto at = std::find(labels.begin(), labels.end(), key);
  if (at == labels.end()) bad(where, "answerKey", "one of choices.label", find(doc, "answerKey"));
  return {std::move(choice_text), static_cast<int>(at - labels.begin())};
}

// HellaSwag's preprocess (lm_eval/tasks/hellaswag/utils.py).
std::string hellaswag_preprocess(std::string t) {
  const std::size_t b = t.find_first_not_of(" \t\n\r\f\v");
  const std::size_t e = t.find_last_not_of(" \t\n\r\f\v");
  t = b == std::string::npos ? "" : t.substr(b, e - b + 1);
  for (std::size_t p; (p = t.find(" [title]")) != std::string::npos;) t.replace(p, 8, ". ");
  static const std::regex kBracket("\\[.*?\\]");
  t = std::regex_replace(t, kBracket, "");
  for (std::size_t p = t.find("  "); p != std::string::npos; p = t.find("  ", p + 1)) t.replace(p, 2, " ");
  return t;
}

// Python's str.capitalize (ASCII).
std::string capitalize(std::string s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    s[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return s;
}

Item hellaswag(const json& doc, const std::string& where) {
  const std::string ctx = text(doc, "ctx_a", where) + " " + capitalize(text(doc, "ctx_b", where));
  const std::string query = hellaswag_preprocess(text(doc, "activity_label", where) + ": " + ctx);
  std::vector<std::string> endings = texts(find(doc, "endings"), "endings", where);
  for (std::string& e : endings) e = hellaswag_preprocess(e);
  const int gold = index_of(doc, "label", static_cast<int>(endings.size()), where);
  return standard(query, std::move(endings), gold);
}

// WinoGrande's partial scoring: one context per option (the sentence up to "_" with the option in
// place), the same continuation (the rest of the sentence after "_", stripped).
Item winogrande(const json& doc, const std::string& where) {
  const std::string sentence = text(doc, "sentence", where);
  const std::size_t blank = sentence.find('_');
  if (blank == std::string::npos) bad(where, "sentence", "a sentence with a _ blank", find(doc, "sentence"));
  Item it;
  for (const char* key : {"option1", "option2"}) it.contexts.push_back(sentence.substr(0, blank) + text(doc, key, where));
  std::string target = sentence.substr(blank + 1);
  target.erase(0, target.find_first_not_of(" \t\n\r\f\v"));
  target.erase(target.find_last_not_of(" \t\n\r\f\v") + 1);
  it.continuations = {" " + target};
  it.choices = it.contexts;
  const std::string answer = text(doc, "answer", where);
  if (answer != "1" && answer != "2") bad(where, "answer", "\"1\" or \"2\"", find(doc, "answer"));
  it.gold = answer == "1" ? 0 : 1;
  return it;
}

Item boolq(const json& doc, const std::string& where) {
  int gold = -1;
  const json* label = find(doc, "label");
  const json* answer = find(doc, "answer");
  if (label && label->is_number_integer() && (label->get<int>() == 0 || label->get<int>() == 1)) gold = label->get<int>();
  else if (answer && answer->is_boolean()) gold = answer->get<bool>() ? 1 : 0;
  else bad(where, "label", "0 or 1 (super_glue), or answer true / false (google/boolq)", label ? label : answer);
  return standard(text(doc, "passage", where) + "\nQuestion: " + text(doc, "question", where) + "?\nAnswer:",
                  {"no", "yes"}, gold);
}

Item generic(const json& doc, const std::string& where) {
  std::vector<std::string> choices = texts(find(doc, "choices"), "choices", where);
  const int gold = index_of(doc, "gold", static_cast<int>(choices.size()), where);
  std::string delimiter = " ";
  if (const json* d = find(doc, "target_delimiter")) {
    if (!d->is_string()) bad(where, "target_delimiter", "a string", d);
    delimiter = d->get<std::string>();
  }
  return standard(text(doc, "context", where), std::move(choices), gold, delimiter);
}

}  // namespace

const std::vector<std::string>& format_names() {
  static const std::vector<std::string> kNames = {"auto", "generic", "arc", "hellaswag", "piqa",
                                                  "winogrande", "boolq", "openbookqa"};
  return kNames;
}

std::string detect_format(const json& doc) {
  if (!doc.is_object()) return "";
  if (doc.contains("ctx_a") && doc.contains("endings")) return "hellaswag";
  if (doc.contains("goal") && doc.contains("sol1")) return "piqa";
  if (doc.contains("sentence") && doc.contains("option1")) return "winogrande";
  if (doc.contains("passage") && doc.contains("question")) return "boolq";
  if (doc.contains("question_stem") && doc.contains("answerKey")) return "openbookqa";
  if (doc.contains("question") && doc.contains("choices") && doc.contains("answerKey")) return "arc";
  if (doc.contains("context") && doc.contains("choices") && doc.contains("gold")) return "generic";
  return "";
}

Item parse_item(const json& doc, const std::string& format, const std::string& where) {
  if (!doc.is_object()) throw FormatError(fmt::format("{}: line (expected a JSON object, got {})", where, io::brief(doc)));
  if (format == "generic") return generic(doc, where);
  if (format == "arc") {
    auto [choices, gold] = labelled_choices(doc, where);
    return standard("Question: " + text(doc, "question", where) + "\nAnswer:", std::move(choices), gold);
  }
  if (format == "openbookqa") {
    auto [choices, gold] = labelled_choices(doc, where);
    return standard(text(doc, "question_stem", where), std::move(choices), gold);
  }
  if (format == "hellaswag") return hellaswag(doc, where);
  if (format == "piqa") {
    const int gold = index_of(doc, "label", 2, where);
    return standard("Question: " + text(doc, "goal", where) + "\nAnswer:",
                    {text(doc, "sol1", where), text(doc, "sol2", where)}, gold);
  }
  if (format == "winogrande") return winogrande(doc, where);
  if (format == "boolq") return boolq(doc, where);
  std::string names;
  for (const auto& n : format_names()) names += (names.empty() ? "" : ", ") + n;
  throw ConfigError(fmt::format("--format (expected one of {}, got {})", names, format));
}

std::vector<Item> read_items(const fs::path& file, std::string format, int limit) {
  if (std::find(format_names().begin(), format_names().end(), format) == format_names().end())
    (void)parse_item(json::object(), format, file.string());  // throws the unknown format's error
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open", file.string()));
  std::vector<Item> items;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", file.string(), n);
    const json doc = json::parse(line, nullptr, false);
    if (doc.is_discarded()) throw FormatError(fmt::format("{}: not valid JSON", where));
    if (format == "auto") {
      format = detect_format(doc);
      if (format.empty()) {
        throw ConfigError(fmt::format("{}: --format auto (expected the keys of one of generic, arc, hellaswag, piqa, "
                                      "winogrande, boolq, openbookqa, got {})", where, io::brief(doc)));
      }
    }
    items.push_back(parse_item(doc, format, where));
    if (limit > 0 && static_cast<int>(items.size()) == limit) break;
  }
  if (items.empty()) throw FormatError(fmt::format("{}: no items (expected one JSON object per line)", file.string()));
  return items;
}

namespace {

// The sentences of a story: spans ending at '.', '!' or '?' (and a closing quote) before whitespace or
// the end, stripped.
std::vector<std::pair<std::size_t, std::size_t>> sentences(const std::string& s) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::size_t start = s.find_first_not_of(" \t\n");
  for (std::size_t i = start; start != std::string::npos && i < s.size(); ++i) {
    if (s[i] != '.' && s[i] != '!' && s[i] != '?') continue;
    std::size_t end = i + 1;
    while (end < s.size() && s[end] == '"') ++end;
    if (end < s.size() && s[end] != ' ' && s[end] != '\n') continue;
    out.emplace_back(start, end);
    start = s.find_first_not_of(" \t\n", end);
    i = end - 1;
    if (start == std::string::npos) break;
  }
  return out;
}

}  // namespace

std::vector<Item> tinystories_next_sentence(const fs::path& stories, std::uint64_t seed, int limit,
                                            int min_sentences) {
  const std::string all = core::read_file(stories);
  std::vector<std::string> docs;
  std::size_t pos = 0;
  while (pos < all.size()) {
    const std::size_t sep = all.find("<|endoftext|>", pos);
    docs.push_back(all.substr(pos, sep == std::string::npos ? std::string::npos : sep - pos));
    if (sep == std::string::npos) break;
    pos = sep + 13;
  }
  struct Story {
    std::string text;
    std::vector<std::pair<std::size_t, std::size_t>> sent;
  };
  std::vector<Story> pool;
  for (std::string& d : docs) {
    auto sent = sentences(d);
    if (static_cast<int>(sent.size()) >= std::max(min_sentences, 3)) pool.push_back({std::move(d), std::move(sent)});
  }
  if (pool.size() < 4) {
    throw ConfigError(fmt::format("{}: stories with at least {} sentences (expected 4 or more, got {})",
                                  stories.string(), min_sentences, pool.size()));
  }
  std::mt19937_64 rng(seed);
  std::vector<Item> items;
  for (std::size_t k = 0; k < pool.size(); ++k) {
    const Story& st = pool[k];
    const std::size_t at = std::max<std::size_t>(2, st.sent.size() / 2);  // the true next sentence's index
    const auto sentence = [](const Story& s, std::size_t i) {
      return s.text.substr(s.sent[i].first, s.sent[i].second - s.sent[i].first);
    };
    // Three other stories that have a sentence at `at`, by a partial Fisher-Yates over the candidates.
    std::vector<std::size_t> others;
    for (std::size_t j = 0; j < pool.size(); ++j)
      if (j != k && pool[j].sent.size() > at) others.push_back(j);
    if (others.size() < 3) continue;
    std::vector<std::string> choices = {sentence(st, at)};
    for (std::size_t d = 0; d < 3; ++d) {
      std::swap(others[d], others[d + static_cast<std::size_t>(core::uniform_below(rng, others.size() - d))]);
      choices.push_back(sentence(pool[others[d]], at));
    }
    const auto gold = static_cast<int>(core::uniform_below(rng, 4));
    std::swap(choices[0], choices[static_cast<std::size_t>(gold)]);
    items.push_back(standard(st.text.substr(st.sent[0].first, st.sent[at - 1].second - st.sent[0].first),
                             std::move(choices), gold));
    if (limit > 0 && static_cast<int>(items.size()) == limit) break;
  }
  return items;
}

}  // namespace latentllm::eval::mc
