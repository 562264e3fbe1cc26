"""Facts of a `tpc analyze --pp P --json` report: python3 check_pipeline.py REPORT

Prints each stage's ranks, layers and decode step's kinds, then its memory and what it sends,
then whether its parts add up: each stage's list, receives aside, is the whole mesh's list of
that stage in the same order; every send is received, in order, by the stage it goes to; the
pipeline's busy shares and bubble follow from the stages' predicted times.
"""
import json
import sys

report = json.load(open(sys.argv[1]))
stages = report["stages"]
phases = [p for p in ("prefill", "decode", "step") if p in report]


def entry(c, stage):
    return (c["kind"], c["module"], c["bytes"], stage)


for s in stages:
    kinds = " ".join(c["kind"] for c in s["decode"]["collectives"])
    print(f"stage {s['stage']}: ranks {s['ranks']}, layers {s['layers']}, decode: {kinds}")
for s in stages:
    memory = s["memory_per_rank"]
    by_rank = [int(w) for w in memory["weights_bytes_by_rank"]]
    print(f"stage {s['stage']}: weights by rank {by_rank}, kv {memory['kv_cache_bytes']:.0f}, "
          f"arena {memory['activation_arena_bytes']:.0f}, "
          f"sent {s['sent_bytes']['prefill']:.0f}/{s['sent_bytes']['decode']:.0f}")

whole = all(
    [entry(c, c["stage"]) for c in report[p]["collectives"] if c["stage"] == s["stage"]] ==
    [entry(c, s["stage"]) for c in s[p]["collectives"] if c["kind"] != "recv"]
    for p in phases for s in stages)
print(f"the stages' lists are the whole mesh's: {whole}")

paired = True
for p in phases:
    for s in stages:
        for to in {c["to"] for c in s[p]["collectives"] if c["kind"] == "send"}:
            mine = [(c["module"], c["bytes"]) for c in s[p]["collectives"]
                    if c["kind"] == "send" and c["to"] == to]
            theirs = [(c["module"], c["bytes"]) for c in stages[to][p]["collectives"]
                      if c["kind"] == "recv" and c["from"] == s["stage"]]
            paired = paired and mine == theirs
    received = sum(c["kind"] == "recv" for s in stages for c in s[p]["collectives"])
    sent = sum(c["kind"] == "send" for s in stages for c in s[p]["collectives"])
    paired = paired and received == sent
print(f"every send has its receive: {paired}")

pipeline = report["pipeline"]
work = [s["predicted_decode_us"]["total"] for s in stages]
latency = sum(work) + sum(s["predicted_decode_us"]["sends"] for s in stages)
# The CPU runtime keeps a step in every stage where the sequences allow: steps of
# ceil(C / P) sequences, each sequence in one step at a time.
per_step = -(-pipeline["concurrency"] // len(stages))
in_flight = -(-pipeline["concurrency"] // per_step)
cycle = max(max(work), latency / in_flight)


def near(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


formula = (pipeline["steps_in_flight"] == in_flight and
           near(pipeline["step_us"], latency) and near(pipeline["cycle_us"], cycle) and
           all(near(b, t / cycle) for b, t in zip(pipeline["busy"], work)) and
           near(pipeline["bubble"], 1 - sum(work) / (len(stages) * cycle)))
print(f"busy and bubble as the formula: {formula}")
