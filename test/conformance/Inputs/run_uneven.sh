#!/usr/bin/env bash
# Conformance of a reshaped model (uneven heads, an intermediate size tp does not divide, ...)
# at several meshes, against transformers and against tpc's own tp 1 run (CPU, fp32):
#   run_uneven.sh TPC_BIN_DIR VENV_PYTHON ARCH OUT "MESH_LIST" [--set KEY=VALUE ...] [--plan P]
# A mesh is a tp size N, or PxN: P pipeline stages of tp N (--pp P --tp N, P * N ranks).
# hf_model.py builds the tiny random ARCH model with the --set overrides and transformers'
# reference; tpc imports its config.json and compiles it with --plan P (default auto) at tp 1
# and at each mesh of MESH_LIST; every binary runs on the saved checkpoint teacher-forced
# (--force-ids) and free greedy (16 new tokens, eos ignored), logits dumped. Then, in this
# order, one verdict line each:
#   conform: tp 1 (forced and free) against transformers (conform.py)
#   conform: for each mesh of MESH_LIST, its free run against tp 1's (conform.py --against-run)
#   compare: for each mesh of MESH_LIST, its forced logits against tp 1's within TOLERANCE
#            (1e-4; COMPARE_TOLERANCE overrides) and the same tokens (compare_logits.py)
#   traces:  for each mesh of MESH_LIST, a 3-token traced run (prompt of 8) against
#            `tpc analyze --plan P [--pp P] --tp N --prefill-len 8 --json`, every rank's
#            trace (check_trace.py)
# A step that fails prints its tool's output (a failed compile its log) and the script goes
# on with what does not depend on it; it exits 1 when anything failed.
set -uo pipefail
usage() {
  echo "usage: run_uneven.sh TPC_BIN_DIR VENV_PYTHON ARCH OUT \"MESH_LIST\" [--set K=V ...] [--plan P]" >&2
  exit 2
}
(($# >= 5)) || usage
bin=$1 py=$2 arch=$3 out=$4 tps=$5
shift 5
sets=() plan=auto
while (($#)); do
  case $1 in
    --set) (($# >= 2)) || usage; sets+=(--set "$2"); shift 2 ;;
    --plan) (($# >= 2)) || usage; plan=$2; shift 2 ;;
    *) usage ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
e2e=$here/../../e2e/Inputs
tpc=$bin/tpc
hf=$out/hf
failed=0

# quiet LOG CMD...: runs CMD with its output in LOG; on failure prints LOG and returns 1.
quiet() {
  local log=$1
  shift
  "$@" > "$log" 2>&1 && return 0
  local rc=$?
  echo "FAILED (exit $rc): $*"
  cat "$log"
  return 1
}
# verdict CMD...: runs a checker whose output (verdict included) goes to stdout.
verdict() {
  "$@" || failed=1
}

mkdir -p "$out"
quiet "$out/hf_model.log" "$py" "$here/hf_model.py" "$arch" "$hf" "${sets[@]}" || exit 1
cat "$out/hf_model.log"
prompt=$(cat "$hf/prompt.txt") force=$(cat "$hf/force.txt")
quiet "$out/import.log" "$tpc" import "$hf/config.json" -o "$out/model.mlir" || exit 1

binary() { # binary MESH: the compiled per-rank binary of MESH
  ls -d "$out/tp$1"/* 2> /dev/null | grep -v '\.[a-z]*$' | head -n 1
}
mesh_flags() { # mesh_flags MESH: its --pp and --tp
  if [[ $1 == *x* ]]; then echo "--pp ${1%x*} --tp ${1#*x}"; else echo "--tp $1"; fi
}
ranks() { # ranks MESH: how many ranks it runs on
  if [[ $1 == *x* ]]; then echo $((${1%x*} * ${1#*x})); else echo "$1"; fi
}
tolerance=${COMPARE_TOLERANCE:-1e-4}
others=() # MESH_LIST without tp 1
for tp in $tps; do
  [[ $tp == 1 ]] || others+=("$tp")
done
# Compile and run tp 1 and every tp of the list; built lists the tps whose runs all worked.
built=()
for tp in 1 "${others[@]}"; do
  start=$SECONDS
  # shellcheck disable=SC2046 # mesh_flags is two or four words
  if ! quiet "$out/compile$tp.log" "$tpc" compile "$out/model.mlir" --plan "$plan" \
    $(mesh_flags "$tp") -o "$out/tp$tp"; then
    failed=1
    continue
  fi
  exe=$(binary "$tp")
  ok=1
  for name in forced free; do
    extra=()
    [[ $name == forced ]] && extra=(--force-ids "$force")
    "$tpc" launch -n "$(ranks "$tp")" "$exe" --weights "$hf" --prompt-ids "$prompt" --max-new-tokens 16 \
      --ignore-eos --dump-logits "$out/$name$tp.bin" "${extra[@]}" > "$out/$name$tp.txt" 2>&1 ||
      { echo "FAILED: mesh $tp $name run"; cat "$out/$name$tp.txt"; ok=0; failed=1; }
  done
  ((ok)) && built+=("$tp")
  echo "mesh $tp: compiled and ran in $((SECONDS - start)) s"
done
has() { [[ " ${built[*]} " == *" $1 "* ]]; }
has 1 || { echo "tp 1 did not compile or run: nothing to check against"; exit 1; }

# tp 1 against transformers: logits under teacher forcing, then free-running greedy.
verdict "$py" "$here/conform.py" "$hf" "$out/forced1.bin" --free "$out/free1.bin"
# Every other tp against tp 1's own run (transformers cannot shard uneven heads at all).
for tp in "${others[@]}"; do
  if has "$tp"; then
    verdict "$py" "$here/conform.py" - "$out/free$tp.bin" --against-run "$out/free1.bin"
  else
    echo "mesh $tp: no runs to check"; echo "conform: FAILED"
  fi
done
for tp in "${others[@]}"; do
  if has "$tp"; then
    verdict "$py" "$e2e/compare_logits.py" "$tolerance" "$out/forced1.bin" "$out/forced$tp.bin"
  else
    echo "mesh $tp: no runs to check"; echo "compare: FAILED"
  fi
done

# Collectives, weight bytes and arena of every rank against analyze's prediction.
for tp in "${others[@]}"; do
  if ! has "$tp"; then
    echo "mesh $tp: no binary to trace"; echo "traces: FAILED"
    continue
  fi
  # analyze's warnings go to stderr: the JSON (stdout) stays alone.
  # shellcheck disable=SC2046
  if ! "$tpc" analyze "$out/model.mlir" --plan "$plan" $(mesh_flags "$tp") --prefill-len 8 --json \
    > "$out/analyze$tp.json" 2> "$out/analyze$tp.log"; then
    echo "FAILED: tpc analyze --plan $plan $(mesh_flags "$tp")"
    cat "$out/analyze$tp.log" "$out/analyze$tp.json"
    echo "traces: FAILED"; failed=1
    continue
  fi
  if ! quiet "$out/trace$tp.txt" "$tpc" launch -n "$(ranks "$tp")" "$(binary "$tp")" --weights "$hf" \
    --prompt-ids "$prompt" --max-new-tokens 3 --ignore-eos --trace "$out/trace$tp.json"; then
    echo "traces: FAILED"; failed=1
    continue
  fi
  traces=()
  for ((r = 0; r < $(ranks "$tp"); ++r)); do
    traces+=("$out/trace$tp.json.rank$r")
  done
  verdict "$py" "$e2e/check_trace.py" "$out/analyze$tp.json" 8 3 "${traces[@]}"
done
exit $failed
