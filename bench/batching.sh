#!/usr/bin/env bash
# Batching against one sequence at a time, and against transformers' own continuous batching,
# in one run on this machine: for each checkpoint,
#   1. tpc bench at concurrency 1 and 8, at tp 1 and tp 2 (one thread per rank);
#   2. transformers' generate_batch (bench/hf_batch.py: paged|sdpa, its KV cache pinned) at
#      concurrency 8 with 1 and 2 threads, the same lengths and as many requests;
# and the ratios issue 28 asks for: concurrency 8 against 1 (goal 4x) and tpc against
# transformers at concurrency 8 with the same threads (goal 1.5x). The checkpoints, in fp32:
# SmolLM2-135M-Instruct (scripts/smollm2.sh) and the ~125M-parameter Llama shape of
# bench/vs_transformers.sh (seeded random weights saved by transformers).
# Usage: bench/batching.sh [PROMPT_LEN] [OUTPUT_LEN] [NUM_PROMPTS]   (after scripts/build.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
prompt_len=${1:-32}
output_len=${2:-64}
num_prompts=${3:-16}
venv=$("$root/scripts/venv.sh")
extras=$("$root/bench/hf_extras.sh" "${TPC_HF_EXTRAS:-$HOME/.cache/tpc-hf-extras}" \
  accelerate==1.15.0 psutil==7.2.2) # generate_batch sizes its CPU cache with psutil
smollm2=$("$root/scripts/smollm2.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py() { HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1 PYTHONPATH=$extras "$venv/bin/python" "$@"; }
export TPC_CACHE_DIR=$work/cache

echo "machine: $(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); tpc $(git -C "$root" rev-parse --short HEAD)"
echo "$num_prompts requests of $prompt_len random prompt tokens and $output_len new tokens" \
  "each, eos ignored, fp32, all arriving at the start"
py "$root/bench/hf_decode.py" make "$work/llama125m" 2>&1 | grep -v "Writing model shards" || true

declare -A rate
for name in smollm2 llama125m; do
  ckpt=$smollm2
  [[ $name == llama125m ]] && ckpt=$work/llama125m
  echo
  echo "== $name ($ckpt)"
  for tp in 1 2; do
    table=$("$tpc" bench "$ckpt" --tp "$tp" --concurrency 1,8 --prompt-len "$prompt_len" \
      --output-len "$output_len" --num-prompts "$num_prompts" 2> /dev/null)
    echo "$table"
    for c in 1 8; do
      rate[$name,tpc$tp,$c]=$(awk -v c="$c" '$1 == c {print $2}' <<< "$table")
    done
  done
  for threads in 1 2; do
    line=$(py "$root/bench/hf_batch.py" "$ckpt" "$prompt_len" "$output_len" "$num_prompts" 8 \
      "$threads" 2> /dev/null)
    echo "$line"
    rate[$name,hf$threads]=$(sed -n 's/.*: \([0-9.]*\) output tok\/s.*/\1/p' <<< "$line")
  done
done

ratio() { echo "scale=2; $1 / $2" | bc -l; }
echo
echo "== the numbers issue 28 asks for (output tokens/s ratios)"
for name in smollm2 llama125m; do
  for tp in 1 2; do
    printf '  %-10s tp %s: concurrency 8 / concurrency 1: %5sx (goal 4x); ' "$name" "$tp" \
      "$(ratio "${rate[$name,tpc$tp,8]}" "${rate[$name,tpc$tp,1]}")"
    printf 'tpc / transformers generate_batch (%s threads) at 8: %5sx (goal 1.5x)\n' "$tp" \
      "$(ratio "${rate[$name,tpc$tp,8]}" "${rate[$name,hf$tp]}")"
  done
done
