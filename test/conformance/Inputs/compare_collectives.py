"""Compares tpc's collectives with what transformers' own tensor parallelism issues:
    python compare_collectives.py [--fewer] HF.json ANALYZE.json TRACE.rank0

HF.json       hf_collectives.py's measurement of transformers (prefill, and one decode step)
ANALYZE.json  `tpc analyze ... --json` for the same model, plan, tp and prefill length
TRACE.rank0   a tpc binary's --trace (the prefill's collectives, then each decode step's)

The trace is split with analyze's counts: its first len(analyze.prefill.collectives) entries
are the prefill, the rest decode steps of len(analyze.decode.collectives) each (a run with
--max-new-tokens N has N-1 of them).

Checks
  (1) tpc runs no more collectives and no more bytes than transformers: the trace's prefill
      against transformers' prefill, and every decode step against transformers' decode step.
  (2) analyze's `transformers` prediction equals the measurement: the same number of
      collectives of each kind and the same bytes of each kind. Where they differ, the
      collectives only one side has are listed by (kind, module, bytes).
Bytes everywhere are the full (global) tensor's, as analyze, the trace and hf_collectives.py
count them. Where transformers' TP fails (HF.json "runs": false), analyze must predict that
failure with the same error message, and the trace must be analyze's own prefill and decode
steps; that is `collectives: ok (transformers cannot run this plan)`. Prints a table, then `collectives: ok` or `collectives: FAILED` (exit 1).
"""
import json
import sys
from collections import Counter

KINDS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]


def summary(collectives):
    by_kind = Counter(c["kind"] for c in collectives)
    bytes_by_kind = Counter()
    for c in collectives:
        bytes_by_kind[c["kind"]] += float(c["bytes"])
    return {
        "count": len(collectives),
        "by_kind": dict(by_kind),
        "bytes_by_kind": dict(bytes_by_kind),
        "bytes": sum(float(c["bytes"]) for c in collectives),
    }


def fmt_bytes(b):
    return f"{b:.0f}" if float(b).is_integer() else f"{b:.1f}"


def main():
    args = sys.argv[1:]
    # --fewer: tpc must run strictly fewer collectives, and move strictly fewer bytes, than
    # transformers (a plan tpc folds).
    fewer = "--fewer" in args
    args = [a for a in args if a != "--fewer"]
    if len(args) != 3:
        print(__doc__.strip().splitlines()[1], file=sys.stderr)
        return 2
    hf_path, analyze_path, trace_path = args
    hf = json.load(open(hf_path))
    report = json.load(open(analyze_path))
    trace = json.load(open(trace_path))
    problems, notes = [], []

    if not hf.get("runs", True):
        # Where transformers' TP fails, analyze must say so, naming the same error; tpc's
        # trace must still be what analyze predicts of tpc.
        print(f"{hf_path}: transformers' TP did not run for {hf.get('model_type')} ({hf.get('stage')}): {hf.get('error')}")
        fails = {p: report[p]["transformers"].get("fails") for p in ("prefill", "decode")}
        error = (hf.get("error") or "").split(": ", 1)[-1]
        if not all(fails.values()) or any(error not in f for f in fails.values()):
            print(f"analyze predicts {fails['prefill']!r}, not this failure")
            print("collectives: FAILED")
            return 1
        print(f"analyze predicts it: {fails['prefill']}")
        ran = [(c["kind"], c["module"], float(c["bytes"])) for c in trace["collectives"]]
        prefill = [(c["kind"], c["module"], float(c["bytes"])) for c in report["prefill"]["collectives"]]
        decode = [(c["kind"], c["module"], float(c["bytes"])) for c in report["decode"]["collectives"]]
        steps = (len(ran) - len(prefill)) // max(len(decode), 1)
        if ran != prefill + decode * steps or steps < 1:
            print("tpc's trace is not analyze's prefill and decode steps")
            print("collectives: FAILED")
            return 1
        print(f"tpc's trace: analyze's prefill ({len(prefill)} collectives) and {steps} decode steps ({len(decode)} each)")
        print("collectives: ok (transformers cannot run this plan)")
        return 0

    # ---- analyze must not predict a failure of what just ran
    predicted_fails = {p: report[p]["transformers"].get("fails") for p in ("prefill", "decode")}
    if any(predicted_fails.values()):
        print(f"analyze predicts transformers' TP fails ({predicted_fails['prefill'] or predicted_fails['decode']}), "
              f"yet {hf_path} measured it running")
        print("collectives: FAILED")
        return 1

    # ---- the three must describe the same run
    tp = report.get("tp")
    if hf.get("tp") != tp:
        problems.append(f"transformers was measured at tp {hf.get('tp')}, analyze is for tp {tp}")
    if "world" in trace and trace["world"] != tp:
        problems.append(f"the trace is from {trace['world']} ranks, analyze is for tp {tp}")
    if hf.get("prompt_len") is not None and report["prefill"].get("tokens") != hf["prompt_len"]:
        problems.append(
            f"transformers' prefill had {hf['prompt_len']} tokens, analyze's {report['prefill'].get('tokens')} "
            "(run analyze with --prefill-len P)"
        )
    if hf.get("expert_parallel"):
        notes.append("transformers was measured with enable_expert_parallel (its _ep_plan alone)")

    # ---- split the trace: prefill, then decode steps, by analyze's counts
    ran = trace["collectives"]
    n_prefill = len(report["prefill"]["collectives"])
    n_decode = len(report["decode"]["collectives"])
    phases = [("prefill", ran[:n_prefill])]
    rest = ran[n_prefill:]
    if n_decode == 0:
        if rest:
            problems.append(f"the trace has {len(rest)} collectives after the prefill, analyze expects none per decode step")
    else:
        if len(rest) % n_decode:
            problems.append(
                f"the trace's {len(ran)} collectives are not the prefill's {n_prefill} plus whole decode steps of {n_decode}"
            )
        for i in range(0, len(rest) - len(rest) % n_decode, n_decode):
            phases.append((f"decode {i // n_decode + 1}", rest[i : i + n_decode]))
    if len(ran) < n_prefill:
        problems.append(f"the trace has {len(ran)} collectives, fewer than analyze's prefill ({n_prefill})")
    steps = len(phases) - 1
    if hf.get("new_tokens") and steps != hf["new_tokens"] - 1 and n_decode:
        notes.append(f"the trace has {steps} decode steps; transformers was run for {hf['new_tokens']} new tokens")

    def key(c):
        return (c["kind"], c["module"], float(c["bytes"]))

    for name, got in phases:
        analyzed = report["prefill" if name == "prefill" else "decode"]["collectives"]
        if [key(c) for c in got] != [key(c) for c in analyzed]:
            notes.append(f"tpc's {name} trace differs from analyze's own list (see check_trace.py)")

    # ---- table
    columns = [k for k in KINDS if any(k in s for s in [
        summary(hf["prefill"]["collectives"])["by_kind"], summary(hf["decode"]["collectives"])["by_kind"],
        report["prefill"]["transformers"]["total"]["by_kind"], report["decode"]["transformers"]["total"]["by_kind"],
    ] + [summary(g)["by_kind"] for _, g in phases])]
    extra_kinds = sorted(
        (
            {c["kind"] for _, g in phases for c in g}
            | {c["kind"] for p in ("prefill", "decode") for c in hf[p]["collectives"]}
            | {c["kind"] for p in ("prefill", "decode") for c in report[p]["transformers"]["collectives"]}
        )
        - set(columns)
    )
    columns += extra_kinds
    header = f"{'phase':10s} {'source':24s} {'count':>5s} " + " ".join(f"{k:>14s}" for k in columns) + f" {'bytes':>12s}"
    print(f"{hf.get('model_type', '?')} at tp {tp}, prompt {report['prefill'].get('tokens')} tokens, {steps} decode steps in the trace")
    print(header)
    print("-" * len(header))

    def row(phase, source, s):
        cells = " ".join(f"{s['by_kind'].get(k, 0):>14d}" for k in columns)
        print(f"{phase:10s} {source:24s} {s['count']:>5d} {cells} {fmt_bytes(s['bytes']):>12s}")

    measured = {p: summary(hf[p]["collectives"]) for p in ("prefill", "decode")}
    predicted = {p: summary(report[p]["transformers"]["collectives"]) for p in ("prefill", "decode")}
    for p in ("prefill", "decode"):
        row(p, "transformers (measured)", measured[p])
        row(p, "analyze's prediction", predicted[p])
        row(p, "tpc analyze", summary(report[p]["collectives"]))
        if p == "prefill":
            row(p, "tpc trace", summary(phases[0][1]))
        else:
            traced = [(n, summary(g)) for n, g in phases[1:]]
            distinct = {json.dumps(s, sort_keys=True) for _, s in traced}
            if len(distinct) == 1:
                row(p, f"tpc trace (x{len(traced)})", traced[0][1])
            else:
                for n, s in traced:
                    row(p, f"tpc trace step {n.split()[1]}", s)

    # ---- (1) tpc's trace: no more collectives, no more bytes than transformers
    for name, got in phases:
        want = measured["prefill" if name == "prefill" else "decode"]
        s = summary(got)
        if s["count"] > want["count"]:
            problems.append(f"(1) {name}: tpc ran {s['count']} collectives, transformers {want['count']}")
        if fewer and s["count"] >= want["count"]:
            problems.append(f"(1) {name}: tpc ran {s['count']} collectives, not fewer than transformers' {want['count']}")
        if fewer and s["bytes"] >= want["bytes"]:
            problems.append(f"(1) {name}: tpc moved {fmt_bytes(s['bytes'])} bytes, not fewer than transformers' {fmt_bytes(want['bytes'])}")
        if s["bytes"] > want["bytes"]:
            problems.append(f"(1) {name}: tpc moved {fmt_bytes(s['bytes'])} bytes, transformers {fmt_bytes(want['bytes'])}")

    # ---- (2) analyze's prediction of transformers against the measurement
    for p in ("prefill", "decode"):
        m, a = measured[p], predicted[p]
        total = report[p]["transformers"].get("total")
        if total and (total["count"] != a["count"] or float(total["bytes"]) != a["bytes"]):
            notes.append(f"analyze's {p} transformers.total disagrees with its own list of collectives")
        differs = False
        for k in sorted(set(m["by_kind"]) | set(a["by_kind"])):
            mc, ac = m["by_kind"].get(k, 0), a["by_kind"].get(k, 0)
            mb, ab = m["bytes_by_kind"].get(k, 0.0), a["bytes_by_kind"].get(k, 0.0)
            if mc != ac:
                differs = True
                problems.append(f"(2) {p}: analyze predicts {ac} {k}, transformers issued {mc}")
            if mb != ab:
                differs = True
                problems.append(f"(2) {p}: analyze predicts {fmt_bytes(ab)} bytes of {k}, transformers moved {fmt_bytes(mb)}")
        mk = Counter(key(c) for c in hf[p]["collectives"])
        ak = Counter(key(c) for c in report[p]["transformers"]["collectives"])
        only_m, only_a = mk - ak, ak - mk
        if only_m or only_a:
            lines = [f"    transformers issued, analyze did not predict: {k} x{n}" for k, n in sorted(only_m.items(), key=str)]
            lines += [f"    analyze predicted, transformers did not issue: {k} x{n}" for k, n in sorted(only_a.items(), key=str)]
            if differs:
                problems += lines
            else:
                notes.append(f"{p}: counts and bytes by kind agree, but modules differ:\n" + "\n".join(lines))
        elif [key(c) for c in hf[p]["collectives"]] != [key(c) for c in report[p]["transformers"]["collectives"]]:
            notes.append(f"{p}: analyze predicts transformers' collectives in another order")

    print()
    for n in notes:
        print(f"note: {n}")
    for p in problems:
        print(p)
    print("collectives: " + ("FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
