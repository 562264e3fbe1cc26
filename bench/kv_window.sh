#!/usr/bin/env bash
# What keeping only a sliding window's blocks saves at a long context (issue 48, item 5; KV
# groups, docs/engine.md): Gemma 3 270M's layers (18, each sixth global, the others a window of
# 512; 1 KV head of 256), with a 32000-token vocabulary so that the attention's share of a
# decode step shows, random weights, tp 1. The same model twice: as configured, and with a
# window of 8192 (longer than the context: every layer reads, and keeps, every key). Each
# decodes NEW tokens after a prompt of PROMPT tokens, RUNS times alternately; prints every
# run's per-token decode ms, each side's median, and the KV cache each allocates for the same
# --kv-cache-tokens (its --trace).
# Usage: bench/kv_window.sh [RUNS] [PROMPT] [NEW]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3} prompt_len=${2:-4000} new_tokens=${3:-32}
tpc=${TPC:-$root/build/bin/tpc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for side in a b; do # a: as configured; b: every key
  window=512
  [ $side = b ] && window=8192
  mkdir -p "$work/$side"
  cat > "$work/$side/config.json" <<JSON
{"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 640,
 "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4,
 "num_key_value_heads": 1, "head_dim": 256, "sliding_window": $window,
 "sliding_window_pattern": 6, "vocab_size": 32000, "max_position_embeddings": 32768,
 "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": null,
 "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "hidden_activation": "gelu_pytorch_tanh",
 "tie_word_embeddings": true, "bos_token_id": 2, "eos_token_id": 1}
JSON
  "$tpc" import "$work/$side/config.json" -o "$work/$side/model.mlir" > /dev/null 2>&1
  "$tpc" compile "$work/$side/model.mlir" --plan auto --tp 1 -o "$work/$side/tp1" > /dev/null 2>&1
done
prompt=$(python3 -c "print(','.join(str((7 * i + 3) % 31000 + 10) for i in range($prompt_len)))")
source "$root/bench/ab.sh"
decode_ms() { # decode_ms SIDE: one run of the side's binary
  "$work/$1/tp1/gemma3_text" --random-weights 1 --prompt-ids "$prompt" --max-new-tokens "$new_tokens" \
    --ignore-eos --max-model-len 4096 --trace "$work/$1/trace.json" > "$work/$1/out.txt"
  grep -h "^prefill" "$work/$1/out.txt" >&2
  sed -n 's/.*decode: \([0-9.]*\) ms per token.*/\1/p' "$work/$1/out.txt"
}
ab_interleave "$runs" decode_ms
for side in a b; do
  name="a (window 512)"
  [ $side = b ] && name="b (every key)"
  echo "$name: median $(ab_median $side) ms/token over $runs runs; KV cache" \
    "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['kv_cache_bytes'])" \
      "$work/$side/trace.json") bytes for --kv-cache-tokens 4096"
done
