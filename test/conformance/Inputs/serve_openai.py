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


# (context, continuation) pairs, scored as lm-eval's loglikelihood tasks score them.
PAIRS = [
    ("The capital of France is", " Paris"), ("The capital of France is", " Berlin"),
    ("Water boils at a temperature of", " 100 degrees Celsius"),
    ("Water boils at a temperature of", " 12 degrees"),
    ("The cat sat on the", " mat"), ("The cat sat on the", " moon"),
    ("Two plus two equals", " four"), ("Two plus two equals", " seven"),
    ("The sun rises in the", " east"), ("The sun rises in the", " west"),
    ("She opened the door and", " walked in"), ("She opened the door and", " ate the piano"),
    ("Bees make", " honey"), ("Bees make", " bicycles"),
    ("In winter it is usually", " cold"), ("In winter it is usually", " purple"),
    ("def add(a, b):\n    return", " a + b"), ("def add(a, b):\n    return", " a * b"),
    ("Paris is the capital of", " France, a country in Europe"),
    ("Paris is the capital of", " Japan"),
]


def scoring_check(client, server, key, tokenizer, model):
    """echo with prompt logprobs, in lm-eval's shape (the prompt as token ids, echo, logprobs 1,
    max_tokens 1): each continuation's summed logprobs against transformers' log_softmax of
    the same ids within 1e-3; a pure scoring request (max_tokens 0) gives the same; vLLM's
    prompt_logprobs gives the same values and transformers' ranks; and a scored prompt takes
    no prefix-cache hit where a plain request for it does."""
    def transformers_scores(ids):
        with torch.no_grad():
            rows = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)
        return [rows[p - 1, ids[p]].item() for p in range(1, len(ids))], rows

    worst, echoed, zero_same = 0.0, True, True
    for context, continuation in PAIRS:
        ctx = tokenizer(context)["input_ids"]
        ids = ctx + tokenizer(continuation)["input_ids"]
        want, _ = transformers_scores(ids)
        done = client.completions.create(model="ckpt", prompt=[ids], echo=True, logprobs=1,
                                         max_tokens=1, temperature=0)
        lp = done.choices[0].logprobs
        echoed &= (lp.token_logprobs[0] is None and len(lp.token_logprobs) == len(ids) + 1 and
                   done.choices[0].text.startswith(tokenizer.decode(ids)))
        got = sum(lp.token_logprobs[len(ctx):len(ids)])
        worst = max(worst, abs(got - sum(want[len(ctx) - 1:])))
        pure = client.completions.create(model="ckpt", prompt=[ids], echo=True, logprobs=0,
                                         max_tokens=0)
        plp = pure.choices[0].logprobs
        zero_same &= (pure.choices[0].finish_reason == "length" and
                      len(plp.token_logprobs) == len(ids) and
                      max(abs(a - b) for a, b in zip(plp.token_logprobs[1:],
                                                     lp.token_logprobs[1:len(ids)])) < 1e-6)
    print("scoring %d pairs with echo: sums within 1e-3 of transformers': %s, shapes: %s, "
          "max_tokens 0 the same: %s" % (len(PAIRS), worst <= 1e-3, echoed, zero_same))
    # Streamed, echo's prompt comes first, in one chunk, with its logprobs.
    ask = dict(model="ckpt", prompt=PAIRS[0][0], echo=True, logprobs=2, max_tokens=4,
               temperature=0)
    whole = client.completions.create(**ask).choices[0]
    chunks = [c.choices[0] for c in client.completions.create(**ask, stream=True)]
    tokens = [t for c in chunks if c.logprobs for t in c.logprobs.tokens]
    values = [v for c in chunks if c.logprobs for v in c.logprobs.token_logprobs]
    offsets = [o for c in chunks if c.logprobs for o in c.logprobs.text_offset]
    print("echo streamed: first chunk the prompt: %s, the same text: %s, tokens: %s, "
          "offsets: %s, logprobs: %s" % (
              chunks[0].text == PAIRS[0][0], "".join(c.text for c in chunks) == whole.text,
              tokens == whole.logprobs.tokens, offsets == whole.logprobs.text_offset,
              values[0] is None and all(abs(a - b) < 1e-6 for a, b in
                                        zip(values[1:], whole.logprobs.token_logprobs[1:]))))
    import json
    ids = tokenizer("Bees make honey, and ants build nests underground.")["input_ids"]
    want, rows = transformers_scores(ids)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    status, text, _ = server.request("POST", "/v1/completions",
                                     {"prompt": ids, "max_tokens": 0, "prompt_logprobs": 3},
                                     headers)
    got = json.loads(text)["choices"][0]["prompt_logprobs"]
    values = all(abs(got[p][str(ids[p])]["logprob"] - want[p - 1]) <= 1e-4
                 for p in range(1, len(ids)))
    ranks = all(got[p][str(ids[p])]["rank"] ==
                1 + int((rows[p - 1] > rows[p - 1, ids[p]] + 1e-6).sum())
                for p in range(1, len(ids)))
    print("prompt_logprobs: %s, first null: %s, values within 1e-4: %s, ranks: %s" % (
        status, got[0] is None, values, ranks))
    prompt = "A shared preamble that is long enough to fill several blocks of the KV cache, " * 3
    plain = client.completions.create(model="ckpt", prompt=prompt, max_tokens=1)
    again = client.completions.create(model="ckpt", prompt=prompt, max_tokens=1)
    scored = client.completions.create(model="ckpt", prompt=prompt, max_tokens=1, echo=True,
                                       logprobs=1)
    print("cached tokens: plain again %s, scored %s" % (
        again.usage.prompt_tokens_details.cached_tokens > 0,
        scored.usage.prompt_tokens_details.cached_tokens))


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
        scoring_check(client, server, key, tokenizer, model)
        tokenizer_endpoints(server, ckpt, key)
    finally:
        server.stop()
    print("server exit: %s" % server.proc.returncode)


if __name__ == "__main__":
    main()
