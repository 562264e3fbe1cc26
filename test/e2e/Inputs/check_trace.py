"""Checks a run's traces against `tpc analyze --json` for the same compile:
    python3 check_trace.py ANALYZE.json PROMPT_LEN NEW_TOKENS TRACE...
    python3 check_trace.py --steps A.json:N,B.json:M,... [--kv-tokens T] TRACE...

Every rank ran the prefill's collectives and then each decode step's, in order, the same
kinds, modules and bytes analyze lists (with --steps: N times the step of A.json, analyze's
--step-tokens, then M times B.json's, ...: an engine run's steps); loaded exactly the weight
bytes analyze says that rank holds (a replicated run cannot pass as a sharded one); held the
weight bytes analyze reports per rank (in the types the binary holds them, padding
included); allocated the activation arena analyze reports (run analyze with the binary's
--target, --max-model-len and --weights-dtype); and a KV cache no larger than analyze's on
any rank and as large on the largest (analyze's kv_cache_bytes, or with --kv-tokens its
kv_cache_bytes_per_token times T, the binary's --kv-cache-tokens).
"""
import json
import sys

args = sys.argv[1:]
kv_tokens = None
if "--kv-tokens" in args:
    at = args.index("--kv-tokens")
    kv_tokens = int(args[at + 1])
    del args[at:at + 2]


def key(c):
    return (c["kind"], c["module"], int(c["bytes"]))


if args[0] == "--steps":
    expected, report = [], None
    for spec in args[1].split(","):
        path, count = spec.rsplit(":", 1)
        report = json.load(open(path))
        for _ in range(int(count)):
            expected += [key(c) for c in report["step"]["collectives"]]
    traces = args[2:]
else:
    report = json.load(open(args[0]))
    prompt, new_tokens, traces = int(args[1]), int(args[2]), args[3:]
    expected = [key(c) for c in report["prefill"]["collectives"]]
    for _ in range(new_tokens - 1):
        expected += [key(c) for c in report["decode"]["collectives"]]
memory = report["memory_per_rank"]
kv = memory["kv_cache_bytes"] if kv_tokens is None else \
    memory["kv_cache_bytes_per_token"] * kv_tokens
largest_kv = 0
# What each rank loads, padding left out: ranks differ where tp splits something unevenly.
by_rank = report["memory_per_rank"]["weights_bytes_by_rank"]
failed = False
for path in traces:
    trace = json.load(open(path))
    weights = by_rank[trace["rank"]]
    got = [key(c) for c in trace["collectives"]]
    if got != expected:
        failed = True
        print(f"{path}: {len(got)} collectives, analyze expects {len(expected)}")
        for i, (a, b) in enumerate(zip(got, expected)):
            if a != b:
                print(f"  first difference at {i}: ran {a}, expected {b}")
                break
    if trace["weight_bytes_loaded"] != weights:
        failed = True
        print(f"{path}: loaded {trace['weight_bytes_loaded']} weight bytes, a rank holds {weights}")
    held = report["memory_per_rank"]["weights_bytes"]
    if trace["weight_bytes_held"] != held:
        failed = True
        print(f"{path}: holds {trace['weight_bytes_held']} weight bytes, analyze says {held:.0f}")
    arena = report["memory_per_rank"]["activation_arena_bytes"]
    if trace["arena_bytes"] != arena:
        failed = True
        print(f"{path}: allocated a {trace['arena_bytes']}-byte arena, analyze says {arena:.0f}")
    largest_kv = max(largest_kv, trace["kv_cache_bytes"])
    if trace["kv_cache_bytes"] > kv:
        failed = True
        print(f"{path}: allocated a {trace['kv_cache_bytes']}-byte KV cache, analyze says "
              f"{kv:.0f}")
    if not failed:
        print(f"{path}: {len(got)} collectives, {weights:.0f} weight bytes and a "
              f"{arena:.0f}-byte arena as analyze says")
if largest_kv != kv:
    failed = True
    print(f"the largest KV cache is {largest_kv} bytes, analyze says {kv:.0f}")
print("traces: " + ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
