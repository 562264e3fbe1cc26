#!/usr/bin/env bash
# Per-token CPU decode of a ~100M-parameter Llama-shaped model (hidden 768, 12 layers, 12 heads,
# 4 KV heads, intermediate 2048, vocab 32000, fp32), in one run on this machine: tpc at tp 1 and
# tp 2 (one OpenBLAS thread per rank) against transformers + torch eager generate with 1 and 2
# threads, on the same saved checkpoint and prompt, eos disabled. Prints each and the ratios.
# Usage: bench/vs_transformers.sh [PROMPT_TOKENS] [NEW_TOKENS]   (after scripts/build.sh; the
# test venv from scripts/venv.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
py=$("$root/scripts/venv.sh")/bin/python
prompt_len=${1:-128}
new_tokens=${2:-32}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$py" "$root/bench/hf_decode.py" make "$work/hf"
"$tpc" import "$work/hf/config.json" -o "$work/model.mlir" > /dev/null
prompt=$(python3 -c "print(','.join(str((7 * i + 3) % 250) for i in range($prompt_len)))")
echo "prompt $prompt_len tokens, $new_tokens new tokens; $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p')"

declare -A decode
for tp in 1 2; do
  "$tpc" compile "$work/model.mlir" --plan auto --tp "$tp" -o "$work/tp$tp" > /dev/null 2>&1
  best=""
  for run in 1 2 3; do # best of 3, as for transformers
    out=$("$tpc" launch -n "$tp" "$work/tp$tp/llama" --weights "$work/hf" --prompt-ids "$prompt" \
      --max-new-tokens "$new_tokens" --ignore-eos | sed 's/\[rank 0\] //')
    ms=$(sed -n 's/^decode: \([0-9.]*\) ms.*/\1/p' <<< "$out")
    if [[ -z $best ]] || (( $(echo "$ms < $best" | bc -l) )); then best=$ms; keep=$out; fi
  done
  decode[tpc$tp]=$best
  echo "tpc tp $tp: $(tr '\n' ';' <<< "$keep")"
done
for threads in 1 2; do
  line=$("$py" "$root/bench/hf_decode.py" time "$work/hf" "$prompt_len" "$new_tokens" "$threads")
  echo "$line"
  decode[hf$threads]=$(sed -n 's/.*decode \([0-9.]*\) ms.*/\1/p' <<< "$line")
done
ratio() { echo "scale=2; $1 / $2" | bc -l; }
echo "decode speedup (transformers ms / tpc ms per token):"
echo "  tpc tp 1 vs transformers 1 thread:  $(ratio "${decode[hf1]}" "${decode[tpc1]}")x"
echo "  tpc tp 2 vs transformers 2 threads: $(ratio "${decode[hf2]}" "${decode[tpc2]}")x"
echo "  tpc tp 1 vs transformers 2 threads: $(ratio "${decode[hf2]}" "${decode[tpc1]}")x"
