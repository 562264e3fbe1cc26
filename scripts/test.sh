#!/usr/bin/env bash
# Runs every test from a fresh Debian 12 machine: installs what is missing, builds, then runs
# the lit regression tests and the GoogleTest unit tests, and ends with one summary line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TPC_BUILD_DIR:-$root/build}

"$root/scripts/bootstrap.sh"
"$root/scripts/build.sh"
# torchrun for the torchrun test; without it that test is reported unsupported, not passed.
if venv=$("$root/scripts/venv.sh"); then
  export TPC_VENV=$venv
else
  echo "warning: no Python venv with torch; the torchrun test will be skipped" >&2
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
/usr/lib/llvm-22/bin/lit -sv "$build/test" "$build/test/unit" 2>&1 | tee "$log" || status=$?

count() { sed -n "s/^ *$1: *\([0-9]*\).*/\1/p" "$log" | tail -n 1; }
passed=$(count Passed)
failed=$(( $(count Failed || true) + 0 ))
unresolved=$(( $(count Unresolved || true) + 0 ))
echo "tpc tests: ${passed:-0} passed, $((failed + unresolved)) failed"
if [[ ${passed:-0} -eq 0 ]]; then
  echo "tpc tests: no test ran" >&2
  exit 1
fi
exit "$status"
