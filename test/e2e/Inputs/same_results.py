"""Whether two --requests outputs give every request the same result.

    python same_results.py A.jsonl B.jsonl [TOLERANCE]

Requests are matched by id (the files' orders may differ: each writes a request as it
finishes). Each must have the same token ids and finish reason in both, and each token's
log-probability and its top log-probabilities (ids equal, values within TOLERANCE, default
1e-5) the same. Prints "same: N requests" and the largest log-probability difference, or
every difference.
"""
import json
import sys


def load(path):
    return {json.dumps(r["id"]): r for r in map(json.loads, open(path))}


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
    failures, largest = [], 0.0
    if sorted(a) != sorted(b):
        failures.append(f"ids differ: {sorted(a)} against {sorted(b)}")
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        for field in ("token_ids", "finish_reason", "error"):
            if x.get(field) != y.get(field):
                failures.append(f"{key}: {field} {x.get(field)} against {y.get(field)}")
        for i, (s, t) in enumerate(zip(x.get("logprobs", []), y.get("logprobs", []))):
            pairs = [(s, t)] + list(zip(s["top_logprobs"], t["top_logprobs"]))
            for p, q in pairs:
                if p["token_id"] != q["token_id"]:
                    failures.append(f"{key} token {i}: top ids differ")
                    continue
                difference = abs(p["logprob"] - q["logprob"])
                largest = max(largest, difference)
                if difference > tolerance:
                    failures.append(f"{key} token {i}: logprob {p['logprob']} against "
                                    f"{q['logprob']}")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"same: {len(a)} requests; largest logprob difference {largest:.2e}")


if __name__ == "__main__":
    main()
