#!/usr/bin/env bash
# One model, plan and mesh: compile it, run it on generated weights with --trace, ask
# `tpc analyze --json` about the same compile, and compare (check_trace.py): the collectives
# (and, with pipeline stages, the sends and receives between them) in order, the weight bytes
# each rank loaded and the arena it allocated.
#   trace_vs_analyze.sh TPC PYTHON MODEL PLAN TP OUT [PP]
set -euo pipefail
tpc=$1 python=$2 model=$3 plan=$4 tp=$5 out=$6 pp=${7:-1}
here=$(cd "$(dirname "$0")" && pwd)
"$tpc" compile "$model" --plan "$plan" --tp "$tp" --pp "$pp" -o "$out" > "$out.compile.log" 2>&1 ||
  { cat "$out.compile.log"; exit 1; }
binary=$(ls "$out" | grep -v '\.')
ranks=$((pp * tp))
"$tpc" launch -n "$ranks" "$out/$binary" --random-weights 1 --prompt-ids 1,2,3,4 \
  --max-new-tokens 3 --ignore-eos --trace "$out.json" > "$out.txt"
"$tpc" analyze "$model" --plan "$plan" --tp "$tp" --pp "$pp" --prefill-len 4 --json \
  > "$out.analyze.json" 2> /dev/null
traces=()
for ((r = 0; r < ranks; ++r)); do
  traces+=("$out.json.rank$r")
done
"$python" "$here/check_trace.py" "$out.analyze.json" 4 3 "${traces[@]}"
