"""tpc serve through the official openai client, against transformers' greedy answers.

    serve_openai.py CKPT [tpc serve flags...]

Computes transformers' greedy answers (fp32) to a chat question (through the checkpoint's chat
template, as apply_chat_template renders it) and to a completion prompt, then starts
`tpc serve CKPT` (test/e2e/Inputs/serve_check.py's Server) and asks it the same through
openai.OpenAI: chat and completions, streamed and not. Prints each answer and whether it is
transformers' byte for byte; then /tokenize and /detokenize against transformers' tokenizer. Where the flags give --api-key KEY, the client sends KEY, and a
client with another key must get the client's AuthenticationError (401, invalid_api_key);
/health answers without a key and /metrics only with it.
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "e2e", "Inputs"))

import openai
import torch
from serve_check import Server
from transformers import AutoModelForCausalLM, AutoTokenizer

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT = "The capital of France is"
CHAT_TOKENS, COMPLETION_TOKENS = 24, 12


def reference(ckpt):
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32,
                                                 attn_implementation="eager")
    answers = {}
    for name, ids, limit in [
            ("chat", tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True,
                                                   return_tensors="pt", return_dict=True)
             ["input_ids"], CHAT_TOKENS),
            ("completion", tokenizer(PROMPT, return_tensors="pt")["input_ids"],
             COMPLETION_TOKENS)]:
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=limit, do_sample=False)
        answers[name] = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    return answers


def tokenizer_endpoints(server, ckpt, key):
    """POST /tokenize and /detokenize against the checkpoint's own tokenizer in transformers:
    a prompt as tokenizer(text) encodes it, messages as apply_chat_template (with and without
    the generation prompt), and the ids back to the text as tokenizer.decode."""
    import json
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key

    def post(path, body):
        status, text, _ = server.request("POST", path, body, headers)
        return status, json.loads(text)

    text = "Tokenizers split words like 'unbelievable' and emoji 🙂 into pieces."
    status, got = post("/tokenize", {"prompt": text})
    print("tokenize a prompt: %s, transformers' ids: %s" % (
        status, got["tokens"] == tokenizer(text)["input_ids"]))
    for generation in (True, False):
        want = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=generation,
                                             tokenize=True, return_dict=True)["input_ids"]
        status, got = post("/tokenize", {"messages": QUESTION,
                                         "add_generation_prompt": generation})
        print("tokenize messages (generation prompt %s): %s, transformers' ids: %s" % (
            generation, status, got["tokens"] == list(want)))
    ids = tokenizer(text)["input_ids"]
    status, got = post("/detokenize", {"tokens": ids})
    print("detokenize: %s, transformers' text: %s" % (status,
                                                      got["prompt"] == tokenizer.decode(ids)))


def main():
    ckpt, flags = sys.argv[1], sys.argv[2:]
    want = reference(ckpt)
    print("transformers chat: %r" % want["chat"])
    print("transformers completion: %r" % want["completion"])
    key = flags[flags.index("--api-key") + 1] if "--api-key" in flags else None
    server = Server(ckpt, flags)
    try:
        base = "http://127.0.0.1:%d/v1" % server.port
        client = openai.OpenAI(base_url=base, api_key=key or "unused", max_retries=0,
                               timeout=120)
        if key:
            stranger = openai.OpenAI(base_url=base, api_key="not-" + key, max_retries=0,
                                     timeout=30)
            try:
                stranger.models.list()
                print("another key: answered")
            except openai.AuthenticationError as e:
                print("another key: %s %s" % (e.status_code, e.body["code"]))
            print("health without a key: %s" % server.get("/health")[0])
            print("metrics without a key: %s, with it: %s" % (
                server.get("/metrics")[0],
                server.request("GET", "/metrics", headers={"Authorization": "Bearer " + key})[0]))
        print("models: %s" % [m.id for m in client.models.list().data])
        chat = client.chat.completions.create(model="ckpt", messages=QUESTION,
                                              max_tokens=CHAT_TOKENS, temperature=0)
        text = chat.choices[0].message.content
        print("chat: %r finish=%s usage=%s same=%s" % (
            text, chat.choices[0].finish_reason, chat.usage.total_tokens, text == want["chat"]))
        pieces, usage, finish = [], None, None
        for chunk in client.chat.completions.create(
                model="ckpt", messages=QUESTION, max_tokens=CHAT_TOKENS, temperature=0,
                stream=True, stream_options={"include_usage": True}):
            if chunk.usage:
                usage = chunk.usage.completion_tokens
            for c in chunk.choices:
                pieces.append(c.delta.content or "")
                finish = c.finish_reason or finish
        text = "".join(pieces)
        print("chat streamed: %r finish=%s usage=%s same=%s" % (text, finish, usage,
                                                                 text == want["chat"]))
        done = client.completions.create(model="ckpt", prompt=PROMPT,
                                         max_tokens=COMPLETION_TOKENS, temperature=0)
        text = done.choices[0].text
        print("completion: %r finish=%s same=%s" % (text, done.choices[0].finish_reason,
                                                    text == want["completion"]))
        text = "".join(c.choices[0].text for c in client.completions.create(
            model="ckpt", prompt=PROMPT, max_tokens=COMPLETION_TOKENS, temperature=0,
            stream=True))
        print("completion streamed: %r same=%s" % (text, text == want["completion"]))
        try:
            client.completions.create(model="ckpt", prompt=PROMPT, max_tokens=4, top_p=7)
        except openai.BadRequestError as e:
            print("bad request: %s %s" % (e.status_code, e.body["message"]))
        tokenizer_endpoints(server, ckpt, key)
    finally:
        server.stop()
    print("server exit: %s" % server.proc.returncode)


if __name__ == "__main__":
    main()
