#!/usr/bin/env bash
# How long `tpc analyze` takes on an 80-layer Llama-70B-shaped graph with transformers' Llama
# plan at tp 8 (goal: under 0.3 s). Prints the best and median of RUNS wall-clock runs.
# Usage: bench/analyze_llama70b.sh [RUNS]   (after scripts/build.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
runs=${1:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 "$root/bench/gen_llama.py" "$work/llama70b.mlir"
"$tpc" analyze "$work/llama70b.mlir" --plan "$root/examples/plan.json" --tp 8 2>/dev/null |
  grep -E "tpc:|transformers:|weights|KV cache" | head -6

times=()
for _ in $(seq "$runs"); do
  start=$(date +%s.%N)
  "$tpc" analyze "$work/llama70b.mlir" --plan "$root/examples/plan.json" --tp 8 >/dev/null 2>&1
  end=$(date +%s.%N)
  times+=("$(echo "$end - $start" | bc -l)")
done
printf '%s\n' "${times[@]}" | sort -n | awk -v runs="$runs" '
  { t[NR] = $1 }
  END { printf "tpc analyze, 80-layer Llama-70B shape, tp 8: best %.3f s, median %.3f s over %d runs\n",
        t[1], t[int((NR + 1) / 2)], runs }'
