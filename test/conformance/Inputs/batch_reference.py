"""transformers' greedy tokens for each request of a --requests file, one request at a time.

    python batch_reference.py requests CKPT COUNT SEED > requests.jsonl
    python batch_reference.py reference CKPT requests.jsonl > reference.jsonl

`requests` writes COUNT greedy requests (ignore_eos) of mixed prompt lengths and lengths:
with a tokenizer in CKPT, the token ids of sentences of 1 to 30 words drawn from SEED;
without one, 1 to 30 random ids below the vocabulary. `reference` runs transformers' greedy
generate (fp32, eager attention, eos disabled) on each request alone and writes one line a
request as the engine writes its results: {"id", "token_ids", "finish_reason": "length"} (a
request sent twice, the same prompt and length, is generated once).
"""
import json
import os
import random
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

WORDS = ("the river ran past an old mill where a baker counted loaves while children argued "
         "about clouds , numbers , music and the best way to fold paper boats before the "
         "evening bell rang across seven quiet hills").split()


def requests(ckpt, count, seed):
    rng = random.Random(seed)
    tokenizer = (AutoTokenizer.from_pretrained(ckpt)
                 if os.path.exists(os.path.join(ckpt, "tokenizer.json")) else None)
    vocab = AutoConfig.from_pretrained(ckpt).vocab_size
    for i in range(count):
        words = rng.randint(1, 30)
        if tokenizer:
            text = " ".join(rng.choice(WORDS) for _ in range(words)).capitalize()
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = [rng.randrange(3, vocab) for _ in range(words)]
        print(json.dumps({"id": f"r{i}", "prompt_token_ids": ids,
                          "max_tokens": rng.randint(2, 20), "ignore_eos": True}))


def reference(ckpt, path):
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    answers = {}  # a request sent twice is generated once
    for line in open(path):
        request = json.loads(line)
        key = (tuple(request["prompt_token_ids"]), request["max_tokens"])
        if key not in answers:
            ids = torch.tensor([request["prompt_token_ids"]])
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=request["max_tokens"],
                                     min_new_tokens=request["max_tokens"], eos_token_id=None,
                                     pad_token_id=0)
            answers[key] = out[0, ids.shape[1]:].tolist()
        print(json.dumps({"id": request["id"], "token_ids": answers[key],
                          "finish_reason": "length"}))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "requests":
        requests(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) == 4 and sys.argv[1] == "reference":
        reference(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
