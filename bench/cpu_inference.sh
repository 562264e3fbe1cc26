#!/usr/bin/env bash
# CPU prefill and per-token decode of compiled models at tp 1 and tp 2: the example (tiny
# Llama) and a ~100M-parameter Llama-shaped config, with generated weights, transformers'
# Llama plan. Prints what rank 0 reports: prefill ms and ms per decoded token.
# Usage: bench/cpu_inference.sh [PROMPT_TOKENS] [NEW_TOKENS]   (after scripts/build.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
prompt_len=${1:-128}
new_tokens=${2:-32}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ~100M parameters: hidden 768, 12 heads (4 KV heads), intermediate 2048, 12 layers,
# vocab 32000, fp32.
python3 "$root/bench/gen_llama.py" "$work/llama100m.mlir" --layers 12 --hidden 768 --heads 12 \
  --kv-heads 4 --intermediate 2048 --vocab 32000 --dtype f32
prompt=$(python3 -c "print(','.join(str((7 * i + 3) % 250) for i in range($prompt_len)))")

for model in "$root/examples/model.mlir" "$work/llama100m.mlir"; do
  name=$(basename "$model" .mlir)
  for tp in 1 2; do
    "$tpc" compile "$model" --plan "$root/examples/plan.json" --tp "$tp" -o "$work/$name-$tp" \
      > /dev/null 2>&1
    binary=$(ls "$work/$name-$tp" | grep -v '\.cpp$')
    result=$("$tpc" launch -n "$tp" "$work/$name-$tp/$binary" --random-weights 1 \
      --prompt-ids "$prompt" --max-new-tokens "$new_tokens" --max-model-len 4096 |
      grep -E "prefill|decode" | sed 's/\[rank 0\] //' | tr '\n' ';')
    echo "$name tp $tp: $result"
  done
done
