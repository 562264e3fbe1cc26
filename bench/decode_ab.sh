#!/usr/bin/env bash
# CPU decode speed of two builds of tpc on one model, interleaved: the ~100M-parameter Llama of
# cpu_inference.sh at tp TP (default 1; more ranks through each side's own `tpc launch`),
# compiled by tpc A and by tpc B, each run RUNS times alternately
# (A B A B ...) so that the machine's drift hits both alike; prints every run's per-token
# decode ms and each side's median. For a change that must not slow decode down (issue 13:
# within 5% of the previous commit).
# Usage: bench/decode_ab.sh TPC_A TPC_B [RUNS] [PROMPT_TOKENS] [NEW_TOKENS] [TP]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
a=$1 b=$2 runs=${3:-5} prompt_len=${4:-128} new_tokens=${5:-64} tp=${6:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$root/bench/gen_llama.py" "$work/llama100m.mlir" --layers 12 --hidden 768 --heads 12 \
  --kv-heads 4 --intermediate 2048 --vocab 32000 --dtype f32
prompt=$(python3 -c "print(','.join(str((7 * i + 3) % 250) for i in range($prompt_len)))")
for side in a b; do
  tpc=${!side}
  "$tpc" compile "$work/llama100m.mlir" --plan "$root/examples/plan.json" --tp "$tp" \
    -o "$work/$side" > /dev/null 2>&1
done
source "$root/bench/ab.sh"
decode_ms() { # decode_ms SIDE: one run of the side's binary
  local tpc=${!1}
  "$tpc" launch -n "$tp" "$work/$1/llama_12l" --random-weights 1 --prompt-ids "$prompt" \
    --max-new-tokens "$new_tokens" --ignore-eos --max-model-len 1024 |
    sed -n 's/.*decode: \([0-9.]*\) ms per token.*/\1/p'
}
ab_interleave "$runs" decode_ms
for side in a b; do
  echo "$side (${!side}): median $(ab_median $side) ms/token over $runs runs"
done
