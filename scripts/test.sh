#!/usr/bin/env bash
# Runs every test from a fresh Debian 12 machine: installs what is missing, builds, then runs
# the lit regression tests and the GoogleTest unit tests, and ends with one summary line.
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
else
  echo "error: cannot make the test venv (see above); TPC_NO_VENV=1 runs without it" >&2
  exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
/usr/lib/llvm-22/bin/lit -sv "$build/test" "$build/test/unit" 2>&1 | tee "$log" || status=$?

count() { sed -n "s/^ *$1: *\([0-9]*\).*/\1/p" "$log" | tail -n 1; }
passed=$(count Passed)
failed=$(( $(count Failed || true) + 0 ))
unresolved=$(( $(count Unresolved || true) + 0 ))
unsupported=$(( $(count Unsupported || true) + 0 ))
echo "tpc tests: ${passed:-0} passed, $((failed + unresolved)) failed, $unsupported unsupported"
if [[ ${passed:-0} -eq 0 ]]; then
  echo "tpc tests: no test ran" >&2
  exit 1
fi
exit "$status"
