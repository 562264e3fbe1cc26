"""Requests for the engine's tests: COUNT of them, prompts of mixed lengths, as JSON lines.

    python batch_requests.py COUNT SEED VOCAB MAX_PROMPT [--shared] [--greedy | --sampled]
                             [--logprobs N] > requests.jsonl

Request i has a prompt of 1 to MAX_PROMPT random ids below VOCAB and 2 to 12 new tokens
(ignore_eos), greedy, except every third, which samples with its own seed; each asks for the
log-probabilities of its tokens and the 3 most likely, so that two runs can be compared by
more than their tokens. The same arguments give the same file.

--shared: prompts that begin alike, as a prefix cache meets them. Each prompt begins with one
of three "system prompts" (17, 33 and 40 ids: a block and one, two blocks and one, two and a
half of 16), then its own 1 to MAX_PROMPT ids; every fourth request, from the fifth on, is
instead an earlier request's prompt with a few ids more, as a conversation's next turn.

--greedy: every request greedy (the GPU check's, whose bf16 runs are compared within a
tolerance, where a seeded draw could land on either side of a boundary).

--sampled: every request samples with its own seed, its filters in turn: temperature 0.8
alone, top_k 40, top_p 0.9, min_p 0.05, and all three (the GPU check's draws stage).

--logprobs N: ask for N top log-probabilities (default 3); -1: ask for none, so that a backend
may pick the tokens itself (a step whose rows are all plain draws returns no logits).
"""
import json
import random
import sys


def main():
    count, seed, vocab, longest = (int(a) for a in sys.argv[1:5])
    shared = "--shared" in sys.argv[5:]
    greedy = "--greedy" in sys.argv[5:]
    sampled = "--sampled" in sys.argv[5:]
    logprobs = 3
    if "--logprobs" in sys.argv[5:]:
        logprobs = int(sys.argv[sys.argv.index("--logprobs") + 1])
    filters = [{}, {"top_k": 40}, {"top_p": 0.9}, {"min_p": 0.05},
               {"top_k": 40, "top_p": 0.9, "min_p": 0.05}]
    rng = random.Random(seed)
    ids = lambda n: [rng.randrange(vocab) for _ in range(n)]
    systems = [ids(17), ids(33), ids(40)] if shared else []
    prompts = []
    for i in range(count):
        prompt = ids(rng.randint(1, longest))
        if shared and i >= 4 and i % 4 == 0:
            prompt = prompts[rng.randrange(i)] + ids(rng.randint(1, 5))
        elif shared:
            prompt = systems[i % 3] + prompt
        prompts.append(prompt)
        request = {
            "id": f"r{i}",
            "prompt_token_ids": prompt,
            "max_tokens": rng.randint(2, 12),
            "ignore_eos": True,
        }
        if logprobs >= 0:
            request["logprobs"] = logprobs
        if sampled:
            request.update(temperature=0.8, seed=i, **filters[i % len(filters)])
        elif i % 3 == 2 and not greedy:
            request.update(temperature=0.8, top_p=0.9, seed=i)
        print(json.dumps(request))


if __name__ == "__main__":
    main()
