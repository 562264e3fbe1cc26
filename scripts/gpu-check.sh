#!/usr/bin/env bash
# The GPU check of the CUDA target, in two steps (docs/gpu-check.md: the GPU machine has nvcc,
# PyTorch and transformers with their NCCL and cuBLAS wheels, but no LLVM, Gloo or OpenBLAS,
# and no network):
#
#   scripts/gpu-check.sh bundle [DIR]   on this (CPU) machine, after scripts/build.sh: compiles
#                                       the example for --target cuda at tp 1, 2 and 4, runs
#                                       the CPU target for reference logits and tokens, and
#                                       packs the binaries and the shared libraries they need
#                                       (not NCCL, cuBLAS: the GPU machine's own) into DIR
#                                       (default gpu-bundle/, git-ignored; binaries and
#                                       libraries as DIR/payload.tgz), at most 64 MiB.
#   scripts/gpu-check.sh run [DIR]      on the GPU machine, from the repository root: runs the
#                                       stages below with the machine's NCCL and cuBLAS wheels
#                                       on LD_LIBRARY_PATH; each stage's result goes to
#                                       DIR/results/STAGE.txt and a stage whose result exists
#                                       is skipped, so a rerun resumes. Prints each stage's
#                                       time and the total (also in DIR/results/times.txt).
#                                       After every stage, DIR/results (logits dumps over
#                                       1 MiB left out) is packed into one archive,
#                                       $OUT/gpu-check-results.tgz when OUT is set, so a run
#                                       stopped from outside still brings back what it did.
#                                       TPC_GPU_CHECK_DEADLINE=S: the stages of this run end
#                                       within S seconds (each stage's limit is cut to what
#                                       is left); the stages there is no time for are skipped
#                                       and named, and the run exits 3. TPC_GPU_CHECK_RESUME=
#                                       ARCHIVE: the results of an earlier run, unpacked
#                                       first, so a fresh machine with the bundle and that
#                                       archive runs only what is missing.
#
# The dry run, on this machine: TPC_GPU_CHECK_DRY_RUN=1 makes `bundle` build every binary for
# the CPU target instead (and the benchmark's model small: bench/llama3-tiny-config.json), and
# `run` then goes through every stage with them (bench/gpu_bench.py on --device cpu, with the
# Python of TPC_PYTHON, e.g. the test venv): the script, the comparisons and the results it
# brings back are checked before a GPU is spent on them; the stage times say what is not the
# GPU's (process starts, imports, the CPU side).
#
# Stages: env (a one-kernel probe, the driver, the libraries); example-tp1 (one rank: NCCL has
# nothing to do; decode steps replay a CUDA graph) and example-tp1-eager (TPC_CUDA_GRAPHS=0);
# graph-eager (their forced logits, and a --warmup run's, identical byte for byte);
# device-fault (an injected illegal address is reported as a CUDA error, no peer blamed);
# example-tp1-own-gemm (TPC_CUDA_GEMM=tpc: tpc's own GEMM, where cuBLASLt has no algorithm);
# negative-control (TPC_FAULT=perturb: a subtly wrong attention must fail the comparison);
# attention-MODEL (bench/gpu-check/'s models at head_dim 64, 80, 96, 128 and 256, every
# specialisation of the tensor-core prefill, over a 150-token prompt; and the split decode);
# batched (steps of several sequences: twelve requests eight at once, and in prefill chunks
# with preemptions, against one at a time and the CPU target's answers); draws (seeded sampled
# requests whose tokens the device picks, against the same requests sampled on the host from
# the same logits);
# example-tp2-gloo and example-tp4-gloo (TPC_CUDA_COMM=gloo: ranks sharing the one GPU, which
# NCCL refuses). Each compares with the CPU target's run on the same generated weights
# (scripts/gpu-compare.py states the bf16 tolerance); bench (below: decode and prefill of a
# Llama-3-8B-shaped model against the measured roofline, peak and transformers' eager
# generate); per-rank (one rank of tp 2, 4 and 8 alone with a no-op communicator, plus
# modelled NCCL time: bench/per_rank_model.py states the model).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
step=${1:-}
dir=$(realpath -m "${2:-$root/gpu-bundle}")
py=${TPC_PYTHON:-python3} # the GPU machine's, which has torch and transformers
prompt=1,15,42,7,99,3,64,200
long_prompt=$(seq -s, 2 151) # 150 tokens: three 64-row prefill blocks, the last one partial
new_tokens=16
seed=3
batched_model=gemma2-sharp-hd128 # the batched stage's: attention sharp enough to show a wrong key

model_name() { # the module's name, which names the binary
  sed -n 's/^module @\([A-Za-z0-9_]*\).*/\1/p' "$1" | head -n 1
}

bundle() {
  local tpc=$root/build/bin/tpc target=(--target cuda)
  local bench_config=$root/bench/llama3-8b-config.json
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib" "$dir/ref"
  if [[ ${TPC_GPU_CHECK_DRY_RUN:-} == 1 ]]; then
    target=()
    bench_config=$root/bench/llama3-tiny-config.json
    echo "a dry run's bundle: CPU binaries, the benchmark on $(basename "$bench_config")" \
      > "$dir/dry-run"
  fi
  for tp in 1 2 4; do
    "$tpc" compile "$root/examples/model.mlir" --plan auto --tp $tp "${target[@]}" \
      -o "$dir/build$tp" > "$dir/build$tp.log" 2>&1 || { cat "$dir/build$tp.log"; exit 1; }
    cp "$dir/build$tp/llama" "$dir/bin/llama-tp$tp"
  done
  # The reference: the CPU target at tp 1 on the same generated weights, free-running.
  "$tpc" compile "$root/examples/model.mlir" --plan auto --tp 1 -o "$dir/cpu" > /dev/null 2>&1
  "$dir/cpu/llama" --random-weights $seed --prompt-ids $prompt --max-new-tokens $new_tokens \
    --ignore-eos --dump-logits "$dir/ref/cpu.bin" > "$dir/ref/cpu.txt"
  # The benchmark's model (Llama-3-8B's shapes), compiled for tp 1, and for 2, 4 and 8 for the
  # per-rank view: one rank of each, alone.
  cp "$bench_config" "$dir/bench-config.json"
  "$tpc" import "$dir/bench-config.json" -o "$dir/bench.mlir" > /dev/null
  for tp in 1 2 4 8; do
    "$tpc" compile "$dir/bench.mlir" --plan auto --tp $tp "${target[@]}" \
      -o "$dir/build-bench$tp" > "$dir/build-bench$tp.log" 2>&1 ||
      { cat "$dir/build-bench$tp.log"; exit 1; }
    cp "$dir/build-bench$tp/$(model_name "$dir/bench.mlir")" "$dir/bin/bench-tp$tp"
  done
  # Attention-shaped models (bench/gpu-check/: head_dim 64 with a GQA group of 4 and q/k/v
  # biases, 80 without GQA, 96 (Phi-3: fused projections, a sliding window), 128 with a
  # sliding window and softcaps, and again with sharp attention (query_pre_attn_scalar 0.01:
  # scores 11x larger, the softcap of 50 reached), 256 with one KV head) and a prompt longer than two prefill
  # tiles: each tensor-core prefill specialisation and the split decode against the CPU.
  local m
  for config in "$root"/bench/gpu-check/*.json; do
    m=$(basename "$config" .json)
    "$tpc" import "$config" -o "$dir/$m.mlir" > /dev/null
    "$tpc" compile "$dir/$m.mlir" --plan auto --tp 1 -o "$dir/cpu-$m" > /dev/null 2>&1
    "$dir/cpu-$m/$(model_name "$dir/$m.mlir")" --random-weights $seed --prompt-ids "$long_prompt" \
      --max-new-tokens $new_tokens --ignore-eos --dump-logits "$dir/ref/$m.bin" > "$dir/ref/$m.txt"
    if [[ $m == "$batched_model" ]]; then # the batched stage's requests, and the CPU's answers
      python3 "$root/test/e2e/Inputs/batch_requests.py" 12 7 512 100 --shared --greedy \
        > "$dir/requests.jsonl"
      # The draws stage's: sampled, with no log-probabilities (the device picks) and with
      # them (the logits come back to the host's sampler).
      python3 "$root/test/e2e/Inputs/batch_requests.py" 20 11 512 60 --sampled --logprobs -1 \
        > "$dir/draws-device.jsonl"
      python3 "$root/test/e2e/Inputs/batch_requests.py" 20 11 512 60 --sampled --logprobs 0 \
        > "$dir/draws-host.jsonl"
      "$dir/cpu-$m/$(model_name "$dir/$m.mlir")" --random-weights $seed --max-model-len 256 \
        --requests "$dir/requests.jsonl" --output "$dir/ref/requests.jsonl" --max-num-seqs 1 \
        2> /dev/null
    fi
    "$tpc" compile "$dir/$m.mlir" --plan auto --tp 1 "${target[@]}" -o "$dir/build-$m" \
      > "$dir/build-$m.log" 2>&1 || { cat "$dir/build-$m.log"; exit 1; }
    cp "$dir/build-$m/$(model_name "$dir/$m.mlir")" "$dir/bin/$m-tp1"
    rm -rf "$dir/cpu-$m" "$dir/$m.mlir"
  done
  cp "$root/bench/gpu_bench.py" "$root/bench/per_rank_model.py" "$dir/"
  rm -rf "$dir"/build* "$dir/cpu" "$dir/bench.mlir"
  # Shared libraries the binaries need that the GPU machine's image lacks (Gloo, OpenBLAS and
  # theirs); its own libc, libstdc++, NCCL and cuBLAS stay.
  ldd "$dir/bin/llama-tp1" | awk '/=>/ {print $3}' |
    grep -v -E 'lib(c|m|stdc\+\+|gcc_s|pthread|dl|rt)\.so|libnccl|libcublas' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  # The env stage's probe, linked as the binaries are (their cuBLASLt and NCCL by the names
  # they ask for, the same search path), but loading those itself so it can say which is
  # missing.
  local needed
  if [[ ! -f $dir/dry-run ]]; then
    needed=$(objdump -p "$dir/bin/llama-tp1" | awk '/NEEDED/ {print $2}')
    /usr/local/cuda/bin/nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a \
      -DTPC_PROBE_CUBLASLT="\"$(grep -m1 cublasLt <<< "$needed")\"" \
      -DTPC_PROBE_NCCL="\"$(grep -m1 nccl <<< "$needed")\"" "$root/scripts/gpu-probe.cu" \
      -ldl -Xlinker -rpath=/usr/local/cuda/lib64 -o "$dir/bin/cuda-probe"
  fi
  cp "$root/scripts/gpu-check.sh" "$root/scripts/gpu-compare.py" \
    "$root/scripts/gpu-requests-compare.py" "$root/test/e2e/Inputs/same_results.py" "$dir/"
  # Binaries and libraries travel compressed (OpenBLAS alone is 36 MiB); run unpacks them.
  tar czf "$dir/payload.tgz" -C "$dir" bin lib
  rm -rf "$dir/bin" "$dir/lib"
  local size
  size=$(du -sb "$dir" | cut -f1)
  echo "bundle: $dir, $((size / 1024 / 1024)) MiB"
  if ((size > 64 * 1024 * 1024)); then
    echo "bundle: over the 64 MiB a device call carries" >&2
    exit 1
  fi
}

# run_ranks N BINARY ARGS...: N local ranks meeting in a fresh directory (no tpc launch there:
# it links LLVM). Fails when any rank fails.
run_ranks() {
  local n=$1 rendezvous
  shift
  rendezvous=$(mktemp -d)
  local pids=() status=0
  for ((r = 0; r < n; ++r)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r TPC_RENDEZVOUS_DIR=$rendezvous "$@" \
      > "$rendezvous/out$r" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  cat "$rendezvous/out0"
  ((status == 0)) || { tail -n 5 "$rendezvous"/out* >&2; rm -rf "$rendezvous"; return 1; }
  rm -rf "$rendezvous"
}

seconds_since() { # seconds_since START_NS: the seconds since then, to 0.1 s
  local ns=$(($(date +%s%N) - $1))
  printf '%d.%d' $((ns / 1000000000)) $((ns / 100000000 % 10))
}

# stage NAME COMMAND...: runs unless DIR/results/NAME.txt exists; says how long it took. A
# stage gets at most $stage_limit seconds (else TPC_GPU_CHECK_STAGE_LIMIT, else 120; its
# processes are killed then): a rank alone has no deadline of its own, and a hung kernel must
# not take the rest of the device's time. Stage functions run in a child bash, so run()
# exports them and the settings they read.
stage() {
  local name=$1 result=$dir/results/$1.txt limit=${stage_limit:-${TPC_GPU_CHECK_STAGE_LIMIT:-120}}
  shift
  if [[ -f $result ]]; then
    echo "== $name: done before ($(tail -n 1 "$result"))"
    return 0
  fi
  # The run's deadline: a stage gets what is left of it, and none under 10 s of it.
  if ((deadline > 0)); then
    local left=$((deadline - ($(date +%s) - run_start)))
    if ((left < 10)); then
      echo "== $name: skipped (${left} s left of the run's deadline of $deadline s)"
      skipped+=("$name")
      return 0
    fi
    if awk -v a="$left" -v b="$limit" 'BEGIN { exit !(a < b) }'; then
      limit=$left
    fi
  fi
  echo "== $name"
  local log start took status=0
  log=$(mktemp)
  start=$(date +%s%N)
  timeout -k 10 "$limit" bash -c '"$@"' "$name" "$@" > "$log" 2>&1 || status=$?
  ((status == 124 || status == 137)) && echo "$name: stopped after its limit of $limit s" >> "$log"
  if ((status == 0)); then
    took=$(seconds_since "$start")
    mv "$log" "$result"
    echo "$name $took s ok" >> "$dir/results/times.txt"
    echo "   $(tail -n 1 "$result") [$took s]"
  else
    took=$(seconds_since "$start")
    cp "$log" "$dir/results/$name.failed.txt"
    echo "$name $took s FAILED" >> "$dir/results/times.txt"
    echo "   FAILED after $took s (log in results/$name.failed.txt):"
    tail -n 8 "$log" | sed 's/^/   /'
    pack_results
    return 1
  fi
  pack_results
}

# The results so far as one archive in $OUT (written aside, then renamed: a run killed while
# packing leaves the previous one whole). The logits dumps over 1 MiB stay behind; the small
# ones that later stages read (graph-eager's) travel.
pack_results() {
  [[ -n ${OUT:-} ]] || return 0
  mkdir -p "$OUT"
  (cd "$dir" && find results -maxdepth 1 -type f ! \( -name '*.bin' -size +1024k \) |
    sort | tar czf "$OUT/gpu-check-results.tgz.part" -T -) &&
    mv "$OUT/gpu-check-results.tgz.part" "$OUT/gpu-check-results.tgz"
}

# The machine, before anything runs on it: the probe (scripts/gpu-probe.cu: the cuBLASLt and
# NCCL files the binaries resolve and their versions, the driver, the device, one kernel),
# then the driver and GPU as nvidia-smi reports them and every library the binaries load.
env_stage() { # (stages run where set -e does not reach: each step says || return 1)
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  if [[ -f $dir/dry-run ]]; then
    cat "$dir/dry-run"
    ldd "$dir/bin/llama-tp1" | grep -E 'gloo|openblas|not found'
    echo "env: dry run, no GPU to probe"
    return 0
  fi
  "$dir/bin/cuda-probe" || return 1
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv ||
    return 1
  echo "the binaries' libraries (ldd bin/llama-tp1):"
  ldd "$dir/bin/llama-tp1" | grep -E 'nccl|cublas|cudart|gloo|openblas|not found'
  if ldd "$dir/bin/llama-tp1" | grep -q 'not found'; then
    echo "env: a library the binaries need is missing"
    return 1
  fi
  echo "env: ok"
}

forced_ids() { # forced_ids REF: the CPU run's tokens, to feed the decode steps
  sed -n 's/^tokens: //p' "$1" | tr ' ' ',' | cut -d, -f1-$((new_tokens - 1))
}

# compare NAME BINARY REF PROMPT TP [COMM]: the binary free-running and fed the CPU's tokens,
# compared with the CPU run ref/REF.{bin,txt}.
compare() {
  local out=$dir/results/$1 bin=$2 ref=$dir/ref/$3 ids=$4 tp=$5 comm=${6:-nccl}
  local force
  force=$(forced_ids "$ref.txt")
  TPC_CUDA_COMM=$comm run_ranks "$tp" "$bin" --random-weights $seed \
    --prompt-ids "$ids" --max-new-tokens $new_tokens --ignore-eos \
    --dump-logits "$out-free.bin" > "$out-free.txt" || return 1
  TPC_CUDA_COMM=$comm run_ranks "$tp" "$bin" --random-weights $seed \
    --prompt-ids "$ids" --max-new-tokens $new_tokens --ignore-eos --force-ids "$force" \
    --dump-logits "$out-forced.bin" > "$out-forced.txt" || return 1
  cat "$out-free.txt"
  "$py" "$dir/gpu-compare.py" "$ref.bin" "$ref.txt" \
    "$out-forced.bin" "$out-forced.txt" "$out-free.txt"
}

example_stage() { # example_stage TP [COMM [TAG]]
  compare "example-tp$1${3:+-$3}" "$dir/bin/llama-tp$1" cpu $prompt "$1" "${2:-nccl}"
}

attention_stage() { # attention_stage MODEL: one rank, NCCL idle, the decode graph on
  compare "attention-$1" "$dir/bin/$1-tp1" "$1" "$long_prompt" 1
}

# The decode graph replays the eager steps' kernels with the same split counts and cuBLASLt
# algorithms, so example-tp1's forced logits must be example-tp1-eager's bit for bit (cmp, not
# a tolerance); and a --warmup run's (throwaway forwards, emptied caches, every decode step a
# replay) the same again.
graph_eager_stage() {
  local r=$dir/results
  cmp "$r/example-tp1-forced.bin" "$r/example-tp1-eager-forced.bin" || return 1
  echo "graph and eager: forced logits identical ($(wc -c < "$r/example-tp1-forced.bin") bytes)"
  "$dir/bin/llama-tp1" --random-weights $seed --prompt-ids $prompt --max-new-tokens $new_tokens \
    --ignore-eos --force-ids "$(forced_ids "$dir/ref/cpu.txt")" --warmup \
    --dump-logits "$r/example-tp1-warm-forced.bin" || return 1
  cmp "$r/example-tp1-forced.bin" "$r/example-tp1-warm-forced.bin" || return 1
  echo "graph-eager: identical, and with --warmup too"
}

# The negative control: rank 0's attention with its scale 1/32 too large (TPC_FAULT=perturb,
# a subtly wrong kernel) must fail the comparison that the right kernels pass, on the logits
# and not because a run failed; a comparison that lets it through is not sharp enough. It
# runs on the model whose attention is sharp (gemma2-sharp-hd128: logits ~11x the usual
# scale, the softcap reached), where a wrong scale shows: on the example's random weights
# attention is nearly uniform, and the same fault moved the logits by 0.2% of their scale.
negative_control_stage() {
  local control=$dir/results/negative-control # (run_ranks's loop sets a caller's r)
  if TPC_FAULT=perturb:rank=0 compare negative-control "$dir/bin/gemma2-sharp-hd128-tp1" \
    gemma2-sharp-hd128 "$long_prompt" 1; then
    echo "negative-control: the perturbed attention passed the comparison: it is not sharp enough"
    return 1
  fi
  if [[ ! -s $control-forced.bin || ! -s $control-free.txt ]]; then
    echo "negative-control: a run failed, so the comparison said nothing"
    return 1
  fi
  echo "negative-control: the perturbed attention failed the comparison, as it must"
}

# Batched steps: the sharp model's twelve greedy requests (prompts of 2 to 140 tokens, most
# beginning with one of three shared prefixes, so the prefix cache hands sequences each
# other's blocks) run one at a time, eight at once (decode rows of several sequences in one
# split-KV launch), and four at once in prefill chunks of 16 tokens beside the decodes in a
# cache of 256 tokens, too small for them (preemptions: blocks reused in another order); its
# sliding-window layers keep only their window's blocks (KV groups).
# Each run against the one at a time, and that against the CPU target's answers
# (scripts/gpu-requests-compare.py: log-probabilities within its tolerance, a different token
# only at a near tie).
batched_stage() {
  local out=$dir/results/batched bin=$dir/bin/$batched_model-tp1 run
  local common=(--random-weights $seed --requests "$dir/requests.jsonl" --max-model-len 256)
  for run in "alone --max-num-seqs 1" "eight" \
    "chunked --max-num-seqs 4 --max-batch-tokens 16 --kv-cache-tokens 256"; do
    set -- $run
    local name=$1
    shift
    "$bin" "${common[@]}" --output "$out-$name.jsonl" "$@" 2> "$out-$name.err" ||
      { cat "$out-$name.err"; return 1; }
    echo "$name: $(grep -o '[0-9]* requests: .*' "$out-$name.err")"
  done
  echo "the CUDA target one at a time against the CPU target:"
  "$py" "$dir/gpu-requests-compare.py" "$dir/ref/requests.jsonl" "$out-alone.jsonl" || return 1
  for run in eight chunked; do
    echo "$run against one at a time:"
    "$py" "$dir/gpu-requests-compare.py" "$out-alone.jsonl" "$out-$run.jsonl" || return 1
  done
  echo "batched: eight at once and chunked with preemptions answer as one at a time, and as the CPU"
}

# Sampling on the device: twenty seeded requests (temperature 0.8 with top_k, top_p, min_p,
# each alone and together), eight at once, whose tokens the device picks from each row's draw
# (runtime/cuda/draw.h), against the same requests asking for log-probabilities, whose rows
# come back to the host's Sampler with the same seeds. The same steps over the same logits:
# every token must be the same (test/e2e/Inputs/same_results.py), a difference is the device
# sampler's. (On CPU binaries the host samples both.)
draws_stage() {
  local out=$dir/results/draws bin=$dir/bin/$batched_model-tp1 run
  for run in device host; do
    "$bin" --random-weights $seed --requests "$dir/draws-$run.jsonl" --max-model-len 256 \
      --max-num-seqs 8 --output "$out-$run.jsonl" 2> "$out-$run.err" ||
      { cat "$out-$run.err"; return 1; }
    echo "$run: $(grep -o '[0-9]* requests: .*' "$out-$run.err")"
  done
  "$py" "$dir/same_results.py" "$out-device.jsonl" "$out-host.jsonl" || return 1
  echo "draws: the device's picks are the host sampler's"
}

# A device fault (TPC_FAULT=device: a kernel writes through a null pointer at decode step 2)
# is reported as CUDA's, with what was running, and blames no peer.
device_fault_stage() {
  local out
  if out=$(TPC_FAULT=device:rank=0:step=2 "$dir/bin/llama-tp1" --random-weights $seed \
    --prompt-ids $prompt --max-new-tokens $new_tokens --ignore-eos 2>&1); then
    echo "$out"
    echo "device-fault: the run did not fail"
    return 1
  fi
  echo "$out"
  # The fault surfaces at the next call that checks the device: a CUDA call's check, or a
  # cuBLASLt call that meets the faulted context first (then its status string).
  local expected="(CUDA|cuBLASLt) error in .*"
  [[ -f $dir/dry-run ]] && expected="TPC_FAULT: device faults need a device \\(--target cuda\\)"
  grep -Eq "error: rank 0: $expected \(while running llama, decode step 2\)" <<< "$out" ||
    { echo "device-fault: not reported as a CUDA error of decode step 2"; return 1; }
  if grep -q peer <<< "$out"; then
    echo "device-fault: a peer is blamed"
    return 1
  fi
  echo "device-fault: reported as CUDA's, no peer blamed"
}

bench_ids() { # bench_ids N: the benchmark's first N token ids, as bench/gpu_bench.py makes them
  local vocab
  vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$dir/bench-config.json")
  "$py" "$dir/gpu_bench.py" ids "$1" "$vocab"
}

# Decode of the Llama-3-8B-shaped model at tp 1, batch 1, after a 1024-token prompt (generated
# weights, seed 1), fed the benchmark's next ids (teacher forcing: its logits are compared with
# transformers'), and a 512-token prefill, both with --warmup (the times of a warm process: the
# median of 3 prefills, the median decode step); then bench/gpu_bench.py builds transformers'
# model with the same weights, checks its logits against tpc's, and only then measures the
# ceilings and transformers' eager generate and states the ratios and bars.
bench_stage() {
  local context=1024 new=64 prefill=512 bin=$dir/bin/bench-tp1 out ids device=cuda
  [[ -f $dir/dry-run ]] && device=cpu
  ids=$(bench_ids $((context + new - 1))) || return 1
  out=$("$bin" --random-weights 1 --prompt-ids "$(cut -d, -f1-$context <<< "$ids")" \
    --force-ids "$(cut -d, -f$((context + 1))- <<< "$ids")" --max-new-tokens $new \
    --ignore-eos --max-model-len $((context + new)) --warmup \
    --dump-logits "$dir/results/bench-forced.bin") || return 1
  echo "$out"
  local decode prefill_ms
  decode=$(sed -n 's/^decode: \([0-9.]*\) ms.*/\1/p' <<< "$out")
  ids=$(bench_ids $prefill) || return 1
  out=$("$bin" --random-weights 1 --prompt-ids "$ids" --max-new-tokens 1 --ignore-eos \
    --max-model-len $((prefill + 2)) --warmup) || return 1
  echo "$out"
  prefill_ms=$(sed -n 's/^prefill: \([0-9.]*\) ms.*/\1/p' <<< "$out")
  "$py" "$dir/gpu_bench.py" bench "$dir/bench-config.json" --seed 1 --device $device \
    --context $context --new-tokens $new --prefill $prefill --tpc-decode-ms "$decode" \
    --tpc-prefill-ms "$prefill_ms" --tpc-logits "$dir/results/bench-forced.bin" \
    --out "$dir/results/bench.json" || return 1
}

# One rank of tp 2, 4 and 8 alone (TPC_SINGLE_RANK_VIEW=1: a no-op communicator, compute
# only) on the same request, warm, plus bench/per_rank_model.py's modelled NCCL time.
per_rank_stage() {
  local context=1024 new=64 ids out decode
  ids=$(bench_ids $context) || return 1
  for tp in 2 4 8; do
    out=$(TPC_SINGLE_RANK_VIEW=1 "$dir/bin/bench-tp$tp" --random-weights 1 \
      --prompt-ids "$ids" --max-new-tokens $new --ignore-eos --max-model-len $((context + new)) \
      --warmup --trace "$dir/results/per-rank-tp$tp.json") || return 1
    echo "$out"
    decode=$(sed -n 's/^decode: \([0-9.]*\) ms.*/\1/p' <<< "$out")
    "$py" "$dir/per_rank_model.py" $tp "$decode" "$dir/results/per-rank-tp$tp.json.rank0" ||
      return 1
  done
}

run() {
  [[ -d $dir/bin || -f $dir/payload.tgz ]] ||
    { echo "no bundle at $dir: run 'gpu-check.sh bundle' first" >&2; exit 1; }
  [[ -d $dir/bin ]] || tar xzf "$dir/payload.tgz" -C "$dir"
  mkdir -p "$dir/results"
  if [[ -n ${TPC_GPU_CHECK_RESUME:-} ]]; then
    [[ -f $TPC_GPU_CHECK_RESUME ]] ||
      { echo "gpu-check: TPC_GPU_CHECK_RESUME: no archive at $TPC_GPU_CHECK_RESUME" >&2; return 2; }
    tar xzf "$TPC_GPU_CHECK_RESUME" -C "$dir" ||
      { echo "gpu-check: TPC_GPU_CHECK_RESUME: $TPC_GPU_CHECK_RESUME is not an archive of results" >&2; return 2; }
    echo "gpu-check: resuming from $TPC_GPU_CHECK_RESUME ($(ls "$dir"/results/*.txt 2>/dev/null | wc -l) results)"
  fi
  deadline=${TPC_GPU_CHECK_DEADLINE:-0}
  [[ $deadline =~ ^[0-9]+$ ]] ||
    { echo "gpu-check: TPC_GPU_CHECK_DEADLINE must be whole seconds, got '$deadline'" >&2; return 2; }
  run_start=$(date +%s)
  skipped=()
  # The machine's own NCCL and cuBLAS, from the wheels PyTorch brought.
  local wheels
  wheels=$("$py" -c "import importlib.util, os
for m in ('nvidia.nccl', 'nvidia.cublas', 'nvidia.cu13', 'nvidia.cuda_runtime'):
    try:
        spec = importlib.util.find_spec(m)
    except ModuleNotFoundError:
        continue
    for p in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isdir(os.path.join(p, 'lib')):
            print(os.path.join(p, 'lib'))" | paste -sd:)
  export LD_LIBRARY_PATH=$dir/lib${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export dir py seed prompt long_prompt new_tokens batched_model
  export -f run_ranks forced_ids compare example_stage attention_stage graph_eager_stage \
    negative_control_stage device_fault_stage env_stage bench_ids bench_stage per_rank_stage \
    batched_stage draws_stage
  local failed=0 start
  start=$(date +%s%N)
  stage env env_stage || failed=1
  stage example-tp1 example_stage 1 || failed=1
  # The same without the decode step's CUDA graph: the graph must not change a logit.
  TPC_CUDA_GRAPHS=0 stage example-tp1-eager example_stage 1 nccl eager || failed=1
  stage graph-eager graph_eager_stage || failed=1
  stage device-fault device_fault_stage || failed=1
  # tpc's own GEMM, what runs where cuBLASLt has no algorithm for a shape's alignments: no
  # shape of the example needs it, so TPC_CUDA_GEMM=tpc makes every GEMM take it.
  TPC_CUDA_GEMM=tpc stage example-tp1-own-gemm example_stage 1 nccl own-gemm || failed=1
  stage negative-control negative_control_stage || failed=1
  for bin in "$dir"/bin/*-hd*-tp1; do
    local m
    m=$(basename "$bin" -tp1)
    stage "attention-$m" attention_stage "$m" || failed=1
  done
  stage batched batched_stage || failed=1
  stage draws draws_stage || failed=1
  stage example-tp2-gloo example_stage 2 gloo || failed=1
  stage example-tp4-gloo example_stage 4 gloo || failed=1
  stage_limit=240 stage bench bench_stage || failed=1
  stage per-rank per_rank_stage || failed=1
  pack_results
  if ((${#skipped[@]} > 0)); then
    echo "gpu-check: $([[ $failed == 0 ]] && echo incomplete || echo FAILED): ${#skipped[@]}" \
      "stages skipped by the deadline of $deadline s: ${skipped[*]}; resume with" \
      "TPC_GPU_CHECK_RESUME=gpu-check-results.tgz ($(seconds_since "$start") s in this run)"
    ((failed == 0)) && return 3
    return 1
  fi
  echo "gpu-check: $([[ $failed == 0 ]] && echo ok || echo FAILED) ($(seconds_since "$start") s" \
    "in this run$([[ -f $dir/dry-run ]] && echo ", a dry run on CPU binaries"))"
  return $failed
}

case $step in
  bundle) bundle ;;
  run) run ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
esac
