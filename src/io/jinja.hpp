// A Jinja2 subset sufficient for the chat templates Hugging Face checkpoints ship (tokenizer_config.json
// `chat_template`, chat_template.json, chat_template.jinja), rendered as transformers renders them:
// jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension,
// `raise_exception(msg)` and a `{% generation %}` block that renders its body, and a `tojson` that
// keeps non-ASCII characters (json.dumps(ensure_ascii=False), optional indent).
//
// Supported: text, {{ expr }}, {% if/elif/else %}, {% for x in seq [if cond] %} (tuple targets,
// {% else %}, `loop.*`, break/continue), {% set x = expr %} and {% set ns.attr = expr %}, comments,
// whitespace control (`-`, `+`), Python literals (strings with escapes, ints, floats, lists, tuples,
// dicts, true/false/none in both cases), operators (or and not, == != < > <= >= in, not in, is [not]
// test, + - * / // % ~, unary -), subscripts and slices (a[i], a[i:j:k], negative indices), attributes
// (a key of a mapping), the string and mapping methods chat templates call (strip/lstrip/rstrip,
// startswith/endswith, split, upper/lower/title/capitalize, replace, items/keys/values/get), the
// filters and tests they use (trim length count tojson upper lower first last join list string int
// default map select reject selectattr rejectattr items capitalize title replace safe abs; defined
// undefined none string number integer float boolean mapping iterable sequence true false equalto eq
// ne sameas odd even divisibleby in lt gt le ge), and namespace(), dict(), range(). Anything else is a
// FormatError naming the construct and the line, never a silent difference.
//
// Values are JSON values (nlohmann::ordered_json: a mapping keeps its insertion order, as a Python
// dict does); an undefined variable is a value of its own (nlohmann's `discarded`): printed as "",
// false, iterable as empty; reading an attribute of it is an error, as in jinja2.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace latentllm::io::jinja {

using Value = nlohmann::ordered_json;

class Template {
 public:
  // Parses `source`; FormatError "<origin>: line N: <what>" for syntax it does not support or cannot
  // read. `origin` names the template in messages (a file and key).
  Template(std::string_view source, std::string origin);
  // Renders with the variables of `context` (a JSON object). Throws ConfigError "<origin>: <message>"
  // when the template calls raise_exception(message), FormatError "<origin>: line N: <what>" for an
  // operation on values of the wrong types (as jinja2 would raise).
  std::string render(const Value& context) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// Python's str() of a value as jinja2 prints it ("None", "True", "['a', 1]", "1.5"); "" for undefined.
std::string to_python_str(const Value& v);
// transformers' tojson: json.dumps(v, ensure_ascii=False, indent=indent) (separators ", " and ": "
// without indent, "," and ": " with it); indent < 0 means none.
std::string to_json(const Value& v, int indent = -1);

}  // namespace latentllm::io::jinja
