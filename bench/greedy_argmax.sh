#!/usr/bin/env bash
# What a greedy step's argmax on the ranks saves against gathering the logits, in one run:
# Gemma 3 270M's shape (test/Tools/Inputs/gemma3-270m.json: a 262144-token vocabulary, the
# embedding tied and split by vocabulary) at tp TP (default 2) on generated weights, decoding
# NEW_TOKENS greedily, RUNS times alternately (A B A B ...): A finds each step's argmax on the
# ranks (the default), B gathers the logits (--dump-logits, which also copies each 1 MiB row
# into memory on rank 0). Prints each run's decode ms per token, each side's median, and the
# bytes each side's trace moved in lm_head's collective.
# Usage: bench/greedy_argmax.sh [RUNS] [NEW_TOKENS] [TP]   (after scripts/build.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
runs=${1:-5} new_tokens=${2:-32} tp=${3:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$tpc" import "$root/test/Tools/Inputs/gemma3-270m.json" -o "$work/model.mlir" > /dev/null
"$tpc" compile "$work/model.mlir" --plan auto --tp "$tp" -o "$work/out" > /dev/null 2>&1
binary=$(ls "$work/out" | grep -v '\.')
prompt=$(python3 -c "print(','.join(str((7919 * i + 3) % 262144) for i in range(16)))")
source "$root/bench/ab.sh"
decode_ms() { # decode_ms SIDE: a, the argmax on the ranks; b, the logits gathered
  local extra=()
  [[ $1 == b ]] && extra=(--dump-logits "$work/logits.bin")
  "$tpc" launch -n "$tp" "$work/out/$binary" --random-weights 1 --prompt-ids "$prompt" \
    --max-new-tokens "$new_tokens" --ignore-eos --max-model-len 256 --trace "$work/$1.json" \
    "${extra[@]}" | sed -n 's/.*decode: \([0-9.]*\) ms per token.*/\1/p'
}
ab_interleave "$runs" decode_ms
for side in a b; do
  bytes=$(python3 -c "import json, sys; t = json.load(open(sys.argv[1])); print(sum(c['bytes'] for c in t['collectives'] if c['module'] == 'lm_head'))" "$work/$side.json.rank0")
  what=$([[ $side == a ]] && echo "argmax on the ranks" || echo "logits gathered")
  echo "$side ($what): median $(ab_median $side) ms/token over $runs runs; lm_head moved $bytes bytes in $new_tokens steps"
done
