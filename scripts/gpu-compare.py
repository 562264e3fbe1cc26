"""Compares a --target cuda run (bf16) with the CPU target's (fp32) on the same weights:
    python3 gpu-compare.py CPU.bin CPU.txt FORCED.bin FORCED.txt FREE.txt [--tolerance T]

CPU.bin/.txt: the CPU run's --dump-logits and output (free-running greedy). FORCED: the CUDA
run fed the CPU run's tokens (--force-ids), so every step sees the same prefix; FREE.txt: the
CUDA run's own greedy output.

Every step's logits are compared on that step's own scale, not on the run's largest logit (a
step whose logits are small would otherwise pass almost anything):
  - relative diff: max |CUDA - CPU| over the step's row / max |CPU logit| of that row, at most
    T (default 0.05, TPC_GPU_TOLERANCE overrides it: bf16 keeps 8 bits of mantissa, a
    relative step of 2^-8, so each logit may move by a few hundredths of the row's scale;
    the first lent GPU run sets T from the bf16 noise it measures, which this prints);
  - probability moved: half the L1 distance between the two rows' softmax (the total
    variation distance: how much probability sampling would see moved), at most T too;
  - every forced step's argmax equals the CPU's token, except at a step where the CPU's top-2
    margin is under twice that step's max abs diff (a near tie bf16 may flip);
  - the free-running tokens equal the CPU's up to the first such near tie.
The GPU check's negative control (TPC_FAULT=perturb: one rank's attention scale 1/32 off) must
fail these; its stage says so when it does not.
Prints the numbers and ends with 'gpu-compare: ok' or 'gpu-compare: FAILED'.
"""
import math
import os
import re
import struct
import sys


def floats(path):
    data = open(path, "rb").read()
    return list(struct.unpack("%df" % (len(data) // 4), data))


def tokens(path):
    found = re.search(r"tokens:([ 0-9]*)", open(path).read())
    return [int(t) for t in found.group(1).split()] if found else []


def softmax(row):
    top = max(row)
    exps = [math.exp(x - top) for x in row]
    total = sum(exps)
    return [e / total for e in exps]


args = sys.argv[1:]
tolerance = float(os.environ.get("TPC_GPU_TOLERANCE", "0.05"))
if "--tolerance" in args:
    at = args.index("--tolerance")
    tolerance = float(args[at + 1])
    del args[at:at + 2]
cpu_bin, cpu_txt, forced_bin, forced_txt, free_txt = args[:5]
ref, got = floats(cpu_bin), floats(forced_bin)
ref_tokens, forced_tokens, free_tokens = tokens(cpu_txt), tokens(forced_txt), tokens(free_txt)
steps = len(ref_tokens)
failed = steps == 0 or len(ref) != len(got) or len(forced_tokens) != steps
if failed:
    print(f"gpu-compare: {len(got)} logits and {len(forced_tokens)} tokens against "
          f"{len(ref)} and {steps}")
    print("gpu-compare: FAILED")
    sys.exit(1)
vocab = len(ref) // steps
worst_rel, worst_tv, first_tie = 0.0, 0.0, None
for s in range(steps):
    a, b = ref[s * vocab:(s + 1) * vocab], got[s * vocab:(s + 1) * vocab]
    if not all(math.isfinite(x) for x in b):
        print(f"step {s}: a logit is not finite")
        failed = True
        continue
    diff = max(abs(x - y) for x, y in zip(a, b))
    scale = max(abs(x) for x in a) or 1.0
    rel = diff / scale
    tv = 0.5 * sum(abs(p - q) for p, q in zip(softmax(a), softmax(b)))
    worst_rel, worst_tv = max(worst_rel, rel), max(worst_tv, tv)
    top = sorted(a, reverse=True)
    tie = top[0] - top[1] < 2 * diff
    if tie and first_tie is None:
        first_tie = s
    if rel > tolerance:
        print(f"step {s}: max abs diff {diff:.4g} is {rel:.4g} of the step's max |logit| "
              f"{scale:.4g}, over {tolerance}")
        failed = True
    if tv > tolerance:
        print(f"step {s}: the softmax moved {tv:.4g} of its probability, over {tolerance}")
        failed = True
    if forced_tokens[s] != ref_tokens[s] and not tie:
        print(f"step {s}: token {forced_tokens[s]}, the CPU's {ref_tokens[s]} (margin "
              f"{top[0] - top[1]:.4g}, diff {diff:.4g})")
        failed = True
upto = steps if first_tie is None else first_tie
same = free_tokens[:upto] == ref_tokens[:upto]
if not same:
    print(f"free-running tokens {free_tokens} differ from the CPU's {ref_tokens} before step {upto}")
    failed = True
print(f"worst step: relative diff {worst_rel:.4g}, probability moved {worst_tv:.4g} "
      f"(tolerance {tolerance} for each); near ties from step {first_tie}; free-running tokens "
      f"{'same' if same else 'DIFFER'} up to step {upto}")
print("gpu-compare: " + ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
