#!/usr/bin/env bash
# The Python test oracles, in a venv outside the clone (TPC_VENV, default ~/.cache/tpc-venv):
# torch 2.11.0 (for torchrun) from PyPI. Reused when present, created when not. Prints the
# venv's path; exits non-zero (with the reason) when it cannot be made.
set -euo pipefail
venv=${TPC_VENV:-$HOME/.cache/tpc-venv}
if [[ -x $venv/bin/torchrun ]] && "$venv/bin/python" -c 'import torch; assert torch.__version__.startswith("2.11.0")' 2>/dev/null; then
  echo "$venv"
  exit 0
fi
echo "venv: creating $venv with torch==2.11.0 (once; reused afterwards)" >&2
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check torch==2.11.0 >&2
echo "$venv"
