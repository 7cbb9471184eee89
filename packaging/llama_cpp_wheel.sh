#!/usr/bin/env bash
# Build (or reuse) the llama-cpp-python wheel Ember runs on, and print its path.
#
# Why our own wheel cache: PyPI ships llama-cpp-python only as source, and pip's wheel cache
# does not key on CMAKE_ARGS, so a wheel built once with other flags would be reused silently.
# We key our cache on the version, the CMake flags, the Python tag and the CPU's flags.
#
# The source distribution is kept too ($CACHE/sdist): the tests read the real chat templates
# and vocabularies vendored in it (tests/support/llama_sdist.py), and a rebuild needs no
# download.
#
# Why AMX is off on x86-64 Linux: upstream llama.cpp segfaults in ggml_backend_amx_mul_mat on
# the first decode on AMX CPUs (llama.cpp issue 20824). Set EMBER_LLAMA_AMX=1 to keep AMX.
set -euo pipefail

PYTHON=${1:-python3}
VERSION=${EMBER_LLAMA_CPP_VERSION:-0.3.36}
CACHE=${EMBER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ember/wheels}

cmake_args=${CMAKE_ARGS:-}
if [ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ] && [ "${EMBER_LLAMA_AMX:-0}" != 1 ]; then
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  cmake_args="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$no_amx' -DCMAKE_CXX_FLAGS='$no_amx' $cmake_args"
  echo "ember: building llama.cpp with AMX disabled (upstream llama.cpp issue 20824 segfaults" \
       "on AMX CPUs; EMBER_LLAMA_AMX=1 keeps it)" >&2
fi

py_tag=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
cpu_flags=$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || uname -m)
key=$(printf '%s\n' "$VERSION" "$cmake_args" "$py_tag" "$cpu_flags" | sha256sum | cut -c1-16)
dir="$CACHE/llama-cpp-python-$VERSION-$py_tag-$key"

sdist="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  if [ ! -f "$sdist" ]; then
    mkdir -p "$CACHE/sdist"
    "$PYTHON" -m pip download --no-deps --no-binary :all: -d "$CACHE/sdist" \
      "llama-cpp-python==$VERSION" >&2
  fi
  echo "ember: compiling llama-cpp-python $VERSION (about 9 minutes on 2 cores, once per machine)" >&2
  tmp=$(mktemp -d "$CACHE.tmp.XXXXXX" 2>/dev/null || { mkdir -p "$CACHE"; mktemp -d "$CACHE/.tmp.XXXXXX"; })
  CMAKE_ARGS="$cmake_args" "$PYTHON" -m pip wheel --no-deps --no-cache-dir -w "$tmp" "$sdist" >&2
  printf 'version=%s\ncmake_args=%s\n' "$VERSION" "$cmake_args" > "$tmp/BUILD_INFO"
  mkdir -p "$CACHE"
  rm -rf "$dir"
  mv "$tmp" "$dir"   # atomic: a half-built wheel is never found by the next run
fi
ls "$dir"/llama_cpp_python-*.whl
