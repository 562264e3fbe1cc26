#!/usr/bin/env bash
# xgrammar's C++ core (the grammar engine of tpc serve's structured outputs), built once from
# its PyPI sdist outside the clone: the version pinned and the archive's SHA-256 checked, the
# static library and headers installed under TPC_THIRD_PARTY (default
# ~/.cache/tpc-third-party). Reused when present. Prints the install prefix; exits non-zero,
# saying why, when it cannot be made (scripts/build.sh then builds tpc without it).
#
# pip fetches the sdist ("pip download" prepares its metadata, so a small venv beside it holds
# the sdist's build backend: scikit-build-core and setuptools_scm, pure Python, from PyPI);
# CMake builds only the C++ library (no Python bindings, no tests, no LTO) with Ninja.
set -euo pipefail
version=0.2.9
sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
dir=${TPC_THIRD_PARTY:-$HOME/.cache/tpc-third-party}
prefix=$dir/xgrammar-$version
stamp=$prefix/.tpc-built-$sha256

if [[ -f $stamp && -f $prefix/lib/libxgrammar.a && -f $prefix/include/xgrammar/xgrammar.h ]]; then
  echo "$prefix"
  exit 0
fi
mkdir -p "$dir"
archive=$dir/xgrammar-$version.tar.gz
if [[ ! -f $archive ]] || ! echo "$sha256  $archive" | sha256sum -c --quiet - 2>/dev/null; then
  echo "xgrammar: fetching the xgrammar $version sdist from PyPI (once)" >&2
  if [[ ! -x $dir/pyenv/bin/pip ]]; then
    python3 -m venv "$dir/pyenv"
  fi
  "$dir/pyenv/bin/pip" install -q --disable-pip-version-check scikit-build-core \
    setuptools_scm >&2
  fetched=$(mktemp -d)
  trap 'rm -rf "$fetched"' EXIT
  "$dir/pyenv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
    --no-build-isolation "xgrammar==$version" -d "$fetched" >&2
  mv "$fetched/xgrammar-$version.tar.gz" "$archive"
fi
if ! echo "$sha256  $archive" | sha256sum -c --quiet -; then
  echo "xgrammar: $archive is not the sdist pinned here (SHA-256 $sha256)" >&2
  rm -f "$archive"
  exit 1
fi

echo "xgrammar: building its C++ core into $prefix (once)" >&2
work=$dir/xgrammar-$version-build
rm -rf "$work" "$prefix"
mkdir -p "$work/build"
tar xzf "$archive" -C "$work"
# Its CMakeLists reads a config.cmake from the build folder first; its own turns the Python
# bindings on.
printf 'set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\n' \
  > "$work/build/config.cmake"
# (its flags add -Werror and -flto=auto; a newer compiler's new warning must not stop the
# build, and a static library of plain objects links into any of tpc's builds)
cmake -S "$work/xgrammar-$version" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_CXX_FLAGS="-Wno-error -fno-lto" > "$work/cmake.log"
cmake --build "$work/build" >&2
cmake --install "$work/build" > /dev/null
touch "$stamp"
rm -rf "$work"
echo "$prefix"
