#!/usr/bin/env bash
# Runs every test from a fresh Debian 12 machine: installs what is missing, builds, then runs
# the lit regression tests and the GoogleTest unit tests, then most of them again on a build
# with ASan and UBSan, and ends with one summary line per suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TPC_BUILD_DIR:-$root/build}

"$root/scripts/bootstrap.sh"
"$root/scripts/build.sh"
# The oracles (torch, transformers) for the torchrun and conformance tests. Without them
# those tests would only be reported unsupported, so a venv that cannot be made is an error
# unless TPC_NO_VENV=1 says to run without them.
if [[ ${TPC_NO_VENV:-0} == 1 ]]; then
  echo "warning: TPC_NO_VENV=1: the torchrun and conformance tests will be unsupported" >&2
elif venv=$("$root/scripts/venv.sh"); then
  export TPC_VENV=$venv
  # The real instruct checkpoint the tokenizer and tpc run conformance tests use, made once.
  if ! "$root/scripts/smollm2.sh" > /dev/null; then
    echo "error: cannot make the SmolLM2 checkpoint (see above); TPC_NO_VENV=1 runs without it" >&2
    exit 1
  fi
else
  echo "error: cannot make the test venv (see above); TPC_NO_VENV=1 runs without it" >&2
  exit 1
fi

log=$(mktemp)
results=$(mktemp -d)
trap 'rm -rf "$log" "$results"' EXIT
status=0
summaries=()
reports=()
# suite NAME LIT-PATHS...: runs lit (each test under the per-test timeout test/lit.cfg.py
# sets, TPC_TEST_TIMEOUT), keeps its summary line and each test's time (lit's JSON report,
# for the slowest tests below); a suite where nothing ran fails.
suite() {
  local name=$1 code=0 report="$results/${#summaries[@]}.json"
  shift
  reports+=("$name=$report")
  /usr/lib/llvm-22/bin/lit -sv -o "$report" "$@" 2>&1 | tee "$log" || code=$?
  # lit pads the names when it prints several ("Passed     : 84").
  count() { sed -n "s/^ *$1 *: *\([0-9]*\).*/\1/p" "$log" | tail -n 1; }
  local passed failed unresolved unsupported
  passed=$(count Passed)
  failed=$(( $(count Failed || true) + $(count 'Timed Out' || true) + 0 ))
  unresolved=$(( $(count Unresolved || true) + 0 ))
  unsupported=$(( $(count Unsupported || true) + 0 ))
  summaries+=("$name: ${passed:-0} passed, $((failed + unresolved)) failed, $unsupported unsupported")
  if [[ ${passed:-0} -eq 0 ]]; then
    echo "$name: no test ran" >&2
    code=1
  fi
  ((code == 0)) || status=1
}
suite "tpc tests" "$build/test" "$build/test/unit"

# The suite again, less the conformance tests (their oracles are torch, not tpc), on a second
# build with AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/; the CUDA target
# left out): compiler, runtime, and the programs tpc compiles, which that build instruments
# too. TPC_NO_SANITIZE=1 skips it.
if [[ ${TPC_NO_SANITIZE:-0} != 1 ]]; then
  asan=${TPC_ASAN_BUILD_DIR:-$root/build-asan}
  TPC_BUILD_DIR=$asan TPC_CMAKE_ARGS="-DTPC_SANITIZE=address,undefined -DTPC_CUDA=OFF" \
    "$root/scripts/build.sh"
  # allocator_may_return_null: a too-large allocation throws bad_alloc, as without ASan, so the
  # tests of out-of-memory errors test the same path.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # Native code paths only: the tests whose subject is a script checked against torch (the GPU
  # check's dry run and benchmark, torchrun's comparison) are left out, as the conformance
  # tests are.
  suite "tpc tests (ASan+UBSan)" --filter-out 'gpu-check-dry-run|gpu-bench|torchrun|multi-host' \
    "$asan"/test/{Dialect,Plan,Import,Transforms,Tools,Target,e2e,fuzz} "$asan/test/unit"
fi

# The ten slowest tests of every suite: where the run's time goes.
python3 - "${reports[@]}" <<'EOF' || true
import json, sys
tests = []
for arg in sys.argv[1:]:
    suite, path = arg.split("=", 1)
    try:
        report = json.load(open(path))["tests"]
    except (OSError, ValueError, KeyError):
        continue
    tests += [(t.get("elapsed") or 0.0, f"{suite}: {t['name']}") for t in report]
print("ten slowest tests:")
for elapsed, name in sorted(tests, reverse=True)[:10]:
    print(f"  {elapsed:7.1f} s  {name}")
EOF
for line in "${summaries[@]}"; do
  echo "$line"
done
exit "$status"
