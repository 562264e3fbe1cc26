"""tool_choice "auto" read back in a template's own tool format, through the official openai
client: the real SmolLM2 served with another family's chat template (Qwen 2.5's Hermes-style
<tool_call> blocks, Llama 3.1's bare JSON, Mistral v0.3's [TOOL_CALLS] list), its answer
forced by structured_outputs' regex to be the calls a model of that family would write, so
that what is read back is known here; streamed and not; plain text and malformed calls left
content. SmolLM2's vocabulary has none of those families' special tokens, so a marker that
is one there (<|python_tag|>, [TOOL_CALLS]) comes here as text; the parser reads text.

    python tools_auto.py TPC CKPT FORMAT TEMPLATE WORKDIR [-- tpc serve flags...]

FORMAT is hermes, llama3 or mistral: which calls to force and read back.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import openai  # noqa: E402

from prefix_cache import Server  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
ZURICH = '{"city": "Z\u00fcrich \\"Z\\""}'  # escapes and non-ASCII, as the model wrote them
PARIS, OSLO = '{"city": "Paris"}', '{"city": "Oslo"}'
PLAIN = "It is sunny in Paris today."
# Per format: (forced answer, expected content, expected calls as (name, arguments)[, what a
# stream sends where it differs: (content, calls)]). A stream adds up to the whole answer
# wherever the output is well formed; where it is malformed past a call's first delta, what
# was sent stays sent (tool_calls.h).
CASES = {
    "hermes": [
        ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": %s}\n</tool_call>'
         % PARIS, "Let me look.\n", [("get_weather", PARIS)]),
        ('<tool_call>\n{"name": "get_weather", "arguments": %s}\n</tool_call>\n'
         '<tool_call>\n{"name": "get_weather", "arguments": %s}\n</tool_call>' % (OSLO, ZURICH),
         None, [("get_weather", OSLO), ("get_weather", ZURICH)]),
        ('<tool_call>\n{"name": 3, "arguments": {}}\n</tool_call>',
         '<tool_call>\n{"name": 3, "arguments": {}}\n</tool_call>', []),
    ],
    # Llama 3.1's JSON: the whole answer a call (after an optional <|python_tag|>), several
    # joined by ";".
    "llama3": [
        ('{"name": "get_weather", "parameters": %s}' % PARIS, None, [("get_weather", PARIS)]),
        ('<|python_tag|>{"name": "get_weather", "parameters": %s}; '
         '{"name": "get_weather", "parameters": %s}' % (OSLO, ZURICH),
         None, [("get_weather", OSLO), ("get_weather", ZURICH)]),
        (PLAIN, PLAIN, []),
        # Malformed after the name: a stream has sent the name by then (what went out stays
        # out), and ends with "stop", not "tool_calls", so no call stands.
        ('{"name": "get_weather", "parameters": [1]}',
         '{"name": "get_weather", "parameters": [1]}', [], ("", [("get_weather", "")])),
    ],
    # Mistral v0.3's: text, then [TOOL_CALLS] and a JSON list of calls.
    "mistral": [
        ('Let me look.[TOOL_CALLS] [{"name": "get_weather", "arguments": %s}]' % PARIS,
         "Let me look.", [("get_weather", PARIS)]),
        ('[TOOL_CALLS] [{"name": "get_weather", "arguments": %s}, '
         '{"name": "get_weather", "arguments": %s}]' % (OSLO, ZURICH),
         None, [("get_weather", OSLO), ("get_weather", ZURICH)]),
        (PLAIN, PLAIN, []),
        # The list never closed: the stream has sent the call's name and arguments by then.
        ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {}',
         '[TOOL_CALLS] [{"name": "get_weather", "arguments": {}', [],
         ("", [("get_weather", "{}")])),
    ],
}


def main():
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    (tpc, ckpt, form, template, work), flags = argv[:cut], argv[cut + 1:]
    # The checkpoint as it is, but for its chat template: the other family's.
    served = "smollm2-%s-template" % form  # the served model's name: the directory's
    model = os.path.join(work, served)
    os.makedirs(model, exist_ok=True)
    for entry in os.listdir(ckpt):
        if entry != "chat_template.jinja" and not os.path.exists(os.path.join(model, entry)):
            os.symlink(os.path.join(os.path.abspath(ckpt), entry), os.path.join(model, entry))
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
        # (each family writes them its own way, byte for byte as transformers:
        # conformance/chat-template.test)
        function = TOOLS[0]["function"]
        prompt = json.loads(text)["prompt"]
        print("template shows the tools:", status2 == 200 and all(
            json.dumps(v) in prompt for v in (function["name"], function["description"])))
        for forced, content, calls, *differs in CASES[form]:
            stream_content, stream_calls = differs[0] if differs else (content or "", calls)
            request = dict(model=served, messages=messages, tools=TOOLS, max_tokens=200,
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
            ok_stream = (streamed_content == stream_content and streamed_calls == stream_calls and
                         finish == want_finish)
            print("%s: whole %s, streamed %s" % (
                "%d call(s)" % len(calls) if calls else
                "plain" if forced == PLAIN else "malformed",
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
