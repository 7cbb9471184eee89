#!/usr/bin/env bash
# Build llama.cpp's own llama-server from the llama.cpp that llama-cpp-python vendors, for this
# machine (-march=native, AMX off as in packaging/llama_cpp_wheel.sh), and print its path: the
# anchor benchmarks/serve_load.py --llama-server compares Ember against. Ember itself runs the
# portable build's best variant for the CPU (packaging/install_llama_cpp.sh; on this project's
# Xeon 0.986x native decode and 0.975x prompt, benchmarks/llama_portable.py), so the anchor is
# what a user who compiles llama-server gets. Cached by version, flags and CPU (about 5 minutes
# on 2 cores, once).
set -euo pipefail

VERSION=${EMBER_LLAMA_CPP_VERSION:-0.3.36}
CACHE=${EMBER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ember/wheels}
JOBS=${JOBS:-$(nproc)}
sdist="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$sdist" ]; then
  mkdir -p "$CACHE/sdist"
  python3 -m pip download --no-deps --no-binary :all: -d "$CACHE/sdist" \
    "llama-cpp-python==$VERSION" >&2
fi

flags=""
if [ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ] && [ "${EMBER_LLAMA_AMX:-0}" != 1 ]; then
  flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"  # as the wheel (llama.cpp issue 20824)
fi
cpu_flags=$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || uname -m)
key=$(printf '%s\n' "$VERSION" "$flags" "$cpu_flags" | sha256sum | cut -c1-16)
dir="$CACHE/llama-server-$VERSION-$key"
if [ ! -x "$dir/llama-server" ]; then
  work=$(mktemp -d)
  tar -xzf "$sdist" -C "$work"
  src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
  echo "ember: compiling llama-server from $src (about 5 minutes on 2 cores, once)" >&2
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DBUILD_SHARED_LIBS=OFF >&2
  cmake --build "$work/build" --target llama-server -j "$JOBS" >&2
  mkdir -p "$dir.tmp"
  cp "$work/build/bin/llama-server" "$dir.tmp/"
  rm -rf "$dir" "$work"
  mv "$dir.tmp" "$dir"
fi
echo "$dir/llama-server"
