#!/usr/bin/env bash
# Conformance of one architecture against transformers 5.17 (CPU, fp32), end to end:
#   run_arch.sh TPC_BIN_DIR VENV_PYTHON TORCHRUN ARCH OUT [--ep]
# transformers builds a tiny random model and its reference (hf_model.py); tpc imports the
# saved checkpoint's config.json, compiles it with --plan auto at tp 1, 2 and 4 and runs it on
# the checkpoint directory as saved. Prints conform.py's and compare_collectives.py's verdicts.
set -euo pipefail
bin=$1 py=$2 torchrun=$3 arch=$4 out=$5 ep=${6:-}
fewer=""
[[ $arch == phi3 || $arch == olmo2 ]] && fewer=--fewer # tpc folds transformers' gather + split-input pairs
here=$(cd "$(dirname "$0")" && pwd)
tpc=$bin/tpc
hf=$out/hf

"$py" "$here/hf_model.py" "$arch" "$hf" > "$out/hf_model.log"
prompt=$(cat "$hf/prompt.txt") force=$(cat "$hf/force.txt")
"$tpc" import "$hf/config.json" -o "$out/model.mlir"
model=$(sed -n 's/^module @\([A-Za-z0-9_]*\).*/\1/p' "$out/model.mlir") # the binary's (gemma3_text)

plan=auto
[[ $ep == --ep ]] && plan=auto-ep
run() { # run TP NAME [EXTRA...]: 16 new tokens on the checkpoint, eos ignored as in the reference
  local tp=$1 name=$2
  shift 2
  "$tpc" launch -n "$tp" "$out/tp$tp/$model" --weights "$hf" --prompt-ids "$prompt" \
    --max-new-tokens 16 --ignore-eos --dump-logits "$out/$name.bin" "$@" > "$out/$name.txt"
}
for tp in 1 2 4; do
  "$tpc" compile "$out/model.mlir" --plan $plan --tp $tp -o "$out/tp$tp" > "$out/compile$tp.log" 2>&1
  run $tp forced$tp --force-ids "$force"
  run $tp free$tp
done

# tp 1 and 2 against transformers: logits under teacher forcing, then free-running greedy.
python3 "$here/conform.py" "$hf" "$out/forced1.bin" "$out/forced2.bin" \
  --free "$out/free1.bin" "$out/free2.bin"
# tp 4 exceeds the 2 KV heads: transformers' colwise k_proj/v_proj would hand each rank half a
# head and fail; tpc repeats each KV head over 2 ranks (virtual KV heads). Checked against
# transformers' single-process reference, and against tpc's own tp 1 run.
python3 "$here/conform.py" "$hf" "$out/forced4.bin" --free "$out/free4.bin"
python3 "$here/conform.py" - "$out/free4.bin" --against-run "$out/free1.bin"

# Collectives at tp 2: what transformers' own tensor parallelism issues (measured with
# CommDebugMode on a 2-rank Gloo run), against tpc's trace and analyze's prediction.
# Where transformers' TP fails, hf_collectives.py says so in its JSON ("runs": false) and
# compare_collectives.py holds analyze to predicting that failure.
env -u TPC_RENDEZVOUS_DIR "$torchrun" --standalone --nproc-per-node 2 "$here/hf_collectives.py" \
  "$hf" "$out/hf-collectives.json" --prompt-len 8 --new-tokens 3 ${ep:+--expert-parallel} \
  > "$out/hf-collectives.log" 2>&1 ||
  [[ -s $out/hf-collectives.json ]] || { cat "$out/hf-collectives.log"; exit 1; }
"$tpc" analyze "$out/model.mlir" --plan $plan --tp 2 --prefill-len 8 --json \
  > "$out/analyze.json" 2> /dev/null
"$tpc" launch -n 2 "$out/tp2/$model" --weights "$hf" --prompt-ids "$prompt" --max-new-tokens 3 \
  --ignore-eos --trace "$out/trace.json" > /dev/null
python3 "$here/compare_collectives.py" $fewer "$out/hf-collectives.json" "$out/analyze.json" \
  "$out/trace.json.rank0"
