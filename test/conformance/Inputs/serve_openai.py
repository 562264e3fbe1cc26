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


def load(ckpt):
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32,
                                                 attn_implementation="eager")
    return tokenizer, model


def reference(tokenizer, model):
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


TOP = 5


def reference_logprobs(tokenizer, model, prompt_ids, texts):
    """transformers' log_softmax at each answer token, the answer given as the tokens' texts
    (decode of one id each, as the server names them): [(chosen's logprob, [(text, logprob)]
    of the TOP most likely)] a token."""
    vocab = {}
    for i in range(len(tokenizer)):
        vocab.setdefault(tokenizer.decode([i]), i)
    answer = [vocab[t] for t in texts]
    ids = torch.tensor([list(prompt_ids) + answer])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    out = []
    for k, token in enumerate(answer):
        row = logprobs[len(prompt_ids) - 1 + k]
        values, top = torch.topk(row, TOP)
        out.append((row[token].item(),
                    [(tokenizer.decode([int(i)]), v.item()) for i, v in zip(top, values)]))
    return out


def agrees(got, want, tolerance=1e-4):
    """Whether the server's [(chosen's logprob, [(text, logprob)])] is transformers' within
    `tolerance`: the chosen tokens' logprobs, and the top ones rank by rank (a text may trade
    places only with one whose logprob is within the tolerance)."""
    if len(got) != len(want):
        return False
    for (chosen, top), (want_chosen, want_top) in zip(got, want):
        if abs(chosen - want_chosen) > tolerance or len(top) != len(want_top):
            return False
        for (text, value), (_, want_value) in zip(top, want_top):
            if abs(value - want_value) > tolerance or not any(
                    t == text and abs(v - value) <= tolerance for t, v in want_top):
                return False
    return True


def logprobs_check(client, tokenizer, model):
    """Chat (logprobs, top_logprobs) and completions (logprobs: N) through the client, streamed
    and not, held to transformers' log_softmax of the same tokens within 1e-4."""
    chat_ids = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True,
                                             tokenize=True, return_dict=True)["input_ids"]
    completion_ids = tokenizer(PROMPT)["input_ids"]

    def chat_entries(content):
        return [(e.logprob, [(t.token, t.logprob) for t in e.top_logprobs]) for e in content]

    def completion_entries(lp):
        # The dict holds the TOP most likely and the chosen one (among them, when greedy).
        return [(chosen, sorted(top.items(), key=lambda kv: -kv[1])[:TOP])
                for chosen, top in zip(lp.token_logprobs, lp.top_logprobs)]

    chat = dict(model="ckpt", messages=QUESTION, max_tokens=CHAT_TOKENS, temperature=0,
                logprobs=True, top_logprobs=TOP)
    got = client.chat.completions.create(**chat).choices[0].logprobs.content
    texts = [e.token for e in got]
    want = reference_logprobs(tokenizer, model, chat_ids, texts)
    print("chat logprobs: %d tokens, transformers' within 1e-4: %s" % (
        len(got), agrees(chat_entries(got), want)))
    streamed = [e for c in client.chat.completions.create(**chat, stream=True)
                for choice in c.choices if choice.logprobs for e in choice.logprobs.content]
    print("chat logprobs streamed: the same tokens: %s, transformers' within 1e-4: %s" % (
        [e.token for e in streamed] == texts, agrees(chat_entries(streamed), want)))
    completion = dict(model="ckpt", prompt=PROMPT, max_tokens=COMPLETION_TOKENS,
                      temperature=0, logprobs=TOP)
    lp = client.completions.create(**completion).choices[0].logprobs
    want = reference_logprobs(tokenizer, model, completion_ids, lp.tokens)
    print("completion logprobs: %d tokens, transformers' within 1e-4: %s" % (
        len(lp.tokens), agrees(completion_entries(lp), want)))
    chunks = [c.choices[0].logprobs for c in client.completions.create(**completion, stream=True)
              if c.choices[0].logprobs]
    joined = type(lp)(tokens=[t for c in chunks for t in c.tokens],
                      token_logprobs=[v for c in chunks for v in c.token_logprobs],
                      top_logprobs=[d for c in chunks for d in c.top_logprobs],
                      text_offset=[o for c in chunks for o in c.text_offset])
    print("completion logprobs streamed: the same tokens: %s, transformers' within 1e-4: %s" % (
        joined.tokens == lp.tokens, agrees(completion_entries(joined), want)))


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
    status, got = post("/tokenize", {"prompt": text, "return_token_strs": True})
    print("tokenize a prompt: %s, transformers' ids: %s, its token strings: %s" % (
        status, got["tokens"] == tokenizer(text)["input_ids"],
        got["token_strs"] == tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])))
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
    tokenizer, model = load(ckpt)
    want = reference(tokenizer, model)
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
        logprobs_check(client, tokenizer, model)
        tokenizer_endpoints(server, ckpt, key)
    finally:
        server.stop()
    print("server exit: %s" % server.proc.returncode)


if __name__ == "__main__":
    main()
