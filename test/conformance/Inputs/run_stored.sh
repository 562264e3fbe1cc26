#!/usr/bin/env bash
# Weights kept as stored, against transformers 5.17 (CPU, fp32), end to end:
#   run_stored.sh TPC_BIN_DIR VENV_PYTHON ARCH DTYPE OUT TP...
# transformers builds a tiny random model whose weights are rounded to DTYPE (bfloat16 or
# float16) and saves them so (hf_model.py --weights-dtype); its reference is the fp32 forward
# on those values upcast. tpc imports the checkpoint (each parameter's storage recorded from
# the safetensors header), keeps the matrices in DTYPE (fp32 arithmetic) and must give the
# same logits within 1e-4 and the same greedy tokens at every tp given. Prints the storage
# tpc import recorded and analyze's held types, then conform.py's verdicts.
set -euo pipefail
bin=$1 py=$2 arch=$3 dtype=$4 out=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
tpc=$bin/tpc
hf=$out/hf

"$py" "$here/hf_model.py" "$arch" "$hf" --weights-dtype "$dtype" > "$out/hf_model.log"
prompt=$(cat "$hf/prompt.txt") force=$(cat "$hf/force.txt")
"$tpc" import "$hf/config.json" -o "$out/model.mlir"
grep -m1 -o 'storage = #tp.storage<[a-z0-9]*>' "$out/model.mlir" | sed 's/^/import: /'
"$tpc" analyze "$out/model.mlir" --plan auto --tp 2 2> /dev/null | grep -o 'held as [^;]*' |
  sed 's/^/analyze: /'
runs=()
for tp in "$@"; do
  "$tpc" compile "$out/model.mlir" --plan auto --tp "$tp" -o "$out/tp$tp" > "$out/compile$tp.log" 2>&1
  for mode in forced free; do
    extra=()
    [[ $mode == forced ]] && extra=(--force-ids "$force")
    "$tpc" launch -n "$tp" "$out/tp$tp/$arch" --weights "$hf" --prompt-ids "$prompt" \
      --max-new-tokens 16 --ignore-eos --dump-logits "$out/$mode$tp.bin" "${extra[@]}" \
      > "$out/$mode$tp.txt"
  done
  runs+=("$out/forced$tp.bin")
done
free=()
for tp in "$@"; do free+=("$out/free$tp.bin"); done
python3 "$here/conform.py" "$hf" "${runs[@]}" --free "${free[@]}"
