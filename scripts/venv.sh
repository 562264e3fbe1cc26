#!/usr/bin/env bash
# The Python test oracles, in a venv outside the clone (TPC_VENV, default ~/.cache/tpc-venv):
# torch 2.11.0 (torchrun, and transformers' own tensor parallelism), transformers 5.17.0
# (the conformance suite's reference) and openai 3.57.0 (the official client tpc serve is
# tested with), all from PyPI. Reused when present, completed or
# created when not. Prints the venv's path; exits non-zero (with the reason) when it cannot
# be made.
set -euo pipefail
venv=${TPC_VENV:-$HOME/.cache/tpc-venv}
has() { "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('$1') == '$2'" 2>/dev/null; }
if [[ -x $venv/bin/torchrun ]] && has torch 2.11.0 && has transformers 5.17.0 &&
  has openai 3.57.0; then
  echo "$venv"
  exit 0
fi
if [[ ! -x $venv/bin/python ]]; then
  echo "venv: creating $venv (once; reused afterwards)" >&2
  python3 -m venv "$venv"
fi
echo "venv: installing torch==2.11.0 transformers==5.17.0 openai==3.57.0 into $venv" >&2
"$venv/bin/pip" install -q --disable-pip-version-check torch==2.11.0 transformers==5.17.0 \
  openai==3.57.0 >&2
echo "$venv"
