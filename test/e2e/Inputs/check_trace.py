"""Checks a run's traces against `tpc analyze --json` for the same compile:
    python3 check_trace.py ANALYZE.json PROMPT_LEN NEW_TOKENS TRACE...
    python3 check_trace.py --steps A.json:N[:PHASE],B.json:M[:PHASE],... [--kv-tokens T] TRACE...

Every rank ran the prefill's collectives and then each decode step's, in order, the same
kinds, modules and bytes analyze lists (with --steps: N times the step of A.json, analyze's
--step-tokens, then M times B.json's, ...: an engine run's steps; PHASE names another of the
report's phases than "step", such as "cached_prefill", analyze --cached-prefix's); loaded
exactly the weight
bytes analyze says that rank holds (a replicated run cannot pass as a sharded one); held the
weight bytes analyze reports per rank (in the types the binary holds them, padding
included); allocated the activation arena analyze reports (run analyze with the binary's
--target, --max-model-len and --weights-dtype); and a KV cache no larger than analyze's on
any rank and as large on the largest (analyze's kv_cache_bytes, or with --kv-tokens its
kv_cache_bytes_per_token times T, the binary's --kv-cache-tokens).

With pipeline stages (analyze --pp, whose report has "stages"), each rank is held to its
stage's part: the collectives of its tp group and the sends and receives between stages in
that order, its stage's weights by its tp rank, and its stage's KV cache, the largest of
each stage's ranks as large as analyze's.
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


def part(report, stage):
    """What one rank's trace is held to: the whole report, or its stage's part of it."""
    return report if stage is None else report["stages"][stage]


if args[0] == "--steps":
    steps = []
    for spec in args[1].split(","):
        path, count, *phase = spec.split(":")
        steps.append((json.load(open(path)), int(count), phase[0] if phase else "step"))
    report = steps[-1][0]

    def expected_of(stage):
        expected = []
        for step_report, count, phase in steps:
            expected += [key(c) for c in part(step_report, stage)[phase]["collectives"]] * count
        return expected
    traces = args[2:]
else:
    report = json.load(open(args[0]))
    prompt, new_tokens, traces = int(args[1]), int(args[2]), args[3:]

    def expected_of(stage):
        phases = part(report, stage)
        expected = [key(c) for c in phases["prefill"]["collectives"]]
        for _ in range(new_tokens - 1):
            expected += [key(c) for c in phases["decode"]["collectives"]]
        return expected
staged = "stages" in report
largest_kv = {}
failed = False
for path in traces:
    trace = json.load(open(path))
    stage = trace.get("stage", 0) if staged else None
    memory = part(report, stage)["memory_per_rank"]
    kv = memory["kv_cache_bytes"] if kv_tokens is None else \
        memory["kv_cache_bytes_per_token"] * kv_tokens
    # What each rank loads, padding left out: ranks differ where tp splits something unevenly.
    by_rank = memory["weights_bytes_by_rank"]
    rank = trace["tp_rank"] if staged else trace["rank"]
    if rank >= len(by_rank):
        failed = True
        print(f"{path}: rank {rank}, analyze reports {len(by_rank)} (another mesh?)")
        continue
    weights = by_rank[rank]
    expected = expected_of(stage)
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
    held = memory["weights_bytes"]
    if trace["weight_bytes_held"] != held:
        failed = True
        print(f"{path}: holds {trace['weight_bytes_held']} weight bytes, analyze says {held:.0f}")
    arena = memory["activation_arena_bytes"]
    if trace["arena_bytes"] != arena:
        failed = True
        print(f"{path}: allocated a {trace['arena_bytes']}-byte arena, analyze says {arena:.0f}")
    largest_kv[stage] = (max(largest_kv.get(stage, (0, kv))[0], trace["kv_cache_bytes"]), kv)
    if trace["kv_cache_bytes"] > kv:
        failed = True
        print(f"{path}: allocated a {trace['kv_cache_bytes']}-byte KV cache, analyze says "
              f"{kv:.0f}")
    if not failed:
        print(f"{path}: {len(got)} collectives, {weights:.0f} weight bytes and a "
              f"{arena:.0f}-byte arena as analyze says")
for stage, (largest, kv) in largest_kv.items():
    if largest != kv:
        failed = True
        print(f"the largest KV cache{'' if stage is None else f' of stage {stage}'} is "
              f"{largest} bytes, analyze says {kv:.0f}")
print("traces: " + ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
