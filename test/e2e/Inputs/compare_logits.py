"""Compares runs of the same model: python3 compare_logits.py TOLERANCE REFERENCE.bin OUT.bin...

Each .bin is a --dump-logits file (float32, the last token's logits per step); each has a
.txt beside it with the rank-0 output holding 'tokens: ...'. Passes when every run's logits
are within TOLERANCE of the reference (max abs diff) and its tokens are the same.
"""
import re
import struct
import sys

tolerance, reference, runs = float(sys.argv[1]), sys.argv[2], sys.argv[3:]


def logits(path):
    data = open(path, "rb").read()
    return struct.unpack("%df" % (len(data) // 4), data)


def tokens(path):
    text = open(path[: -len(".bin")] + ".txt").read()
    found = re.search(r"tokens:([ 0-9]*)", text)
    return found.group(1).split() if found else None


ref, ref_tokens = logits(reference), tokens(reference)
failed = ref_tokens is None or not ref
for run in runs:
    got, got_tokens = logits(run), tokens(run)
    if len(got) != len(ref):
        print(f"{run}: {len(got)} logits, the reference has {len(ref)}")
        failed = True
        continue
    diff = max(abs(a - b) for a, b in zip(ref, got))
    same = got_tokens == ref_tokens
    print(f"{run}: max abs diff {diff:.3g}, tokens {'same' if same else 'DIFFER'}")
    failed |= diff > tolerance or not same
print("compare: " + ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
