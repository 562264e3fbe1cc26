"""Whether each request of a --requests run found what a prefix cache of blocks should hold.

    python expected_cached.py REQUESTS.jsonl OUTPUT.jsonl BLOCK

For a run whose requests went one at a time in the file's order (--max-num-seqs 1) in a KV
cache large enough that nothing was evicted. Worked out from the token lists alone: request
j leaves cached every full block of what it computed (its prompt and its output but the last
token, never fed back), each block known by everything before and in it; request i then finds
the longest run of its prompt's full blocks, from the first, that an earlier request left,
short of its last token (always computed). Prints "as expected: N requests, T cached tokens"
or each request that differs.
"""
import json
import sys


def main():
    requests = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    results = {r["id"]: r for r in map(json.loads, open(sys.argv[2]))}
    block = int(sys.argv[3])
    cached, failures, total = set(), [], 0
    for request in requests:
        prompt, result = request["prompt_token_ids"], results[request["id"]]
        found = 0
        while (found + 1) * block <= len(prompt) - 1 and \
                tuple(prompt[:(found + 1) * block]) in cached:
            found += 1
        got = result["usage"]["prompt_tokens_details"]["cached_tokens"]
        if got != found * block:
            failures.append("%s: %d cached tokens, expected %d" % (request["id"], got,
                                                                 found * block))
        total += got
        computed = prompt + result["token_ids"][:-1]
        for k in range(1, len(computed) // block + 1):
            cached.add(tuple(computed[:k * block]))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("as expected: %d requests, %d cached tokens" % (len(requests), total))


if __name__ == "__main__":
    main()
