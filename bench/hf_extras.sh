#!/usr/bin/env bash
# Python packages a benchmark needs beyond the test venv (scripts/venv.sh), pinned, into
# DIR with --no-deps (for PYTHONPATH), once: a stamp names what DIR holds. Prints DIR.
# Usage: bench/hf_extras.sh DIR PACKAGE==VERSION...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
shift
stamp=$dir/.tpc-extras
want=$(printf '%s\n' "$@" | sort)
if [[ ! -f $stamp ]] || ! diff -q <(echo "$want") <(sort "$stamp") > /dev/null; then
  venv=$("$root/scripts/venv.sh")
  echo "installing $* into $dir (once)" >&2
  mkdir -p "$dir"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --upgrade --target "$dir" \
    "$@" >&2
  echo "$want" > "$stamp"
fi
echo "$dir"
