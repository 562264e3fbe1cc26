#!/usr/bin/env bash
# Installs what tpc needs on Debian 12, idempotently: Debian's LLVM/MLIR 22 (with lit and
# FileCheck), CLI11, fmt, nlohmann-json, GoogleTest, Gloo, Open MPI, OpenBLAS, CMake, Ninja
# and ccache; PCRE2 and ICU for the tokenizers; Boost (Asio, Beast) for tpc serve; psutil, which
# lit's per-test timeout needs. Packages already present are left alone, so a warm machine
# spends no time here.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache git
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev
  libgloo-dev libopenmpi-dev openmpi-bin libopenblas-dev libpcre2-dev libicu-dev
  libboost-dev pkg-config
  bc python3 python3-venv python3-psutil
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
