#!/usr/bin/env bash
# Configures (once) and builds tpc into build/ with Ninja; ccache keeps rebuilds fast across
# clones, since its cache lives outside the tree.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TPC_BUILD_DIR:-$root/build}

if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
fi
cmake --build "$build"
