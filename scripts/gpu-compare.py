"""Compares a --target cuda run (bf16) with the CPU target's (fp32) on the same weights:
    python3 gpu-compare.py CPU.bin CPU.txt FORCED.bin FORCED.txt FREE.txt

CPU.bin/.txt: the CPU run's --dump-logits and output (free-running greedy). FORCED: the CUDA
run fed the CPU run's tokens (--force-ids), so every step sees the same prefix; FREE.txt: the
CUDA run's own greedy output.

The bf16 tolerance: weights and activations in bf16 keep 8 bits of mantissa (a relative step
of 2^-8), so each logit may move by a few hundredths of the logits' scale. Passes when
  - every forced step's logits are within 0.05 x max |CPU logit| of the CPU's (max abs diff);
  - every forced step's argmax equals the CPU's token, except at a step where the CPU's top-2
    margin is under twice that step's max abs diff (a near tie bf16 may flip);
  - the free-running tokens equal the CPU's up to the first such near tie.
Prints the numbers and ends with 'gpu-compare: ok' or 'gpu-compare: FAILED'.
"""
import re
import struct
import sys


def floats(path):
    data = open(path, "rb").read()
    return list(struct.unpack("%df" % (len(data) // 4), data))


def tokens(path):
    found = re.search(r"tokens:([ 0-9]*)", open(path).read())
    return [int(t) for t in found.group(1).split()] if found else []


cpu_bin, cpu_txt, forced_bin, forced_txt, free_txt = sys.argv[1:6]
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
scale = max(abs(x) for x in ref)
worst, first_tie = 0.0, None
for s in range(steps):
    a, b = ref[s * vocab:(s + 1) * vocab], got[s * vocab:(s + 1) * vocab]
    diff = max(abs(x - y) for x, y in zip(a, b))
    worst = max(worst, diff)
    top = sorted(a, reverse=True)
    tie = top[0] - top[1] < 2 * diff
    if tie and first_tie is None:
        first_tie = s
    if diff > 0.05 * scale:
        print(f"step {s}: max abs diff {diff:.4g} over 0.05 x {scale:.4g}")
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
print(f"max abs diff {worst:.4g} (tolerance {0.05 * scale:.4g} = 0.05 x max |logit|); "
      f"near ties from step {first_tie}; free-running tokens {'same' if same else 'DIFFER'} "
      f"up to step {upto}")
print("gpu-compare: " + ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
