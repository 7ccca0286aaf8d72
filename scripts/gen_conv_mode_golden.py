#!/usr/bin/python3
"""LLaVA's conversation modes as LLaVA itself writes them: Conversation.get_prompt() of
llava/conversation.py (haotian-liu/LLaVA, read from a checkout given on the command line, not copied) for
a few conversations, each ending with the assistant's turn open (append_message(roles[1], None)), as
model_vqa_science.py builds its prompts. Writes tests/data/chat_templates/conv_modes.json, which
io::conv_prompt must reproduce (tests/unit/test_chat_template.cpp).

Usage: /usr/bin/python3 scripts/gen_conv_mode_golden.py LLAVA_CHECKOUT   (needs python3-pil)
"""
import importlib.util
import json
import os
import sys

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "chat_templates")
MODES = ["vicuna_v1", "v1", "llava_v1", "llama_2", "llava_llama_2", "mistral_instruct", "chatml_direct",
         "mistral_direct", "mpt", "plain"]
CASES = {
    "single": [{"role": "user", "content": "<image>\nWhat is shown?"}],
    "multi": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there."},
              {"role": "user", "content": "How are you?"}],
    "system": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Why?"}],
}


def main():
    spec = importlib.util.spec_from_file_location("conversation",
                                                  os.path.join(sys.argv[1], "llava", "conversation.py"))
    conv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conv)
    out = []
    for mode in MODES:
        for case, messages in CASES.items():
            c = conv.conv_templates[mode].copy()
            turns = messages
            if messages[0]["role"] == "system":
                # a system message replaces the mode's system text (the MPT styles keep their header)
                header = "<|im_start|>system\n" if c.sep_style == conv.SeparatorStyle.MPT else ""
                c.system = header + messages[0]["content"]
                turns = messages[1:]
            for i, m in enumerate(turns):
                c.append_message(c.roles[i % 2], m["content"])
            c.append_message(c.roles[1], None)
            try:
                out.append({"mode": mode, "case": case, "messages": messages, "prompt": c.get_prompt()})
            except TypeError:  # plain has no sep2: an assistant turn cannot be written
                out.append({"mode": mode, "case": case, "messages": messages, "error": True})
    with open(os.path.join(HERE, "conv_modes.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": "scripts/gen_conv_mode_golden.py", "source": "haotian-liu/LLaVA llava/conversation.py",
                   "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} prompts", file=sys.stderr)


if __name__ == "__main__":
    main()
