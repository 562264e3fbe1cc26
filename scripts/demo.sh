#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs what is missing, builds tpc, checks the
# example model (a tiny Llama) against transformers' Llama plan at tp 2, printing the
# effective plan, and shows the collectives the sharded model runs. Later stages (compile,
# run on 2 ranks) join this script as they land.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TPC_BUILD_DIR:-$root/build}

"$root/scripts/bootstrap.sh"
"$root/scripts/build.sh"

cd "$root"
echo
echo "\$ tpc check examples/model.mlir --plan examples/plan.json --tp 2 --print-plan"
"$build/bin/tpc" check examples/model.mlir --plan examples/plan.json --tp 2 --print-plan

echo
echo "\$ tpc analyze examples/model.mlir --plan examples/plan.json --tp 2"
"$build/bin/tpc" analyze examples/model.mlir --plan examples/plan.json --tp 2 2>/dev/null
