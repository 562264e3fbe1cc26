"""A compiled binary's answers with its KV cache in bf16 (or TYPE) against fp32
(--kv-cache-dtype):

    python kv_bf16.py [--type TYPE] BINARY CHECKPOINT OUTDIR PROMPT...

For each PROMPT (a user message, through the checkpoint's chat template by transformers'
tokenizer, given as ids): the greedy answer
of 32 tokens with the fp32 cache, then with the bf16 one (free running), then the bf16 cache
fed the fp32 answer's tokens (--force-ids), whose logits are compared with the fp32 run's
step by step (--dump-logits). The free-running bf16 tokens must be the fp32 ones up to the
first step whose fp32 top-2 margin is within twice what the rounding moved either of those
two logits (where it may choose the other token, as the arithmetic of another CPU may);
every step if there is none. Prints, a line per prompt, how many tokens are the same and the largest logit
difference, and exits non-zero where a decided token differs or a logit is not finite.
"""
import array
import math
import os
import re
import subprocess
import sys

NEW_TOKENS = 32


def run(binary, ckpt, prompt, extra, dump):
    cmd = [binary, "--weights", ckpt, "--prompt-ids", ",".join(map(str, prompt)),
           "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos", "--dump-logits", dump] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"kv_bf16.py: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    match = re.search(r"^tokens: ([0-9, ]+)$", out.stdout, re.M)
    if not match:
        raise SystemExit(f"kv_bf16.py: no tokens line from {' '.join(cmd)}:\n{out.stdout}")
    ids = [int(t) for t in re.split(r"[, ]+", match.group(1).strip()) if t]
    logits = array.array("f")
    with open(dump, "rb") as f:
        logits.frombytes(f.read())
    return ids, logits


def main():
    args = sys.argv[1:]
    kind = "bf16"
    if args[:1] == ["--type"]:
        kind, args = args[1], args[2:]
    if len(args) < 4:
        raise SystemExit(__doc__)
    binary, ckpt, outdir = args[:3]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    bad = False
    for i, text in enumerate(args[3:]):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=True)
        if isinstance(prompt, dict) or hasattr(prompt, "input_ids"):
            prompt = prompt["input_ids"]
        base = os.path.join(outdir, f"p{i}")
        f32, f32_logits = run(binary, ckpt, prompt, [], base + "-f32.bin")
        free, _ = run(binary, ckpt, prompt, ["--kv-cache-dtype", kind], base + f"-{kind}-free.bin")
        forced_ids = ",".join(map(str, f32))
        _, bf16_logits = run(binary, ckpt, prompt,
                             ["--kv-cache-dtype", kind, "--force-ids", forced_ids],
                             base + f"-{kind}.bin")
        if len(bf16_logits) != len(f32_logits):
            raise SystemExit(f"kv_bf16.py: {len(bf16_logits)} logits against {len(f32_logits)}")
        vocab = len(f32_logits) // len(f32)
        decided = len(f32)  # the steps before the first close one
        diff = 0.0
        for s in range(len(f32)):
            row = f32_logits[s * vocab:(s + 1) * vocab]
            other = bf16_logits[s * vocab:(s + 1) * vocab]
            diff = max(diff, max(abs(a - b) for a, b in zip(row, other)))
            # The fp32 run's top two, and how far the rounding moved either of them.
            first, second = sorted(range(vocab), key=lambda j: row[j])[-1:-3:-1]
            moved = max(abs(row[first] - other[first]), abs(row[second] - other[second]))
            if decided == len(f32) and row[first] - row[second] <= 2 * moved:
                decided = s
        same = free[:decided] == f32[:decided]
        bad |= not same or not math.isfinite(diff)
        first = next((s for s in range(len(f32)) if free[s] != f32[s]), None)
        what = "all the same" if first is None else f"the same to step {first}"
        print(f"prompt {i}: {len(f32)} tokens, {what}; the first {decided} decided by a clear margin: "
              f"{'ok' if same else 'DIFFER'}; largest logit difference {diff:.3g}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
