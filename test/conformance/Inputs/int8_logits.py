"""How far --int8-activations moves a GGUF file's logits from transformers' (gguf-py's
dequantization in fp32), next to the exact kernels' distance.

    python int8_logits.py OUTDIR EXACT.bin INT8.bin [INT8.bin...]

OUTDIR holds hf_model.py's reference.json and reference.bin (transformers' teacher-forced
logits, one row of the vocabulary per step). EXACT.bin and each INT8.bin are tpc runs'
--dump-logits, teacher-forced with OUTDIR/force.txt (so row i of each was fed the same
tokens as the reference's), with their stdout beside them (.txt, its `tokens:` line).

Rounding each block of 256 activations to int8 moves every matrix product by up to half a step
per element (int8.h), and the layers carry it on; it is no longer fp32's answer, so the check
is a bound, not the conformance tolerance. Each INT8 run must:
- give finite logits within SPREAD_FRACTION of the reference row's spread (max - min) in every
  row;
- pick the reference's greedy token at every step but close calls: steps whose reference top-2
  margin is under twice the row's distance, where the rounding may rightly tip the choice;
- be farther from the reference than the exact run by at least 10 times (the rounding took
  effect; the exact kernels are within the conformance tolerance, 1e-4).
Prints one line per run and `int8: ok` (exit 0) or `int8: FAILED` (exit 1). Standard library
only.
"""
import json
import os
import re
import struct
import sys

SPREAD_FRACTION = 0.05


def rows_of(path, vocab):
    data = open(path, "rb").read()
    if len(data) % (4 * vocab):
        raise ValueError(f"{path}: {len(data)} bytes is not a whole number of rows of {vocab}")
    flat = struct.unpack("<%df" % (len(data) // 4), data)
    return [flat[i : i + vocab] for i in range(0, len(flat), vocab)]


def tokens_of(path):
    text = open(path[: -len(".bin")] + ".txt").read()
    found = re.search(r"tokens:([ 0-9-]*)", text)
    if not found:
        raise ValueError(f"no 'tokens:' line beside {path}")
    return [int(t) for t in found.group(1).split()]


def main():
    if len(sys.argv) < 4:
        print(__doc__.split("\n\n")[1])
        return 2
    outdir, exact, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
    meta = json.load(open(os.path.join(outdir, "reference.json")))
    greedy = meta["greedy"]
    size = os.path.getsize(os.path.join(outdir, "reference.bin"))
    reference = rows_of(os.path.join(outdir, "reference.bin"), size // 4 // len(greedy))
    vocab = len(reference[0])

    def distances(rows):
        return [max(abs(a - b) for a, b in zip(row, ref)) for row, ref in zip(rows, reference)]

    exact_rows = rows_of(exact, vocab)
    exact_far = max(distances(exact_rows)) if len(exact_rows) == len(reference) else float("inf")
    ok = True
    for run in runs:
        problems = []
        try:
            rows, tokens = rows_of(run, vocab), tokens_of(run)
        except (OSError, ValueError) as e:
            print(f"{run}: {e}")
            ok = False
            continue
        if len(rows) != len(reference) or len(tokens) != len(greedy):
            print(f"{run}: {len(rows)} rows and {len(tokens)} tokens, expected {len(greedy)}")
            ok = False
            continue
        far = distances(rows)
        worst = max(range(len(far)), key=lambda i: far[i] / (max(reference[i]) - min(reference[i])))
        fraction = far[worst] / (max(reference[worst]) - min(reference[worst]))
        if not all(all(v == v and abs(v) != float("inf") for v in row) for row in rows):
            problems.append("logits not finite")
        if not fraction <= SPREAD_FRACTION:
            problems.append(f"row {worst} is {fraction:.3g} of its spread away "
                            f"(at most {SPREAD_FRACTION:g})")
        close, differing = [], []
        for i, (got, want) in enumerate(zip(tokens, greedy)):
            top = sorted(reference[i], reverse=True)[:2]
            if got != want:
                (close if top[0] - top[1] < 2 * far[i] else differing).append(i)
        if differing:
            problems.append("tokens differ where the reference's margin is clear, at steps "
                            + ", ".join(map(str, differing)))
        if not max(far) >= 10 * exact_far:
            problems.append(f"within {max(far):.3g}, not 10 times the exact kernels' "
                            f"{exact_far:.3g}: were the activations rounded?")
        print(f"{run}: logits within {max(far):.3g} of transformers' (at most {fraction:.2%} "
              f"of a row's spread; the exact kernels: {exact_far:.2g}); tokens the same at "
              f"{len(greedy) - len(close) - len(differing)} of {len(greedy)} steps"
              + (f", close calls at {', '.join(map(str, close))}" if close else ""))
        for p in problems:
            print(f"  FAIL: {p}")
        ok = ok and not problems
    print("int8: ok" if ok else "int8: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
