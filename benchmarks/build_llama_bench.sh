#!/usr/bin/env bash
# Build llama.cpp's own llama-bench from the sources of the installed portable llama.cpp
# (packaging/llama_cpp_portable.sh) and print the folder that holds it: the anchor
# benchmarks/gpu_offload.py compares Ember against. Built with GGML_BACKEND_DL and shared
# libraries, so benchmarks/gpu_offload.py runs it on the very libraries Ember loads (it puts
# the installed llama_cpp/lib files and the chosen CPU module beside it, in a folder of its
# own): the same engine, the same backends, llama.cpp's own benchmark loop. Cached by version
# (about 5 minutes on 2 cores, once).
#
# Usage: benchmarks/build_llama_bench.sh [PYTHON]
set -euo pipefail

PYTHON=${1:-python3}
VERSION=${EMBER_LLAMA_CPP_VERSION:-0.3.36}
CACHE=${EMBER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ember/wheels}
JOBS=${EMBER_BUILD_JOBS:-$(nproc)}
sdist="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$sdist" ]; then
  mkdir -p "$CACHE/sdist"
  "$PYTHON" -m pip download --no-deps --no-binary :all: -d "$CACHE/sdist" \
    "llama-cpp-python==$VERSION" >&2
fi
dir="$CACHE/llama-bench-$VERSION-dl1"
if [ ! -x "$dir/llama-bench" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  tar -xzf "$sdist" -C "$work"
  src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
  echo "ember: compiling llama-bench from $src (about 5 minutes on 2 cores, once)" >&2
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=OFF -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN' >&2
  cmake --build "$work/build" --target llama-bench -j "$JOBS" >&2
  mkdir -p "$dir.tmp"
  cp "$work/build/bin/llama-bench" "$work"/build/bin/*.so* "$dir.tmp/"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
echo "$dir"
