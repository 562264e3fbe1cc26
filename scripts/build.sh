#!/usr/bin/env bash
# Configures (once) and builds tpc into build/ with Ninja; ccache keeps rebuilds fast across
# clones, since its cache lives outside the tree.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TPC_BUILD_DIR:-$root/build}

# ccache keys on paths relative to the clone, so a fresh clone elsewhere (CI's) reuses what
# another clone compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}

# xgrammar's C++ core (tpc serve's structured outputs), built once outside the clone; where it
# cannot be had, tpc builds without structured outputs and says so.
xgrammar=""
if ! xgrammar=$("$root/scripts/xgrammar.sh"); then
  echo "warning: no xgrammar (see above): tpc serve will refuse structured outputs" >&2
  xgrammar=""
fi
if [[ ! -f $build/build.ninja ]]; then
  # TPC_CMAKE_ARGS: more options for a first configure (scripts/test.sh's sanitizer build).
  # shellcheck disable=SC2086
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit -DTPC_XGRAMMAR_DIR="$xgrammar" \
    ${TPC_CMAKE_ARGS:-}
elif [[ -n $xgrammar ]] && ! grep -q "^TPC_XGRAMMAR_DIR:PATH=$xgrammar\$" "$build/CMakeCache.txt"; then
  cmake -S "$root" -B "$build" -DTPC_XGRAMMAR_DIR="$xgrammar" > /dev/null
fi
cmake --build "$build"
