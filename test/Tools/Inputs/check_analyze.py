"""Checks facts of a `tpc analyze --json` report: python3 check_analyze.py REPORT CHECK...

Each CHECK is one of
  layer-counts=KIND:N        every decoder layer runs exactly N collectives of KIND
  no-kind-in-layers=KIND     no decoder layer runs KIND
  top=MODULE:KIND:N          the module outside the decoder layers runs N of KIND
  fewer-than-transformers    tpc runs fewer collectives and bytes than transformers, both phases
  total=PHASE:N              PHASE (prefill or decode) runs N collectives
  transformers-total=PHASE:N transformers runs N collectives in PHASE
  transformers-fails=TEXT    transformers' TP cannot run it, in both phases, for a reason
                             that contains TEXT (no collectives of its reported then)
"""
import collections
import json
import sys

report = json.load(open(sys.argv[1]))
failed = False


def fail(message):
    global failed
    print("FAIL:", message)
    failed = True


def transformers_total(phase):
    """transformers' total for PHASE, or None (and a failure) where analyze says it fails."""
    theirs = report[phase]["transformers"]
    if "fails" in theirs:
        fail(f"{phase}: transformers' TP fails ({theirs['fails']}), no count to check")
        return None
    return theirs["total"]


def per_layer(phase):
    layers = collections.defaultdict(collections.Counter)
    for c in report[phase]["collectives"]:
        layers[c["layer"]][c["kind"]] += 1
    return layers


for check in sys.argv[2:]:
    name, _, arg = check.partition("=")
    for phase in ("prefill", "decode"):
        layers = per_layer(phase)
        decoder = {k: v for k, v in layers.items() if k.startswith("model.layers.")}
        if name == "layer-counts":
            kind, n = arg.split(":")
            if not decoder:
                fail(f"{phase}: no decoder layer runs a collective")
            for layer, counts in decoder.items():
                if counts[kind] != int(n):
                    fail(f"{phase}: {layer} runs {counts[kind]} {kind}, expected {n}")
        elif name == "no-kind-in-layers":
            for layer, counts in decoder.items():
                if counts[arg]:
                    fail(f"{phase}: {layer} runs {counts[arg]} {arg}")
        elif name == "top":
            module, kind, n = arg.split(":")
            if layers[module][kind] != int(n):
                fail(f"{phase}: {module} runs {layers[module][kind]} {kind}, expected {n}")
        elif name == "fewer-than-transformers":
            ours, theirs = report[phase]["total"], transformers_total(phase)
            if theirs and not (ours["count"] < theirs["count"] and ours["bytes"] < theirs["bytes"]):
                fail(f"{phase}: tpc {ours}, transformers {theirs}")
        elif name == "total":
            want_phase, n = arg.split(":")
            if phase == want_phase and report[phase]["total"]["count"] != int(n):
                fail(f"{phase}: {report[phase]['total']['count']} collectives, expected {n}")
        elif name == "transformers-total":
            want_phase, n = arg.split(":")
            theirs = transformers_total(phase) if phase == want_phase else None
            if theirs and theirs["count"] != int(n):
                fail(f"{phase}: transformers runs {theirs['count']} collectives, expected {n}")
        elif name == "transformers-fails":
            theirs = report[phase]["transformers"]
            if arg not in theirs.get("fails", ""):
                fail(f"{phase}: transformers {theirs.get('fails') or 'runs'}, expected it to fail: {arg}")
            if set(theirs) != {"fails"}:
                fail(f"{phase}: transformers fails, yet reports {sorted(set(theirs) - {'fails'})}")
        else:
            fail(f"unknown check {check}")
print("analyze report: " + ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
