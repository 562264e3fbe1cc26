"""A compiled binary's answers with its KV cache in bf16 (or each of TYPES) against fp32
(--kv-cache-dtype):

    python kv_bf16.py [--types TYPE,...] BINARY CHECKPOINT OUTDIR PROMPT...

For each PROMPT (a user message, through the checkpoint's chat template by transformers'
tokenizer, given as ids): the greedy answer of 32 tokens with the fp32 cache (run once,
whatever the types), then for each type the answer with that cache (free running), then
that cache fed the fp32 answer's tokens (--force-ids), whose logits are compared with the
fp32 run's step by step (--dump-logits). The free-running tokens must be the fp32 ones up to
the first step whose fp32 top-2 margin is within twice what the rounding moved either of
those two logits (where it may choose the other token, as the arithmetic of another CPU
may); every step if there is none. Prints, a line per type and prompt, how many tokens are
the same and the largest logit difference, and exits non-zero where a decided token differs
or a logit is not finite.
"""
import math
import os
import re
import subprocess
import sys

import numpy as np

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
    return ids, np.fromfile(dump, dtype=np.float32)


def main():
    args = sys.argv[1:]
    kinds = ["bf16"]
    if args[:1] == ["--types"]:
        kinds, args = args[1].split(","), args[2:]
    if len(args) < 4:
        raise SystemExit(__doc__)
    binary, ckpt, outdir = args[:3]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    bad = False
    prompts, answers = [], []
    for i, text in enumerate(args[3:]):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=True)
        if isinstance(prompt, dict) or hasattr(prompt, "input_ids"):
            prompt = prompt["input_ids"]
        prompts.append(prompt)
        answers.append(run(binary, ckpt, prompt, [], os.path.join(outdir, f"p{i}-f32.bin")))
    for kind in kinds:
        for i, (prompt, (f32, f32_logits)) in enumerate(zip(prompts, answers)):
            base = os.path.join(outdir, f"p{i}")
            free, _ = run(binary, ckpt, prompt, ["--kv-cache-dtype", kind], base + f"-{kind}-free.bin")
            forced_ids = ",".join(map(str, f32))
            _, bf16_logits = run(binary, ckpt, prompt,
                                 ["--kv-cache-dtype", kind, "--force-ids", forced_ids],
                                 base + f"-{kind}.bin")
            if len(bf16_logits) != len(f32_logits):
                raise SystemExit(f"kv_bf16.py: {len(bf16_logits)} logits against {len(f32_logits)}")
            vocab = len(f32_logits) // len(f32)
            decided = len(f32)  # the steps before the first close one
            diffs = []
            for s in range(len(f32)):
                row = f32_logits[s * vocab:(s + 1) * vocab]
                other = bf16_logits[s * vocab:(s + 1) * vocab]
                diffs.append(np.max(np.abs(row - other)))
                first, second = np.argsort(row, kind="stable")[-1:-3:-1]
                moved = max(abs(row[first] - other[first]), abs(row[second] - other[second]))
                if decided == len(f32) and row[first] - row[second] <= 2 * moved:
                    decided = s
            diff = float(np.max(diffs))  # NaN where any is
            same = free[:decided] == f32[:decided]
            bad |= not same or not math.isfinite(diff)
            first = next((s for s in range(len(f32)) if free[s] != f32[s]), None)
            what = "all the same" if first is None else f"the same to step {first}"
            print(f"{kind} prompt {i}: {len(f32)} tokens, {what}; the first {decided} decided by a "
                  f"clear margin: {'ok' if same else 'DIFFER'}; largest logit difference {diff:.3g}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
