"""Checks tpc runs against transformers' reference (from hf_model.py) or against another run.

    python conform.py OUTDIR RUN.bin [RUN.bin...] [--free RUN.bin...] [--tolerance 1e-4]
                      [--against-run REF.bin]

OUTDIR holds hf_model.py's reference.json and reference.bin (16 rows x vocab float32 logits,
transformers' teacher-forced forward pass). Every RUN.bin is a tpc run's --dump-logits file
(float32, one row of vocab logits per generated step: step 0 is the prefill's last position,
then each decode step) with RUN.txt beside it (RUN.bin without .bin, plus .txt) holding the
rank-0 stdout, which has a line `tokens: a b c ...` (tpc's own argmax at every step).

Positional runs are teacher-forced: made with --force-ids OUTDIR/force.txt, so decode step i
was fed transformers' greedy[i-1] and every row lines up with reference.bin. Each must have
16 rows, max |logit - reference| <= tolerance, and printed tokens == transformers' greedy
at every step (hf_model.py picks prompts whose reference has no top-2 margin below 0.02; a
step whose margin is below 1e-3 would be let differ, with a note, as forcing keeps later steps
unaffected).

--free runs are plain greedy (no forcing). Their tokens must equal transformers' greedy up to
the first step where the reference's top-2 margin is below 1e-3 (a near tie: from there on,
that step included, the two may rightly part; the output says so). Their logits are compared
on the rows up to and including the first step whose token differs (later rows were fed other
tokens), all 16 when none does.

--against-run REF.bin compares with a tpc run (REF.bin, REF.txt) instead of transformers, for
configurations transformers cannot run or where tpc deliberately differs (tp 4 with 2 KV
heads): the same checks with REF.bin's logits and tokens (and its top-2 margins for the near
ties) in place of transformers'; OUTDIR is then not read (pass any word, e.g. -), and
REF.bin's row count is what every run must have.

--free takes every argument after it up to the next option. Prints one line per run (plus
indented note/FAIL lines) and ends with `conform: ok` (exit 0) or `conform: FAILED` (exit 1).
Standard library only.
"""
import argparse
import json
import os
import re
import struct
import sys

NEAR_TIE = 1e-3


def read_rows(path, vocab):
    data = open(path, "rb").read()
    if vocab <= 0 or len(data) % (4 * vocab):
        raise ValueError(f"{len(data)} bytes is not a whole number of rows of {vocab} float32")
    flat = struct.unpack("<%df" % (len(data) // 4), data)
    return [flat[i : i + vocab] for i in range(0, len(flat), vocab)]


def read_tokens(path):
    txt = path[: -len(".bin")] + ".txt" if path.endswith(".bin") else path + ".txt"
    try:
        text = open(txt).read()
    except OSError as e:
        raise ValueError(f"cannot read {txt}: {e.strerror}")
    found = re.search(r"^tokens:([ 0-9-]*)$", text, re.M) or re.search(r"tokens:([ 0-9-]*)", text)
    if not found:
        raise ValueError(f"no 'tokens:' line in {txt}")
    return [int(t) for t in found.group(1).split()]


def margin(row):
    a, b = sorted(row, reverse=True)[:2]
    return a - b


def max_diff(rows, ref_rows):
    best, where = 0.0, None
    for step, (r, q) in enumerate(zip(rows, ref_rows)):
        d = max(abs(x - y) for x, y in zip(r, q))
        if d != d:  # NaN
            return float("nan"), step
        if d > best:
            best, where = d, step
    return best, where


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def fmt(ids):
    return " ".join(map(str, ids))


def check(run, free, ref_rows, ref_tokens, margins, tol, against):
    """Returns (ok, line) for one run."""
    try:
        rows = read_rows(run, len(ref_rows[0]))
        tokens = read_tokens(run)
    except (OSError, ValueError) as e:
        return False, f"{run}: {e}"
    n = len(ref_rows)
    kind = "free" if free else ("every step" if against else "forced")
    if len(rows) != n:
        return False, f"{run} ({kind}): {len(rows)} rows of logits, expected {n}"
    if len(tokens) != n:
        return False, f"{run} ({kind}): {len(tokens)} tokens, expected {n}: {fmt(tokens)}"
    problems, notes = [], []

    status = "same"
    if not free:
        # Every row was fed the same tokens: all 16 rows and all 16 tokens are compared; a
        # token may differ only where the reference's top-2 margin is a near tie.
        diff, where = max_diff(rows, ref_rows)
        compared = n
        differing = [i for i in range(n) if tokens[i] != ref_tokens[i]]
        tied = [i for i in differing if margins[i] < NEAR_TIE]
        if tied:
            notes.append(f"tokens differ at near ties (top-2 margin < {NEAR_TIE:g}), allowed: "
                         + ", ".join(f"step {i} ({margins[i]:.2g})" for i in tied))
            status = "same but at near ties"
        differ = next((i for i in differing if i not in tied), None)
    else:
        # Tokens must match before the reference's first near tie; from it on (that step
        # included) the runs may rightly part and are not compared. Logits: row i is
        # comparable while the tokens fed before it match, i.e. up to and including the
        # first differing step.
        tie = next((i for i, m in enumerate(margins) if m < NEAR_TIE), None)
        differ = first_difference(tokens, ref_tokens)
        if tie is not None:
            notes.append(f"reference near tie (top-2 margin {margins[tie]:.2g} < {NEAR_TIE:g}) "
                         f"at step {tie}: tokens from step {tie} on are not compared")
            status = f"same up to step {tie}"
            if differ is not None and differ >= tie:
                differ = None
        same_inputs = first_difference(tokens, ref_tokens)
        compared = n if same_inputs is None else same_inputs + 1
        diff, where = max_diff(rows[:compared], ref_rows[:compared])
    if differ is not None:
        status = "DIFFER"
        problems.append(f"tokens differ from step {differ} (reference top-2 margin there "
                        f"{margins[differ]:.3g}):\n  got      {fmt(tokens)}\n  expected "
                        f"{fmt(ref_tokens)}")

    if not diff <= tol:  # also catches NaN
        problems.append(f"max abs diff {diff:.3g} > {tol:g} (step {where})")
    what = "run" if against else "transformers"
    line = (f"{run} ({kind}): max abs diff {diff:.3g} over {compared} rows, tokens {status} "
            f"vs {what}")
    for note in notes:
        line += f"\n  note: {note}"
    for p in problems:
        line += f"\n  FAIL: {p}"
    return not problems, line


def main():
    ap = argparse.ArgumentParser(
        usage="conform.py OUTDIR RUN.bin [RUN.bin...] [--free RUN.bin...] [--tolerance T] "
              "[--against-run REF.bin]",
        description="Checks tpc --dump-logits runs against hf_model.py's reference.")
    ap.add_argument("outdir")
    ap.add_argument("runs", nargs="*", help="teacher-forced runs (--force-ids force.txt)")
    ap.add_argument("--free", nargs="+", default=[], help="free-running greedy runs")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--against-run", metavar="REF.bin",
                    help="compare with this tpc run instead of transformers")
    args, extra = ap.parse_known_args()
    # Allow positional runs after --free/--tolerance too (argparse stops at options).
    for item in extra:
        if item.startswith("-"):
            ap.error(f"unknown option {item}")
        args.runs.append(item)
    if not args.runs and not args.free:
        ap.error("no runs to check")

    try:
        if args.against_run:
            ref_tokens = read_tokens(args.against_run)
            size = os.path.getsize(args.against_run)
            if not ref_tokens or size % (4 * len(ref_tokens)):
                raise ValueError(f"{args.against_run}: {size} bytes do not make "
                                 f"{len(ref_tokens)} rows")
            ref_rows = read_rows(args.against_run, size // 4 // len(ref_tokens))
            print(f"reference: tpc run {args.against_run} ({len(ref_rows)} rows x "
                  f"{len(ref_rows[0])})")
        else:
            meta = json.load(open(os.path.join(args.outdir, "reference.json")))
            ref_tokens = meta["greedy"]
            vocab = meta.get("vocab")
            binpath = os.path.join(args.outdir, meta.get("teacher_logits_file", "reference.bin"))
            if not vocab:
                vocab = os.path.getsize(binpath) // 4 // len(ref_tokens)
            ref_rows = read_rows(binpath, vocab)
            if len(ref_rows) != len(ref_tokens):
                raise ValueError(f"{binpath}: {len(ref_rows)} rows, greedy has {len(ref_tokens)}")
            print(f"reference: transformers {meta.get('transformers', '?')} {meta['arch']}, "
                  f"prompt {fmt(meta['prompt'])}, greedy {fmt(ref_tokens)}")
    except (OSError, ValueError, KeyError) as e:
        print(f"conform: cannot read the reference: {e}")
        print("conform: FAILED")
        return 1
    margins = [margin(r) for r in ref_rows]

    ok = True
    for run, free in [(r, False) for r in args.runs] + [(r, True) for r in args.free]:
        good, line = check(run, free, ref_rows, ref_tokens, margins, args.tolerance,
                           args.against_run)
        print(line)
        ok &= good
    print("conform: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
