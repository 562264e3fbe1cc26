"""Checks a run's traces against `tpc analyze --json` for the same compile:
    python3 check_trace.py ANALYZE.json PROMPT_LEN NEW_TOKENS TRACE...

Every rank ran the prefill's collectives and then each decode step's, in order, the same
kinds, modules and bytes analyze lists; loaded exactly the weight bytes analyze says that rank
holds (a replicated run cannot pass as a sharded one); held the weight bytes analyze reports
per rank (in the types the binary holds them, padding included); and allocated the activation
arena analyze reports (run analyze with the binary's --target, --max-seq-len and
--weights-dtype).
"""
import json
import sys

report = json.load(open(sys.argv[1]))
prompt, new_tokens, traces = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]


def key(c):
    return (c["kind"], c["module"], int(c["bytes"]))


expected = [key(c) for c in report["prefill"]["collectives"]]
for _ in range(new_tokens - 1):
    expected += [key(c) for c in report["decode"]["collectives"]]
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
    if not failed:
        print(f"{path}: {len(got)} collectives, {weights:.0f} weight bytes and a "
              f"{arena:.0f}-byte arena as analyze says")
print("traces: " + ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
