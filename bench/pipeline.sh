#!/usr/bin/env bash
# Pipeline stages on one host: output tokens per second of the real SmolLM2-135M-Instruct
# through the engine (tpc bench) at concurrency 1 and 8, with one core per stage: pp 1 (one
# rank) against pp 2 (two ranks, a step in each stage at once), and tp 2 (the same two cores
# splitting every layer) beside them. Two workloads: decode-heavy (32 prompt tokens, 128 new)
# and prefill-heavy (256 prompt tokens, 32 new); then long prompts (512 tokens, 16 new) at
# concurrency 8, where the multiply-adds bound a step, with the layers also split evenly
# (--pp-split N/2,N/2: the default balances a decode step's reads, and the last stage's lm_head
# reads much but computes little in a prefill). Each mesh's runs follow one another in one go,
# on a machine otherwise quiet; the ratios are what to read.
#   bash bench/pipeline.sh [CKPT]     (default: ~/.cache/tpc-smollm2/ckpt)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tpc=${TPC:-$here/../build/bin/tpc}
ckpt=${1:-$HOME/.cache/tpc-smollm2/ckpt}
export TPC_CACHE_DIR=${TPC_CACHE_DIR:-$(mktemp -d)}
echo "# bash bench/pipeline.sh $ckpt  ($(date -u +%Y-%m-%d), $(nproc) cores)"
for work in "32 128" "256 32"; do
  set -- $work
  echo
  echo "## $1 prompt tokens, $2 new tokens, 16 requests"
  for mesh in "--pp 1" "--pp 2" "--tp 2"; do
    # shellcheck disable=SC2086 # the mesh's two words
    "$tpc" bench "$ckpt" $mesh --concurrency 1,8 --prompt-len "$1" --output-len "$2" \
      --num-prompts 16 2>/dev/null
  done
done

layers=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['num_hidden_layers'])" \
  "$ckpt/config.json")
even="$((layers / 2)),$((layers - layers / 2))"
echo
echo "## 512 prompt tokens, 16 new tokens, 16 requests, concurrency 8"
for mesh in "--pp 1" "--pp 2" "--pp 2 --pp-split $even" "--tp 2"; do
  # shellcheck disable=SC2086 # the mesh's words
  "$tpc" bench "$ckpt" $mesh --concurrency 8 --prompt-len 512 --output-len 16 --num-prompts 16 \
    2>/dev/null
done
