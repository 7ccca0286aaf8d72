// Chat templates (include/latentllm/chat.hpp, src/io/jinja_*.cpp): the real templates of the supported
// families rendered byte for byte as Debian's python3-jinja2 renders them in transformers' environment
// (tests/data/chat_templates/golden.json, scripts/gen_chat_template_golden.py), LLaVA's conversation modes
// as llava/conversation.py writes them (conv_modes.json, scripts/gen_conv_mode_golden.py), and the Jinja
// semantics templates rely on, each against the value jinja2 gives.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "errors_doc.hpp"
#include "io/jinja.hpp"
#include "latentllm/chat.hpp"
#include "latentllm/error.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

ojson read_ojson(const fs::path& p) { return ojson::parse(read_bytes(p)); }

std::string render(const std::string& source, const ojson& ctx = ojson::object()) {
  return io::jinja::Template(source, "t").render(ctx);
}

// A template of tests/data/chat_templates, or read in place from ../shared (never copied here): the
// Llama-3 and Qwen3 tokenizer_config.json files of ../shared/data/tokenizers.
std::string template_source(const std::string& name) {
  if (name == "llama-3-8b-instruct" || name == "qwen3") {
    const fs::path f = shared_path(std::string("data/tokenizers/") + (name == "qwen3" ? "qwen3" : "llama3") +
                                   "/tokenizer_config.json");
    return read_ojson(f).at("chat_template").get<std::string>();
  }
  return read_bytes(test_data_path("chat_templates/" + name + ".jinja"));
}

TEST(ChatTemplate, RealTemplatesMatchJinja2) {
  const ojson doc = read_ojson(test_data_path("chat_templates/golden.json"));
  int rendered = 0, refused = 0;
  for (const ojson& c : doc.at("cases")) {
    const std::string name = c.at("template");
    SCOPED_TRACE(name + " / " + c.at("case").get<std::string>() + " / add_generation_prompt " +
                 c.at("context").at("add_generation_prompt").dump());
    const ojson& ctx = c.at("context");
    ojson extra = ojson::object();
    for (const auto& [k, v] : ctx.items())
      if (k != "messages" && k != "add_generation_prompt" && k != "bos_token" && k != "eos_token") extra[k] = v;
    const io::ChatTemplate t(template_source(name), name, ctx.at("bos_token"), ctx.at("eos_token"));
    if (c.contains("output")) {
      EXPECT_EQ(t.render(ctx.at("messages"), ctx.at("add_generation_prompt"), extra), c.at("output").get<std::string>());
      ++rendered;
    } else {
      try {
        (void)t.render(ctx.at("messages"), ctx.at("add_generation_prompt"), extra);
        ADD_FAILURE() << "expected the template to refuse the conversation";
      } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()), name + ": " + c.at("error").get<std::string>());
      }
      ++refused;
    }
  }
  EXPECT_GE(rendered, 70);
  EXPECT_GE(refused, 6);
}

TEST(ChatTemplate, ConvModesMatchLlava) {
  const ojson doc = read_ojson(test_data_path("chat_templates/conv_modes.json"));
  int n = 0;
  for (const ojson& c : doc.at("cases")) {
    SCOPED_TRACE(c.at("mode").get<std::string>() + " / " + c.at("case").get<std::string>());
    if (c.contains("error")) {
      EXPECT_THROW((void)io::conv_prompt(c.at("mode").get<std::string>(), c.at("messages")), ConfigError);
      continue;
    }
    EXPECT_EQ(io::conv_prompt(c.at("mode").get<std::string>(), c.at("messages")), c.at("prompt").get<std::string>());
    ++n;
  }
  EXPECT_GE(n, 16);
  expect_error<ConfigError>([] { (void)io::conv_prompt("vicuna_v9", ojson::array()); }, {"--conv-mode (expected one of vicuna_v1, v1"});
  expect_error<ConfigError>([] { (void)io::conv_prompt("vicuna_v1", ojson::parse(R"([{"role":"assistant","content":"x"}])")); },
               {"vicuna_v1: messages (expected", "got role assistant for message 0)"});
}

TEST(ChatTemplate, LoadsWhereTransformersLooks) {
  const fs::path dir = make_temp_dir("chat-load");
  EXPECT_FALSE(io::ChatTemplate::load(dir).has_value());
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "chat_template": "A{{ bos_token }}{{ eos_token }}"})";
  auto t = io::ChatTemplate::load(dir);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->render(ojson::array()), "A<s></s>");
  std::ofstream(dir / "chat_template.json") << R"({"chat_template": "B{{ messages | length }}"})";
  EXPECT_EQ(io::ChatTemplate::load(dir)->render(ojson::array({1, 2})), "B2");
  std::ofstream(dir / "chat_template.jinja") << "C{{ add_generation_prompt }}\n";
  EXPECT_EQ(io::ChatTemplate::load(dir)->render(ojson::array(), false), "CFalse");
  const fs::path named = make_temp_dir("chat-named");
  std::ofstream(named / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  EXPECT_EQ(io::ChatTemplate::load(named)->render(ojson::array()), "D");
  EXPECT_TRUE(io::prompt_has_bos("<s>[INST]", "<s>"));
  EXPECT_FALSE(io::prompt_has_bos("USER: hi", "<s>"));
  EXPECT_FALSE(io::prompt_has_bos("x", ""));
}

// Each expected value is what jinja2 3.1 renders in transformers' environment.
TEST(Jinja, Whitespace) {
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");  // lstrip_blocks, trim_blocks
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("a  {{- 'x' -}}  b"), "axb");
  EXPECT_EQ(render("x {% if true %}y{% endif %} z"), "x y z");  // not at a line start: kept
  EXPECT_EQ(render("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(render("{# c #}\nx\n"), "x");  // comment then newline trimmed; one trailing newline dropped
  EXPECT_EQ(render("x\n\n"), "x\n");
}

TEST(Jinja, ValuesAndOperators) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 / 2 }}"), "7 3 -4 2 3.5 1.0");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ [1, 'b', none, true] }} {{ {'k': \"it's\"} }}"),
            "a1None [1, 'b', None, True] {'k': \"it's\"}");
  EXPECT_EQ(render("{{ (1 == 1.0) ~ (true == 1) ~ ('a' in 'cat') ~ (2 not in [1]) }}"), "TrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 'x' if false else 'y' }}{{ 'z' if false }}|{{ missing }}|"), "y||");
  EXPECT_EQ(render("{{ m[1:] }} {{ m[::-1] }} {{ m[-1] }} {{ 'hello'[1:3] }} {{ m[-2:] }}", {{"m", {1, 2, 3}}}),
            "[2, 3] [3, 2, 1] 3 el [2, 3]");
  EXPECT_EQ(render("{{ '\\u00e9\\x41\\n' }}{{ \"\\s\" }}"), "éA\n\\s");
}

TEST(Jinja, StringMethodsFiltersTests) {
  EXPECT_EQ(render("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\na'.lstrip('\\n') }}|{{ 'a\\n'.rstrip() }}"),
            "a b|a|a|a");
  EXPECT_EQ(render("{{ 'a</think>b'.split('</think>')[-1] }} {{ ' a  b '.split() }} {{ 'ab'.startswith('a') }}"
                   "{{ 'ab'.endswith(('x', 'b')) }} {{ 'ab'.upper() }} {{ 'hello world'.title() }}"),
            "b ['a', 'b'] TrueTrue AB Hello World");
  EXPECT_EQ(render("{{ ' x ' | trim }}|{{ 'héllo' | length }}|{{ [1,2] | length }}|{{ x | tojson }}|{{ x | tojson(indent=2) }}",
                   {{"x", ojson::parse(R"({"a": [1, "é"], "b": {}})")}}),
            "x|5|2|{\"a\": [1, \"é\"], \"b\": {}}|{\n  \"a\": [\n    1,\n    \"é\"\n  ],\n  \"b\": {}\n}");
  EXPECT_EQ(render("{{ m | selectattr('type', 'equalto', 'image') | list | length }}"
                   "{{ m | map(attribute='type') | join(',') }}{{ ['a', 'b', 'c'] | reject('equalto', 'b') | join }}",
                   {{"m", ojson::parse(R"([{"type": "image"}, {"type": "text"}, {"type": "image"}])")}}),
            "2image,text,imageac");
  EXPECT_EQ(render("{{ x is defined }}{{ y is not defined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}"
                   "{{ 3 is odd }}{{ 4 is divisibleby 2 }}{{ false is false }}{{ 1 is integer }}",
                   {{"x", 1}}),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ d.get('a') }}{{ d.get('z', 9) }}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", ojson::parse(R"({"a": 1, "b": 2})")}}),
            "19a=1;b=2;");
  EXPECT_EQ(render("{{ missing | default('d') }}{{ '' | default('e', true) }}"), "de");
}

TEST(Jinja, LoopsScopesNamespaces) {
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
            "0TrueFalse3;1FalseFalse3;2FalseTrue3;");
  EXPECT_EQ(render("{% set a = 1 %}{% for x in [1] %}{% set a = 2 %}{% endfor %}{{ a }}"), "1");  // loop scope
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% for x in [1] %}{% set ns.a = 2 %}{% endfor %}{{ ns.a }}"), "2");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.index }}{% endfor %}"), "2142");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}"
                   "{{ x }}{% endfor %}"),
            "1");
  EXPECT_EQ(render("{% if false %}a{% elif true %}b{% else %}c{% endif %}{% generation %}g{% endgeneration %}"), "bg");
}

TEST(Jinja, ErrorsNameTheConstruct) {
  expect_error<ConfigError>([] { (void)render("{{ raise_exception('no system role') }}"); }, {"t: no system role"});
  EXPECT_THROW((void)render("{{ raise_exception('x') }}"), ConfigError);
  expect_error<FormatError>([] { (void)render("{% macro f() %}{% endmacro %}"); },
               {"t: line 1: tag {% macro %} is not supported (expected if, for, set, break, continue or generation)"});
  expect_error<FormatError>([] { (void)render("a\n{% if x %}"); }, {"t: unclosed block (expected {% elif or else or endif %}"});
  expect_error<FormatError>([] { (void)render("{{ x | frobnicate }}"); }, {"t: line 1: filter frobnicate is not supported"});
  expect_error<FormatError>([] { (void)render("{{ 'a' + 1 }}"); }, {"t: line 1: operator + (expected numbers, strings or lists, got str and int)"});
  expect_error<FormatError>([] { (void)render("{{ x.y }}"); }, {"t: line 1: attribute y of an undefined value"});
  expect_error<FormatError>([] { (void)render("{{ 1 +"); }, {"t: line 1: unclosed tag (expected }}, got the end of the template)"});
  expect_error<FormatError>([] { (void)render("{{ 1 + }}"); }, {"t: line 1: syntax (expected an expression, got the end of the tag)"});
  expect_error<FormatError>([] { (void)render("{{ strftime_now('%Y') }}"); }, {"function strftime_now is not supported"});
  EXPECT_THROW((void)render("{{ 'a' + 1 }}"), FormatError);
}

fs::path template_dir(const std::string& file, const std::string& body) {
  const fs::path dir = make_temp_dir("chat-err");
  std::ofstream(dir / file) << body;
  return dir;
}

std::string repeat(const std::string& s, int n) {
  std::string r;
  for (int i = 0; i < n; ++i) r += s;
  return r;
}
std::string nested_ifs(int n) { return repeat("{% if true %}", n) + "x" + repeat("{% endif %}", n); }

TEST(ErrorsDoc, ChatTemplates) {
  const auto load = [](const std::string& file, const std::string& body) {
    return lib([=] { (void)io::ChatTemplate::load(template_dir(file, body)); });
  };
  const auto tmpl = [](const std::string& source) {
    return lib([=] { (void)io::ChatTemplate(source, "dir/chat_template.jinja").render(ojson::array()); });
  };
  const auto conv = [](const std::string& mode, const std::string& messages) {
    return lib([=] { (void)io::conv_prompt(mode, ojson::parse(messages)); });
  };
  check_section("Chat templates (`io::ChatTemplate`, `io::conv_prompt`, `io::jinja::Template`)",
                {
                    {"chat-config-template", {load("tokenizer_config.json", R"({"chat_template": 3})"),
                                              load("tokenizer_config.json", R"({"chat_template": [{"name": "x", "template": "y"}]})")}},
                    {"chat-json-template", {load("chat_template.json", R"({"template": "x"})")}},
                    {"chat-tag", {tmpl("{% macro f() %}{% endmacro %}"), tmpl("{% raw %}"), tmpl("{% set x %}{% endset %}x")}},
                    {"chat-unclosed-block", {tmpl("{% for m in messages %}"), tmpl("{% if true %}")}},
                    {"chat-unclosed-tag", {tmpl("{{ 1"), tmpl("{% if"), tmpl("{# x")}},
                    {"chat-syntax", {tmpl("{{ 99999999999999999999999 }}"), tmpl("{{ 1 + }}"), tmpl("{{ a[] }}"), tmpl("{{ $ }}"), tmpl("{{ '\\u12' }}")}},
                    {"chat-filter", {tmpl("{{ 1 | frobnicate }}"), tmpl("{{ 1 is prime }}"), tmpl("{{ 'a'.zfill(3) }}")}},
                    {"chat-function", {tmpl("{{ strftime_now('%Y') }}")}},
                    {"chat-types", {tmpl("{{ 'a' + 1 }}"), tmpl("{{ [] - 1 }}"), tmpl("{{ 1 < 'a' }}"), tmpl("{{ 1 in 2 }}"),
                                    tmpl("{{ 3[0] }}"), tmpl("{{ {}[1:] }}"), tmpl("{% for x in 3 %}{% endfor %}"),
                                    tmpl("{% for a, b in [1] %}{% endfor %}"), tmpl("{% set n = 1 %}{% set n.a = 2 %}"),
                                    tmpl("{{ 1 / 0 }}"), tmpl("{{ 1 // 0 }}"), tmpl("{{ 3 | trim }}"),
                                    tmpl("{{ range('a') }}"), tmpl("{{ -'a' }}"), tmpl("{{ undefined_x[0] }}"),
                                    tmpl("{{ (1)(2) }}")}},
                    {"chat-bounds", {tmpl("{{ " + std::string(201, '(') + "1" + std::string(201, ')') + " }}"),
                                     tmpl(nested_ifs(201)), tmpl("{{ 1" + repeat(" + 1", 2000) + " }}"),
                                     tmpl("{{ range(2000000) }}"), tmpl("{{ 'ab' * 1000000 }}"),
                                     tmpl("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}")}},
                    {"chat-undefined", {tmpl("{{ x.y }}")}},
                    {"chat-refused", {tmpl("{{ raise_exception('Only user and assistant roles are supported!') }}")}},
                    {"chat-conv-messages", {conv("vicuna_v1", R"([{"role": "assistant", "content": "x"}])"),
                                            conv("vicuna_v1", R"([{"role": "user", "content": ""}])"),
                                            conv("llava_v1", R"([])"),
                                            conv("plain", R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}])")}},
                });
}

}  // namespace
}  // namespace latentllm::test
