#!/usr/bin/env bash
# Build (or reuse) llama.cpp's CUDA backend as a module loaded at run time (libggml-cuda.so,
# GGML_BACKEND_DL), from the same sdist and ggml as the portable build
# (packaging/llama_cpp_portable.sh), and print the cache folder that holds it.
#
# backends/llamacpp/ggml_backends.py loads it like the Vulkan module when it lies in
# llama_cpp/lib beside the others (`--install PYTHON` copies it there). It links the CUDA
# runtime and cuBLAS of the toolkit that built it dynamically (libcudart.so.13,
# libcublas.so.13 with nvcc 13): a machine without them (the NVIDIA driver alone) cannot
# load it, and ggml says so and carries on with Vulkan. Not part of the set-up or CI: the
# machines that build Ember have nvcc but no GPU; a GPU check carries the module there.
#
# cuBLAS: the toolkit's where it has one, else NVIDIA's pip wheel for the same CUDA major
# (nvidia-cublas, headers and libraries; downloaded once into the cache). Its libraries are
# needed where the module runs too (torch's CUDA wheels bring the same).
#
# Architectures: EMBER_CUDA_ARCHS (cmake's CMAKE_CUDA_ARCHITECTURES; default 90-real, the
# H100/H200 of the GPU checks). Each architecture adds its own kernels to the file.
#
# `--pack DIR` writes the module and its manifest (cuda-module.json: SHA-256, size, the pinned
# runtime wheels; packaging/cuda_module_manifest.py) into DIR, for a release to publish and
# `ember cuda install` to download; `--pack DIR --with-wheels` adds the runtime wheels, for
# `ember cuda install --from DIR` on a machine that reaches no package index. A release sets
# EMBER_CUDA_MODULE_URL (where it publishes the module) and puts DIR/cuda-module.json in
# assets/ before the bundle is built: `ember cuda install` then needs no --from.
#
# Usage: packaging/llama_cpp_cuda.sh [PYTHON] [--install | --pack DIR [--with-wheels]]
set -euo pipefail

PYTHON=${1:-python3}
VERSION=${EMBER_LLAMA_CPP_VERSION:-0.3.36}
CACHE=${EMBER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ember/wheels}
JOBS=${EMBER_BUILD_JOBS:-$(nproc)}
ARCHS=${EMBER_CUDA_ARCHS:-90-real}

if ! command -v nvcc >/dev/null; then
  echo "ember: no nvcc: llama.cpp's CUDA backend needs the CUDA toolkit to build" >&2
  exit 2
fi
nvcc_version=$(nvcc --version | tail -n1)
cuda_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
toolkit=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
cublas_args=""
if ! ls "$toolkit"/lib64/libcublas.so* "$toolkit"/targets/*/lib/libcublas.so* >/dev/null 2>&1; then
  cublas="$CACHE/nvidia-cublas-cu$cuda_major"
  if [ ! -f "$cublas/include/cublas_v2.h" ]; then
    tmp_wheel=$(mktemp -d)
    "$PYTHON" -m pip download --no-deps -d "$tmp_wheel" "nvidia-cublas==$cuda_major.0.*" >&2
    mkdir -p "$tmp_wheel/x" && "$PYTHON" -m zipfile -e "$tmp_wheel"/*.whl "$tmp_wheel/x"
    rm -rf "$cublas" && mkdir -p "$CACHE" && mv "$tmp_wheel/x/nvidia/cu$cuda_major" "$cublas"
    rm -rf "$tmp_wheel"
  fi
  cublas_args="-DCUDA_cublas_LIBRARY=$cublas/lib/libcublas.so.$cuda_major"
  cublas_args+=" -DCUDA_cublasLt_LIBRARY=$cublas/lib/libcublasLt.so.$cuda_major"
  cublas_args+=" -DCMAKE_CUDA_FLAGS=-I$cublas/include -DCMAKE_CXX_FLAGS=-I$cublas/include"
fi
script_rev=1
args="-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_NATIVE=OFF -DGGML_CUDA=ON"
args+=" -DCMAKE_CUDA_ARCHITECTURES=$ARCHS"
# No libcuda.so (the driver) on the build machines, not even its stub: without VMM ggml-cuda
# allocates through the runtime (cudaMalloc pools) and does not link the driver.
args+=" -DGGML_CUDA_NO_VMM=ON"
key=$(printf '%s\n' "$VERSION" "$args" "$nvcc_version" "$script_rev" | sha256sum | cut -c1-16)
dir="$CACHE/llama-ggml-cuda-$VERSION-$key"

if [ ! -f "$dir/BUILD_INFO" ]; then
  sdist="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
  if [ ! -f "$sdist" ]; then
    mkdir -p "$CACHE/sdist"
    "$PYTHON" -m pip download --no-deps --no-binary :all: -d "$CACHE/sdist" \
      "llama-cpp-python==$VERSION" >&2
  fi
  mkdir -p "$CACHE"
  tmp=$(mktemp -d "$CACHE/.cuda-tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$sdist" -C "$tmp"
  src="$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp"
  echo "ember: compiling llama.cpp's CUDA backend ($ARCHS, $nvcc_version) on $JOBS cores" >&2
  start=$(date +%s)
  # shellcheck disable=SC2086  # the flags are meant to split
  cmake -S "$src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_CURL=OFF -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN' \
    $args $cublas_args >&2
  cmake --build "$tmp/build" --target ggml-cuda -j "$JOBS" >&2
  seconds=$(( $(date +%s) - start ))
  built=$(find "$tmp/build" -name 'libggml-cuda.so' -type f | head -n1)
  if [ -z "$built" ]; then
    echo "ember: the CUDA build made no libggml-cuda.so" >&2
    exit 1
  fi
  mkdir -p "$tmp/final"
  cp "$built" "$tmp/final/libggml-cuda.so"
  strip --strip-unneeded "$tmp/final/libggml-cuda.so"
  {
    printf 'version=%s\ncmake_args=%s\nnvcc=%s\ncompile_seconds=%s\n' "$VERSION" "$args" \
      "$nvcc_version" "$seconds"
    printf 'bytes=%s\nneeds=%s\n' "$(stat -c %s "$tmp/final/libggml-cuda.so")" \
      "$(objdump -p "$tmp/final/libggml-cuda.so" | awk '/NEEDED/ {print $2}' | tr '\n' ' ')"
  } >"$tmp/final/BUILD_INFO"
  rm -rf "$dir"
  mv "$tmp/final" "$dir"
fi

if [ "${2:-}" = --install ]; then
  lib=$("$PYTHON" -c 'import importlib.util, pathlib; s = importlib.util.find_spec("llama_cpp"); print(pathlib.Path(s.origin).parent / "lib")')
  cp "$dir/libggml-cuda.so" "$lib/libggml-cuda.so"
  echo "ember: installed $lib/libggml-cuda.so" >&2
fi
if [ "${2:-}" = --pack ]; then
  here=$(dirname "$(readlink -f "$0")")
  "$PYTHON" "$here/cuda_module_manifest.py" "$dir/libggml-cuda.so" "${3:?--pack needs a folder}" \
    --archs "$ARCHS" --llama-cpp-version "$VERSION" ${EMBER_CUDA_MODULE_URL:+--url "$EMBER_CUDA_MODULE_URL"} \
    ${4:+"$4"} >&2
fi
echo "$dir"
