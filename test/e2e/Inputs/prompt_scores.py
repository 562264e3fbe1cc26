"""Prompt logprobs (--requests' prompt_logprobs) held to the engine's own decode rows.

    prompt_scores.py make COUNT SEED VOCAB > generate.jsonl
    prompt_scores.py score generate.jsonl generated.jsonl > score.jsonl
    prompt_scores.py check generated.jsonl scored.jsonl

make: COUNT greedy requests, prompts of 1 to 40 random ids, 6 to 12 new tokens each with its
logprobs and the 2 most likely. score: for each, a request whose prompt is that prompt and
the tokens generated, asking prompt_logprobs 2 (max_tokens 0 for even i, 3 for odd i, so that
scoring and generating requests share steps). check: each scored prompt's entries past the
original prompt are the generated tokens, with the logprobs and top ids the decode steps
gave, within 1e-4 (a prefill's rows and a decode's are computed differently: the last bits
differ); the first entry is null and there is one a prompt token. Scoring reads rows the
forward returns for a prompt's own tokens; the generated logprobs came from the rows it
samples from, one a step, so the two share nothing but the model.
"""
import json
import random
import sys


def read(path):
    with open(path) as f:
        return {r["id"]: r for r in map(json.loads, f) if r}


def main():
    mode = sys.argv[1]
    if mode == "make":
        count, seed, vocab = (int(a) for a in sys.argv[2:5])
        rng = random.Random(seed)
        for i in range(count):
            prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 40))]
            print(json.dumps({"id": "g%d" % i, "prompt_token_ids": prompt,
                              "max_tokens": rng.randint(6, 12), "temperature": 0,
                              "logprobs": 2, "ignore_eos": True}))
    elif mode == "score":
        asked, got = read(sys.argv[2]), read(sys.argv[3])
        for i, (key, request) in enumerate(sorted(asked.items())):
            print(json.dumps({"id": key, "prompt_logprobs": 2,
                              "prompt_token_ids": request["prompt_token_ids"] +
                              got[key]["token_ids"],
                              "max_tokens": 3 * (i % 2), "temperature": 0,
                              "ignore_eos": True}))
    else:
        generated, scored = read(sys.argv[2]), read(sys.argv[3])
        worst, bad = 0.0, []
        for key, gen in generated.items():
            s = scored[key]
            entries = s.get("prompt_logprobs")
            if not entries or entries[0] is not None:
                bad.append("%s: prompt_logprobs %r" % (key, entries))
                continue
            start = len(entries) - len(gen["token_ids"])
            for j, (want, token) in enumerate(zip(gen["logprobs"], gen["token_ids"])):
                have = entries[start + j]
                if have["token_id"] != token or [t["token_id"] for t in have["top_logprobs"]] != \
                        [t["token_id"] for t in want["top_logprobs"]]:
                    bad.append("%s: token %d: %r, generated %r" % (key, j, have, want))
                worst = max(worst, abs(have["logprob"] - want["logprob"]))
            if s["finish_reason"] != "length":
                bad.append("%s: finish %s" % (key, s["finish_reason"]))
        if bad or worst > 1e-4:
            print("differ (worst %.3g):\n%s" % (worst, "\n".join(bad[:10])))
            sys.exit(1)
        print("scored as generated: %d prompts, within 1e-4" % len(generated))


if __name__ == "__main__":
    main()
