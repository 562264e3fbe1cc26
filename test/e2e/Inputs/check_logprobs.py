"""A --requests result's log-probabilities against the logits a run of the same prompt dumped.

    python check_logprobs.py OUT.jsonl LOGITS.bin VOCAB TOP

OUT.jsonl's first line with logprobs asked for TOP log-probabilities; LOGITS.bin holds --dump-logits' rows
(float32, VOCAB a row, one row a generated token). For each token: its logprob is
log_softmax of its row at the chosen id, and top_logprobs are the TOP largest of that row,
most likely first, each with its own log_softmax value (within 1e-5: the rows may come from
another tp). Prints "logprobs: ok" or what differs.
"""
import json
import math
import struct
import sys


def main():
    out, logits_file, vocab, top = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    result = next(r for r in map(json.loads, open(out)) if "logprobs" in r)
    data = open(logits_file, "rb").read()
    values = struct.unpack(f"<{len(data) // 4}f", data)
    rows = [values[i:i + vocab] for i in range(0, len(values), vocab)]
    steps = result["logprobs"]
    failures = []
    if len(steps) != len(result["token_ids"]) or len(steps) > len(rows):
        failures.append(f"{len(steps)} logprobs for {len(result['token_ids'])} tokens, "
                        f"{len(rows)} rows")
    for i, (step, row) in enumerate(zip(steps, rows)):
        high = max(row)
        log_z = high + math.log(sum(math.exp(x - high) for x in row))
        ref = [x - log_z for x in row]
        if step["token_id"] != result["token_ids"][i]:
            failures.append(f"step {i}: token {step['token_id']} is not the output's")
        if abs(step["logprob"] - ref[step["token_id"]]) > 1e-5:
            failures.append(f"step {i}: logprob {step['logprob']}, want {ref[step['token_id']]}")
        tops = step["top_logprobs"]
        kth = sorted(ref, reverse=True)[top - 1]
        if len(tops) != top:
            failures.append(f"step {i}: {len(tops)} top logprobs, want {top}")
        for j, t in enumerate(tops):
            if abs(t["logprob"] - ref[t["token_id"]]) > 1e-5 or ref[t["token_id"]] < kth - 1e-5:
                failures.append(f"step {i}: top {j} {t} is not among the {top} largest")
            if j and t["logprob"] > tops[j - 1]["logprob"]:
                failures.append(f"step {i}: top {j} is more likely than top {j - 1}")
    print("\n".join(failures) if failures else "logprobs: ok")


main()
