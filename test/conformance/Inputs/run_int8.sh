#!/usr/bin/env bash
# --int8-activations on a GGUF file that run_gguf.sh has run (its binaries at DIR/tpN and
# the exact kernels' teacher-forced logits at DIR/forcedN.bin):
#   run_int8.sh TPC_BIN_DIR DIR ARCH TP...
# Runs each binary again, teacher-forced, with --int8-activations and --verbose; prints the
# kernels line that names the types met by x rounded to int8 (tp 1), then int8_logits.py's
# verdicts against transformers, next to the exact kernels' distance. On a CPU without
# AVX-512 VNNI the flag changes nothing: it says so, and the runs must be the exact ones.
set -euo pipefail
bin=$1 dir=$2 arch=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
runs=()
for tp in "$@"; do
  program=$(find "$dir/tp$tp" -maxdepth 1 -type f -perm -u+x | head -n 1)
  "$bin/tpc" launch -n "$tp" "$program" --weights "$dir/$arch.gguf" \
    --prompt-ids "$(cat "$dir/prompt.txt")" --force-ids "$(cat "$dir/force.txt")" \
    --max-new-tokens 16 --ignore-eos --int8-activations --verbose \
    --dump-logits "$dir/int8-$tp.bin" > "$dir/int8-$tp.txt" 2>&1
  runs+=("$dir/int8-$tp.bin")
done
if grep -q 'times x rounded to int8' "$dir/int8-$1.txt"; then
  grep -o 'q[0-9a-z_, ()]* times x rounded to int8' "$dir/int8-$1.txt" | head -1 | sed 's/^/kernels: /'
  python3 "$here/int8_logits.py" "$dir" "$dir/forced$1.bin" "${runs[@]}"
else
  echo "kernels: none (no AVX-512 VNNI on this CPU): the exact ones ran"
  python3 "$here/conform.py" "$dir" "${runs[@]}" | sed 's/^conform: ok$/int8: ok/'
fi
