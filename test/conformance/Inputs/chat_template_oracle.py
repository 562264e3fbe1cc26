"""Renders every chat template in a directory with transformers' apply_chat_template machinery
(render_jinja_template: Jinja with trim_blocks, lstrip_blocks, loopcontrols, raise_exception,
strftime_now) and with tpc-chat, for several conversations with and without a generation
prompt, and compares the two byte for byte. A template that raises must make tpc-chat fail
with the same message.

    python chat_template_oracle.py TPC_CHAT TEMPLATE_DIR WORKDIR
"""
import json
import os
import subprocess
import sys

import jinja2
from transformers.utils.chat_template_utils import render_jinja_template

BOS, EOS = "<|bos|>", "<|eos|>"

SYSTEM = {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."}
CONVERSATIONS = {
    "user-only": [{"role": "user", "content": "Hello there!"}],
    "system": [SYSTEM, {"role": "user", "content": "Hello there!"}],
    "multi-turn": [
        {"role": "user", "content": "  What is 2+2?  \n"},
        {"role": "assistant", "content": "4, \"of course\" - it's 'four'."},
        {"role": "user", "content": "Und auf Deutsch? Grüße — ✓"},
        {"role": "assistant", "content": "<think>\nEasy.\n</think>\n\nVier."},
        {"role": "user", "content": "Thanks\u00a0\u3000\n"},
    ],
    "assistant-last": [
        {"role": "user", "content": "\n\tIndented question?"},
        {"role": "assistant", "content": ""},
    ],
    "system-multi-turn": [
        SYSTEM,
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!\n"},
        {"role": "user", "content": "Bye"},
    ],
}


# Tools as an OpenAI client sends them (apply_chat_template(tools=...) takes the same dicts),
# with nested schemas, a description with quotes and non-ASCII, and keys in a non-sorted order
# that tojson must keep.
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city, \"now\" — in °C.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city's name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "sum",
        "description": "Adds numbers.",
        "parameters": {"type": "object", "properties": {
            "values": {"type": "array", "items": {"type": "number"}, "minItems": 1}},
            "required": ["values"], "additionalProperties": False}}},
]
# An assistant turn that called tools, and their results, as the server hands them to the
# template: arguments parsed into a dict (as vLLM does), ids of nine characters (Mistral's
# templates require them).
CALLS = [{"id": "call00001", "type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}},
         {"id": "call00002", "type": "function",
          "function": {"name": "sum", "arguments": {"values": [1, 2.5]}}}]
TOOL_CONVERSATIONS = {
    "tools-user": [{"role": "user", "content": "Weather in Zürich?"}],
    "tools-system": [SYSTEM, {"role": "user", "content": "Weather in Zürich?"}],
    "tools-one-call": [
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": None, "tool_calls": CALLS[:1]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather",
         "content": "{\"temperature\": 21}"},
    ],
    "tools-two-calls": [
        SYSTEM,
        {"role": "user", "content": "Weather in Zürich, and 1 + 2.5?"},
        {"role": "assistant", "content": None, "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather",
         "content": "{\"temperature\": 21}"},
        {"role": "tool", "tool_call_id": "call00002", "name": "sum", "content": "3.5"},
        {"role": "assistant", "content": "21 °C, and 3.5."},
        {"role": "user", "content": "Thanks"},
    ],
}
# The templates that teach their model a tool format; the others are rendered with the tool
# conversations too (most ignore tools, some raise), and must do as transformers does.
TOOL_TEMPLATES = ("llama3.1-8b-instruct.jinja", "llama3.2-1b-instruct.jinja",
                  "mistral-7b-instruct-v0.3.jinja", "qwen2.5-instruct.jinja", "qwen3.jinja")


def main():
    tpc_chat, template_dir, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    failures = 0
    for name in sorted(os.listdir(template_dir)):
        if not name.endswith(".jinja"):
            continue
        path = os.path.join(template_dir, name)
        with open(path, encoding="utf-8") as f:
            template = f.read()
        cases = raised = 0
        failures_before = failures
        tools_path = os.path.join(work, "tools.json")
        with open(tools_path, "w", encoding="utf-8") as f:
            json.dump(TOOLS, f, ensure_ascii=False)
        conversations = [(c, m, None) for c, m in CONVERSATIONS.items()]
        if name in TOOL_TEMPLATES:
            conversations += [(c, m, TOOLS) for c, m in TOOL_CONVERSATIONS.items()]
        for conv_name, messages, tools in conversations:
            messages_path = os.path.join(work, conv_name + ".json")
            with open(messages_path, "w", encoding="utf-8") as f:
                json.dump(messages, f, ensure_ascii=False)
            for gen in (True, False):
                case = f"{name} {conv_name} add_generation_prompt={gen}"
                try:
                    rendered, _ = render_jinja_template(
                        conversations=[messages], tools=tools, chat_template=template,
                        add_generation_prompt=gen, bos_token=BOS, eos_token=EOS)
                    expected, expected_error = rendered[0], None
                except jinja2.exceptions.TemplateError as e:
                    expected, expected_error = None, str(e)
                argv = [tpc_chat, path, messages_path, "--bos", BOS, "--eos", EOS]
                if tools is not None:
                    argv += ["--tools", tools_path]
                if not gen:
                    argv.append("--no-generation-prompt")
                got = subprocess.run(argv, capture_output=True)
                cases += 1
                if expected_error is not None:
                    raised += 1
                    want = f"tpc-chat: error: {expected_error}\n".encode()
                    if got.returncode != 1 or got.stderr != want:
                        failures += 1
                        print(f"MISMATCH {case}: transformers raised {expected_error!r}; "
                              f"tpc-chat rc {got.returncode}, stderr {got.stderr!r}")
                    continue
                if got.returncode != 0 or got.stdout != expected.encode():
                    failures += 1
                    print(f"MISMATCH {case}: rc {got.returncode}, stderr {got.stderr!r}\n"
                          f"  transformers: {expected!r}\n  tpc-chat:     "
                          f"{got.stdout.decode(errors='replace')!r}")
        status = "ok" if failures == failures_before else "FAILED"
        print(f"chat-template {name}: {cases} cases {status}" + (f" ({raised} raised)" if raised else ""))
    print("chat-template: all match" if failures == 0 else f"chat-template: {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
