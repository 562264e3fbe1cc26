#!/usr/bin/env python3
"""Whether two --requests outputs agree within the GPU check's bf16 tolerance.

    gpu-requests-compare.py REFERENCE.jsonl RUN.jsonl [TOLERANCE]

The GPU check's comparison of a batched CUDA run with its requests run one at a time, and of
a CUDA run with the CPU target's (scripts/gpu-check.sh, stage batched). Requests are matched
by id. Each request's tokens are walked in order; where both runs chose the same token, its
log-probability and those of the top tokens both runs list must agree within TOLERANCE
(nats, absolute; default 0.25, or TPC_GPU_LOGPROB_TOLERANCE). bf16 logits cannot promise the
same greedy token where two were nearly tied, so a run may choose another token once: only
where the reference listed that token among its top ones, within TOLERANCE of the one it
chose (a near tie), after which the two continuations are not compared. Any other difference
(ids, a token the reference did not nearly tie, a finish reason or error before a
divergence) fails, printing each. Prints "gpu-requests-compare: ok: ..." with the count of
requests, how many diverged at a near tie, and the largest log-probability difference, the
figure the tolerance is set from on the first lent run.
"""
import json
import os
import sys


def load(path):
    return {json.dumps(r["id"]): r for r in map(json.loads, open(path))}


def compare(key, x, y, tolerance, failures):
    """The largest difference over request `key`, and whether it diverged at a near tie."""
    largest = 0.0
    a, b = x.get("token_ids", []), y.get("token_ids", [])
    la, lb = x.get("logprobs", []), y.get("logprobs", [])
    if x.get("error") != y.get("error"):
        failures.append(f"{key}: error {x.get('error')!r} against {y.get('error')!r}")
        return largest, False
    for i in range(min(len(a), len(b))):
        if i >= len(la) or i >= len(lb):
            failures.append(f"{key} token {i}: no logprobs to compare")
            return largest, False
        s, t = la[i], lb[i]
        tops = {p["token_id"]: p["logprob"] for p in s["top_logprobs"]}
        if a[i] != b[i]:
            other = tops.get(b[i])
            if other is None or abs(other - s["logprob"]) > tolerance:
                failures.append(f"{key} token {i}: {b[i]} where the reference chose {a[i]} "
                                f"(logprob {s['logprob']:.4f}), and listed {b[i]} "
                                f"{'not at all' if other is None else f'at {other:.4f}'}")
                return largest, False
            return largest, True  # a near tie: the continuations differ from here
        pairs = [(s["logprob"], t["logprob"])]
        mine = {q["token_id"]: q["logprob"] for q in t["top_logprobs"]}
        pairs += [(tops[k], mine[k]) for k in tops if k in mine]
        for p, q in pairs:
            difference = abs(p - q)
            largest = max(largest, difference)
            if difference > tolerance:
                failures.append(f"{key} token {i}: logprob {p:.4f} against {q:.4f}")
    if len(a) != len(b):
        failures.append(f"{key}: {len(a)} tokens against {len(b)}")
    elif x.get("finish_reason") != y.get("finish_reason"):
        failures.append(f"{key}: finish_reason {x.get('finish_reason')} against "
                        f"{y.get('finish_reason')}")
    return largest, False


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: " + __doc__.strip().splitlines()[2].strip())
    a, b = load(sys.argv[1]), load(sys.argv[2])
    tolerance = float(sys.argv[3] if len(sys.argv) > 3 else
                      os.environ.get("TPC_GPU_LOGPROB_TOLERANCE", "0.25"))
    failures, largest, ties = [], 0.0, 0
    if sorted(a) != sorted(b):
        failures.append(f"ids differ: {sorted(a)} against {sorted(b)}")
    for key in sorted(set(a) & set(b)):
        difference, tied = compare(key, a[key], b[key], tolerance, failures)
        largest = max(largest, difference)
        ties += tied
    if failures:
        print("\n".join(failures))
        print(f"gpu-requests-compare: FAILED ({len(failures)} differences; tolerance "
              f"{tolerance} nats)")
        sys.exit(1)
    print(f"gpu-requests-compare: ok: {len(a)} requests, {ties} diverged at a near tie; "
          f"largest logprob difference {largest:.2e} (tolerance {tolerance})")


if __name__ == "__main__":
    main()
