#!/usr/bin/env bash
# tpc serve under load, and against transformers serve --continuous-batching, in one run on
# this machine, on SmolLM2-135M-Instruct (fp32, scripts/smollm2.sh), with bench/serve.py
# (vLLM's definitions) over loopback:
#   1. tpc serve (tp 1): concurrency 1 and 8, eos ignored: output tokens/s, c8 against c1
#      (goal 3x);
#   2. tpc bench at concurrency 1 with the same lengths: the engine's own time per output
#      token, against the server's at concurrency 1 (goal: within 1.1x);
#   3. tpc serve and transformers serve (its extra packages pinned beside the venv,
#      bench/hf_extras.sh), one after the other, at concurrency 8 on the same prompts, greedy,
#      ending where the model ends them (transformers serve refuses ignore_eos): output
#      tokens/s, tpc against transformers (goal 1.2x). Both use this machine's cores (tpc's
#      BLAS and torch each take them all).
# Usage: bench/serve.sh [INPUT_WORDS] [OUTPUT_LEN] [NUM_PROMPTS]   (after scripts/build.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tpc=${TPC:-$root/build/bin/tpc}
input_words=${1:-32}
output_len=${2:-64}
num_prompts=${3:-16}
venv=$("$root/scripts/venv.sh")
extras=$("$root/bench/hf_extras.sh" "${TPC_HF_SERVE_EXTRAS:-$HOME/.cache/tpc-hf-serve}" \
  accelerate==1.15.0 psutil==7.2.2 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.55.0 \
  requests==2.34.2 urllib3==2.8.0 charset-normalizer==3.5.3 annotated-doc==0.0.7 h11==0.16.0 \
  opentelemetry-api==1.45.2)
ckpt=$("$root/scripts/smollm2.sh")
work=$(mktemp -d)
server=""
stop() {
  if [[ -n $server ]]; then
    kill -TERM "$server" 2> /dev/null || true
    wait "$server" 2> /dev/null || true
  fi
  server=""
}
trap 'stop; rm -rf "$work"' EXIT
export TPC_CACHE_DIR=$work/cache
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
healthy() {
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$1/health" > /dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "the server on port $1 never became healthy" >&2
  exit 1
}
bench() { python3 "$root/bench/serve.py" --num-prompts "$num_prompts" --input-len "$input_words" \
  --output-len "$output_len" --json "$work/results.jsonl" "$@"; }

echo "machine: $(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); tpc $(git -C "$root" rev-parse --short HEAD)"
echo "$num_prompts requests of $input_words random words, up to $output_len new tokens, greedy," \
  "streamed, all arriving at the start; SmolLM2-135M-Instruct fp32"

p=$(port)
"$tpc" serve "$ckpt" --port "$p" --max-model-len 512 --max-num-seqs 8 > "$work/tpc.log" 2>&1 &
server=$!
healthy "$p"
echo
echo "== tpc serve (tp 1), eos ignored"
bench --base-url "http://127.0.0.1:$p" --model ckpt --max-concurrency 1 --label "tpc serve ignore_eos"
bench --base-url "http://127.0.0.1:$p" --model ckpt --max-concurrency 8 --label "tpc serve ignore_eos"
echo
echo "== tpc serve (tp 1), greedy to the end"
bench --base-url "http://127.0.0.1:$p" --model ckpt --max-concurrency 8 --no-ignore-eos \
  --label "tpc serve"
prompt_tokens=$(curl -s "http://127.0.0.1:$p/v1/completions" -d "{\"prompt\": \"$(python3 -c "
import random; r = random.Random(0)
w = 'the river ran past an old mill where a baker counted loaves while children argued about clouds numbers music and the best way to fold paper boats before the evening bell rang across seven quiet hills'.split()
print(' '.join(r.choice(w) for _ in range($input_words)).capitalize())")\", \"max_tokens\": 1}" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["usage"]["prompt_tokens"])')
stop
echo
echo "== tpc bench (the engine without the server), $prompt_tokens prompt tokens"
"$tpc" bench "$ckpt" --concurrency 1 --prompt-len "$prompt_tokens" --output-len "$output_len" \
  --num-prompts 4 2> /dev/null | tee "$work/engine.txt"

echo
echo "== transformers serve --continuous-batching (fp32, cpu), greedy to the end"
p=$(port)
PYTHONPATH=$extras HF_HUB_OFFLINE=1 "$venv/bin/transformers" serve "$ckpt" --continuous-batching \
  --device cpu --dtype float32 --port "$p" > "$work/hf.log" 2>&1 &
server=$!
healthy "$p"
bench --base-url "http://127.0.0.1:$p" --model "$ckpt" --max-concurrency 8 --no-ignore-eos \
  --label "transformers serve"
stop

echo
echo "== the numbers issue 29 asks for"
python3 - "$work/results.jsonl" "$work/engine.txt" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
get = lambda label, c: next(r for r in rows if r["label"] == label and r["max_concurrency"] == c)
c1, c8 = get("tpc serve ignore_eos", 1), get("tpc serve ignore_eos", 8)
print("tpc serve output tok/s, c8 / c1: %.1f / %.1f = %.2fx (goal 3x)" % (
    c8["output_throughput"], c1["output_throughput"],
    c8["output_throughput"] / c1["output_throughput"]))
engine = [l.split() for l in open(sys.argv[2]) if l.split() and l.split()[0] == "1"][0]
tpot = float(engine[5].rstrip("ms"))
print("time per output token at c1, server / engine: %.1f / %.1f ms = %.2fx (goal within 1.1x)"
      % (c1["tpot_ms"]["median"], tpot, c1["tpot_ms"]["median"] / tpot))
t, h = get("tpc serve", 8), get("transformers serve", 8)
print("c8 output tok/s, tpc serve / transformers serve: %.1f / %.1f = %.2fx (goal 1.2x; %d and "
      "%d tokens)" % (t["output_throughput"], h["output_throughput"],
                      t["output_throughput"] / h["output_throughput"], t["output_tokens"],
                      h["output_tokens"]))
EOF
