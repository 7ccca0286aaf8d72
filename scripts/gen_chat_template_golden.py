#!/usr/bin/python3
"""Golden renderings of the real chat templates in tests/data/chat_templates/*.jinja, made once by Debian's
python3-jinja2 (run with /usr/bin/python3) in the environment transformers' apply_chat_template uses:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols extension, a
`{% generation %}` block rendered as is (transformers' AssistantTracker), the global raise_exception and a
tojson filter of json.dumps(ensure_ascii=False, indent=indent).

Writes tests/data/chat_templates/golden.json: for each template and conversation, the context rendered
with and the output (or the message of the exception the template raised). The C++ renderer
(src/io/jinja_*.cpp) must reproduce every output byte for byte (tests/unit/test_chat_template.cpp).

Usage: /usr/bin/python3 scripts/gen_chat_template_golden.py
"""
import json
import os
import sys

sys.path.insert(0, "/usr/lib/python3/dist-packages")  # Debian's jinja2, not a pip one earlier on the path
import jinja2  # noqa: E402
from jinja2 import nodes  # noqa: E402
from jinja2.ext import Extension  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "chat_templates")


class Generation(Extension):
    """{% generation %}...{% endgeneration %}: the body rendered unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[Generation, jinja2.ext.loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception

CHAT = [
    {"role": "user", "content": "Hello, how are you?"},
    {"role": "assistant", "content": "I'm doing great. How can I help you today?"},
    {"role": "user", "content": "I'd like to show off how chat templating works!"},
]
SYSTEM = [{"role": "system", "content": "You are a friendly chatbot who always responds in the style of a pirate"}] + CHAT
SINGLE = [{"role": "user", "content": "  Héllo,\twörld — 你好 😀  "}]
BAD_ROLES = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
TOOLS = [{"type": "function", "function": {"name": "get_current_temperature",
                                           "description": "Get the current temperature at a location.",
                                           "parameters": {"type": "object", "properties": {
                                               "location": {"type": "string",
                                                            "description": "The location, \"City, Country\""}},
                                               "required": ["location"]}}}]
TOOL_CALLS = [
    {"role": "user", "content": "What's the temperature in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_current_temperature",
                                          "arguments": {"location": "Paris, France"}}}]},
    {"role": "tool", "content": "22.0"},
]
THINK = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>\nEasy: four.\n</think>\n\nIt is 4."},
    {"role": "user", "content": "And 3+3?"},
]
IMAGE_CHAT = [
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is shown in this image?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A red circle."}]},
    {"role": "user", "content": [{"type": "text", "text": "And its colour?"}]},
]
IMAGE_SYSTEM = [{"role": "system", "content": [{"type": "text", "text": "Answer briefly."}]},
                {"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "Compare."}]}]

TEXT_CASES = {"chat": CHAT, "system": SYSTEM, "single": SINGLE, "bad_roles": BAD_ROLES}
IMAGE_CASES = {"image_chat": IMAGE_CHAT, "image_system": IMAGE_SYSTEM}

# template file -> (bos_token, eos_token, the conversations, extra variables per case)
TEMPLATES = {
    "llama-2-7b-chat": ("<s>", "</s>", TEXT_CASES, {}),
    "mistral-7b-instruct-v0.1": ("<s>", "</s>", TEXT_CASES, {}),
    "mixtral-8x7b-instruct-v0.1": ("<s>", "</s>", TEXT_CASES, {}),
    "llama-3-8b-instruct": ("<|begin_of_text|>", "<|end_of_text|>", TEXT_CASES, {}),
    "llama-3.1-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>", dict(TEXT_CASES, tools=SYSTEM[:2]),
                              {"tools": {"tools": TOOLS}}),
    "qwen1.5-72b-chat": ("", "<|im_end|>", TEXT_CASES, {}),
    "qwen2.5-7b-instruct": ("", "<|im_end|>", dict(TEXT_CASES, tools=CHAT[:1], tool_calls=TOOL_CALLS),
                            {"tools": {"tools": TOOLS}}),
    "qwen3": ("", "<|im_end|>", dict(TEXT_CASES, tools=CHAT[:1], tool_calls=TOOL_CALLS, think=THINK,
                                     no_think=CHAT[:1]),
              {"tools": {"tools": TOOLS}, "no_think": {"enable_thinking": False}}),
    "llava-1.5-7b-hf": ("<s>", "</s>", dict(IMAGE_CASES, chat=CHAT), {}),
    "llava-v1.6-mistral-7b-hf": ("<s>", "</s>", IMAGE_CASES, {}),
}


# Templates read in place from ../shared (its files are never copied into the repository).
SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared")
IN_SHARED = {"llama-3-8b-instruct": "data/tokenizers/llama3/tokenizer_config.json",
             "qwen3": "data/tokenizers/qwen3/tokenizer_config.json"}


def template_source(name):
    if name in IN_SHARED:
        with open(os.path.join(SHARED, IN_SHARED[name]), encoding="utf-8") as f:
            return json.load(f)["chat_template"]
    with open(os.path.join(HERE, name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def main():
    cases = []
    for name, (bos, eos, convs, extras) in TEMPLATES.items():
        template = ENV.from_string(template_source(name))
        for case, messages in convs.items():
            for add_generation_prompt in (True, False):
                context = {"messages": messages, "add_generation_prompt": add_generation_prompt,
                           "bos_token": bos, "eos_token": eos}
                context.update(extras.get(case, {}))
                entry = {"template": name, "case": case, "context": context}
                try:
                    entry["output"] = template.render(**context)
                except TemplateError as e:
                    entry["error"] = str(e)
                cases.append(entry)
    doc = {"generator": "scripts/gen_chat_template_golden.py",
           "jinja2": "Debian python3-jinja2 " + jinja2.__version__,
           "environment": "ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), loopcontrols, "
                          "generation, raise_exception, tojson(ensure_ascii=False)",
           "cases": cases}
    with open(os.path.join(HERE, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} renderings", file=sys.stderr)


if __name__ == "__main__":
    main()
