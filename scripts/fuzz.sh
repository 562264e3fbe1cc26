#!/usr/bin/env bash
# Fuzzes tpc's readers with libFuzzer (issue 7): builds the fuzz/ targets with clang into
# build-fuzz/ (ASan and UBSan on, coverage on tpc's own code) and runs each from seed corpora
# made of examples/ and the tests' inputs:
#
#   scripts/fuzz.sh [READER_RUNS [PIPELINE_RUNS]]    defaults: 1000000 and 100000
#
# The readers (plan, config, safetensors) get READER_RUNS executions, the pipeline target
# PIPELINE_RUNS. A target stops at its first crash, leaving the input in
# build-fuzz/crashes/TARGET/; each such input becomes a fix and a regression test. The table
# of executions, crashes and time per target goes to bench/results/fuzz.txt (FUZZ_RESULTS
# overrides); FUZZ_TARGETS="config pipeline" reruns only those, keeping the others' rows.
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

if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="${clang%++*}" -DCMAKE_CXX_COMPILER="$clang" -DTPC_FUZZ=ON -DTPC_CUDA=OFF \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit > /dev/null
fi
all=(plan config safetensors pipeline)
# FUZZ_TARGETS="config pipeline" reruns some; the table keeps the others' last rows.
read -r -a targets <<< "${FUZZ_TARGETS:-${all[*]}}"
cmake --build "$build" --target "${all[@]/#/tpc-fuzz-}" tpc

# Seeds: what the tests already feed each reader.
seeds=$build/seeds
rm -rf "$seeds" && mkdir -p "$seeds"/{plan,config,safetensors,pipeline}
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
"$build/bin/tpc" init-weights "$root/examples/model.mlir" -o "$seeds/safetensors/example.safetensors" \
  --seed 1 --dtype bf16 > /dev/null
printf '{"metadata": {}, "weight_map": {"w": "a.safetensors", "b": "a.safetensors"}}' \
  > "$seeds/safetensors/index.json"

# fuzz TARGET: one target's run; its row of the table goes to build-fuzz/TARGET.row.
fuzz() {
  local target=$1 runs=$readers
  [[ $target == pipeline ]] && runs=$pipeline
  local corpus=$build/corpus/$target crashes=$build/crashes/$target
  rm -rf "$crashes" && mkdir -p "$corpus" "$crashes"
  local start code=0
  start=$(date +%s)
  "$build/bin/tpc-fuzz-$target" -runs="$runs" -max_len=16384 -timeout=20 -rss_limit_mb=4096 \
    -dict="$root/fuzz/json.dict" -artifact_prefix="$crashes/" -print_final_stats=1 \
    "$corpus" "$seeds/$target" > "$build/$target.log" 2>&1 || code=$?
  local seconds=$(($(date +%s) - start)) done_runs crashed
  done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/$target.log" | tail -n 1)
  crashed=$(find "$crashes" -type f | wc -l)
  printf '%-12s %12s %8s %8s %5s  %s\n' "$target" "${done_runs:-?}" "$crashed" "$seconds" "$code" \
    "tpc-fuzz-$target -runs=$runs -max_len=16384 -timeout=20 -rss_limit_mb=4096 -dict=fuzz/json.dict" \
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
