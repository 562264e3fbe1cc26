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
        for conv_name, messages in CONVERSATIONS.items():
            messages_path = os.path.join(work, conv_name + ".json")
            with open(messages_path, "w", encoding="utf-8") as f:
                json.dump(messages, f, ensure_ascii=False)
            for gen in (True, False):
                case = f"{name} {conv_name} add_generation_prompt={gen}"
                try:
                    rendered, _ = render_jinja_template(
                        conversations=[messages], chat_template=template,
                        add_generation_prompt=gen, bos_token=BOS, eos_token=EOS)
                    expected, expected_error = rendered[0], None
                except jinja2.exceptions.TemplateError as e:
                    expected, expected_error = None, str(e)
                argv = [tpc_chat, path, messages_path, "--bos", BOS, "--eos", EOS]
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
