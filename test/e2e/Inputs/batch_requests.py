"""Requests for the engine's tests: COUNT of them, prompts of mixed lengths, as JSON lines.

    python batch_requests.py COUNT SEED VOCAB MAX_PROMPT > requests.jsonl

Request i has a prompt of 1 to MAX_PROMPT random ids below VOCAB and 2 to 12 new tokens
(ignore_eos), greedy, except every third, which samples with its own seed; each asks for the
log-probabilities of its tokens and the 3 most likely, so that two runs can be compared by
more than their tokens. The same arguments give the same file.
"""
import json
import random
import sys


def main():
    count, seed, vocab, longest = (int(a) for a in sys.argv[1:5])
    rng = random.Random(seed)
    for i in range(count):
        request = {
            "id": f"r{i}",
            "prompt_token_ids": [rng.randrange(vocab) for _ in range(rng.randint(1, longest))],
            "max_tokens": rng.randint(2, 12),
            "ignore_eos": True,
            "logprobs": 3,
        }
        if i % 3 == 2:
            request.update(temperature=0.8, top_p=0.9, seed=i)
        print(json.dumps(request))


if __name__ == "__main__":
    main()
