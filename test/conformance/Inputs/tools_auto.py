"""tool_choice "auto" read back in a template's own tool format, through the official openai
client: the real SmolLM2 served with Qwen 2.5's template (Hermes-style <tool_call> blocks),
its answer forced by structured_outputs' regex to be the calls a Qwen model would write, so
that what is read back is known here; streamed and not; and malformed calls left content.

    python tools_auto.py TPC CKPT QWEN_TEMPLATE WORKDIR [-- tpc serve flags...]
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import openai  # noqa: E402

from prefix_cache import Server  # noqa: E402

MODEL = "smollm2-qwen-template"  # the served name: the directory's
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
ONE = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TWO = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
       '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Z\u00fcrich \\"Z\\""}}\n'
       '</tool_call>')
BROKEN = '<tool_call>\n{"name": 3, "arguments": {}}\n</tool_call>'
# (forced answer, expected content, expected calls as (name, arguments))
CASES = [
    (ONE, "Let me look.\n", [("get_weather", '{"city": "Paris"}')]),
    (TWO, None, [("get_weather", '{"city": "Oslo"}'),
                 ("get_weather", '{"city": "Z\u00fcrich \\"Z\\""}')]),
    (BROKEN, BROKEN, []),
]


def main():
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    (tpc, ckpt, template, work), flags = argv[:cut], argv[cut + 1:]
    # The checkpoint as it is, but for its chat template: Qwen 2.5's.
    model = os.path.join(work, "smollm2-qwen-template")
    os.makedirs(model, exist_ok=True)
    for name in os.listdir(ckpt):
        if name != "chat_template.jinja" and not os.path.exists(os.path.join(model, name)):
            os.symlink(os.path.join(os.path.abspath(ckpt), name), os.path.join(model, name))
    with open(template, encoding="utf-8") as f, \
            open(os.path.join(model, "chat_template.jinja"), "w", encoding="utf-8") as out:
        out.write(f.read())
    server = Server(tpc, model, flags)
    failures = 0
    try:
        client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % server.port,
                               api_key="unused", max_retries=0, timeout=600)
        messages = [{"role": "user", "content": "Weather?"}]
        # The tools reached the template: the prompt holds them as Qwen's template writes them.
        status, body = server.request("POST", "/tokenize", {
            "messages": messages, "tools": TOOLS})
        status2, text = server.request("POST", "/detokenize", {
            "tokens": json.loads(body)["tokens"]})
        if status != 200:
            print("tokenize:", status, body)
            return 1
        shown = json.dumps(TOOLS[0], ensure_ascii=False)
        print("template shows the tools:", status == 200 and shown in json.loads(text)["prompt"])
        for forced, content, calls in CASES:
            request = dict(model=MODEL, messages=messages, tools=TOOLS, max_tokens=200,
                           temperature=0, extra_body={"structured_outputs": {
                               "regex": re.escape(forced)}})
            whole = client.chat.completions.create(**request).choices[0]
            got_calls = [(c.function.name, c.function.arguments)
                         for c in whole.message.tool_calls or []]
            ids = [c.id for c in whole.message.tool_calls or []]
            want_finish = "tool_calls" if calls else "stop"
            ok = (whole.message.content == content and got_calls == calls and
                  whole.finish_reason == want_finish and
                  all(re.fullmatch("[a-zA-Z0-9]{9}", i) for i in ids) and
                  len(set(ids)) == len(ids))
            # Streamed: content joined, each call's name and argument pieces joined.
            streamed_content, streamed = "", {}
            finish = None
            for chunk in client.chat.completions.create(stream=True, **request):
                for choice in chunk.choices:
                    streamed_content += choice.delta.content or ""
                    for d in choice.delta.tool_calls or []:
                        name, args = streamed.get(d.index, (None, ""))
                        streamed[d.index] = (d.function.name or name,
                                             args + (d.function.arguments or ""))
                    finish = choice.finish_reason or finish
            streamed_calls = [streamed[i] for i in sorted(streamed)]
            ok_stream = (streamed_content == (content or "") and streamed_calls == calls and
                         finish == want_finish)
            print("%s: whole %s, streamed %s" % (
                "%d call(s)" % len(calls) if calls else "malformed",
                "ok" if ok else "WRONG %r %r %r" % (whole.message.content, got_calls,
                                                    whole.finish_reason),
                "ok" if ok_stream else "WRONG %r %r %r" % (streamed_content, streamed_calls,
                                                           finish)))
            failures += not (ok and ok_stream)
    finally:
        server.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
