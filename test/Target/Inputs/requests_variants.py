"""Writes a --requests output and variants of it for gpu-requests-compare.test.

    python requests_variants.py DIR

DIR/base.jsonl: two requests of three tokens, each with its log-probabilities and top 3. The
variants, each one change: same (identical), close (a logprob 0.1 off), far (0.3 off),
tie (request b's second token swapped for one the base listed 0.05 below it, the rest
different), leap (the same, for a token 2 nats below), unlisted (a token the base did not
list), lost (request b missing), error (request a failed).
"""
import copy
import json
import os
import sys


def request(name, tokens):
    logprobs = []
    for i, t in enumerate(tokens):
        top = [{"token_id": t, "logprob": -0.5 - i}, {"token_id": t + 1, "logprob": -0.55 - i},
               {"token_id": t + 2, "logprob": -2.5 - i}]
        logprobs.append({"token_id": t, "logprob": -0.5 - i, "top_logprobs": top})
    return {"id": name, "token_ids": tokens, "logprobs": logprobs, "finish_reason": "length"}


def write(path, requests):
    with open(path, "w") as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    base = [request("a", [10, 20, 30]), request("b", [40, 50, 60])]
    write(os.path.join(out, "base.jsonl"), base)
    variants = {}
    variants["same"] = copy.deepcopy(base)
    close = copy.deepcopy(base)
    close[0]["logprobs"][1]["logprob"] += 0.1
    variants["close"] = close
    far = copy.deepcopy(base)
    far[0]["logprobs"][1]["top_logprobs"][2]["logprob"] -= 0.3
    variants["far"] = far
    for name, token in (("tie", 51), ("leap", 52), ("unlisted", 77)):
        v = copy.deepcopy(base)
        v[1]["token_ids"][1:] = [token, 99]
        v[1]["logprobs"][1:] = request("x", [token, 99])["logprobs"]
        variants[name] = v
    variants["lost"] = copy.deepcopy(base[:1])
    error = copy.deepcopy(base)
    error[0]["error"] = "the logits were not finite"
    variants["error"] = error
    for name, requests in variants.items():
        write(os.path.join(out, name + ".jsonl"), requests)


if __name__ == "__main__":
    main()
