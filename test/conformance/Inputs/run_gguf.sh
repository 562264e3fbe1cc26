#!/usr/bin/env bash
# A GGUF file of gguf_models.py against transformers' run of the same file, end to end:
#   [PLAN=auto-ep|FILE] run_gguf.sh TPC_BIN_DIR DIR ARCH TP...
# DIR holds ARCH.gguf and its reference (gguf_models.py). tpc imports the file (config from
# the metadata, each matrix's storage from its GGUF type), compiles at every tp given with the
# automatic plan (or $PLAN), runs it reading the file itself (teacher-forced and free greedy) and must give
# transformers' logits within 1e-4 and its greedy tokens (conform.py). Prints the model line of
# the import, the types analyze holds the parameters in at tp 2, then conform.py's verdicts.
set -euo pipefail
bin=$1 dir=$2 arch=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
tpc=$bin/tpc
file=$dir/$arch.gguf

plan=${PLAN:-auto}
prompt=$(cat "$dir/prompt.txt") force=$(cat "$dir/force.txt")
"$tpc" import "$file" -o "$dir/model.mlir"
grep -m1 -o '^module @[a-z0-9_]* attributes {tp.hf_model_type = "[a-z0-9_]*"' "$dir/model.mlir" |
  sed 's/^/import: /'
"$tpc" analyze "$dir/model.mlir" --plan "$plan" --tp 2 2> /dev/null | grep -o 'held as [^;]*' |
  sed 's/^/analyze: /'
runs=() free=()
for tp in "$@"; do
  "$tpc" compile "$dir/model.mlir" --plan "$plan" --tp "$tp" -o "$dir/tp$tp" > "$dir/compile$tp.log" 2>&1
  program=$(find "$dir/tp$tp" -maxdepth 1 -type f -perm -u+x | head -n 1)
  for mode in forced free; do
    extra=()
    [[ $mode == forced ]] && extra=(--force-ids "$force")
    "$tpc" launch -n "$tp" "$program" --weights "$file" --prompt-ids "$prompt" \
      --max-new-tokens 16 --ignore-eos --dump-logits "$dir/$mode$tp.bin" "${extra[@]}" \
      > "$dir/$mode$tp.txt"
  done
  runs+=("$dir/forced$tp.bin") free+=("$dir/free$tp.bin")
done
python3 "$here/conform.py" "$dir" "${runs[@]}" --free "${free[@]}"
