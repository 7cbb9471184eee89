#!/usr/bin/env bash
# Build (or reuse) the portable llama-cpp-python a bundle ships, with its AVX-512 variants
# and its Vulkan backend, and print the cache folder that holds them.
#
# One build for the set-up, the tests and the bundle, made with GGML_BACKEND_DL: ggml's
# backends are libraries of their own loaded at run time (libggml-cpu.so, libggml-vulkan.so),
# so the same files run on a machine with no GPU, no Vulkan loader or a broken driver (the CPU
# carries on: backends/llamacpp/ggml_backends.py loads them, by path, and says what failed).
#
# The development wheel (packaging/llama_cpp_wheel.sh) is -march=native: on an AVX-512 machine
# it dies with SIGILL on most consumer CPUs. This one is built for the x86-64-v3 baseline
# (AVX, AVX2, FMA, F16C, BMI2; no AVX-512, AVX-VNNI or AMX) with every ggml flag explicit:
# with SOURCE_DATE_EPOCH set, ggml's defaults silently drop to SSE.
#
# Variants: only the CPU backend depends on the instruction set, so a variant is that one
# module built again (cmake on the sdist's vendor/llama.cpp, target ggml-cpu only).
# backends/llamacpp/cpu_variant.py picks one at start from the CPU's flags, and it is loaded
# in place of the wheel's. Why not ggml's own GGML_CPU_ALL_VARIANTS: it compiles 14 x86
# variants (about 32 s each here, against 2), and its scoring would pick the
# sapphirerapids (AMX) build that segfaults on AMX CPUs (llama.cpp issue 20824).
#
# Vulkan (every GPU vendor, no toolkit for the user): built when glslc and the Vulkan headers
# are there (the test set-up installs them from Debian: packaging/system_packages.sh), else
# left out with a line saying so; EMBER_LLAMA_VULKAN=off leaves it out. Debian 12's headers
# (1.3.239) are older than llama.cpp's Vulkan code needs (VK_EXT_layer_settings), so newer
# ones come from Debian 13's libvulkan-dev (packaging/vulkan_headers.sh). Its glslc (2023.2)
# knows no cooperative-matrix or integer-dot-product shaders: those faster GPU paths need a
# newer glslc (a release build with the Vulkan SDK); what is built runs on every Vulkan 1.2
# device.
#
# Layout (the folder printed; keyed by version, flags and Python tag, not by this CPU):
#   llama_cpp_python-<version>-py3-none-linux_x86_64.whl   the portable baseline wheel
#                                      (llama_cpp/lib: libllama, libggml, libggml-base,
#                                      libggml-cpu.so and libggml-vulkan.so modules)
#   variants/<name>/libggml-cpu.so                        one CPU module per variant
#   variants/<name>/variant.json                          {"name", "rank", "requires", "cmake_args"}
#   variants/baseline.json                                the baseline's "requires" (no libs)
#   BUILD_INFO                                            versions, flags, compile seconds
#
# Built: the multimodal library (LLAVA_BUILD=ON: libmtmd.so, which links only libllama and
# libggml), through which Ember's llama.cpp engine reads images and audio
# (backends/llamacpp/vision.py). Not built: llama.cpp's "common" library (the tools' helper,
# unused by the Python bindings and by libmtmd; the sdist forces it on, so the build copy of
# its CMakeLists is patched, never the cached sdist), which shortens the compile.
#
# Environment: EMBER_WHEEL_CACHE (default ~/.cache/ember/wheels, shared with the dev wheel
# and its sdist cache), EMBER_LLAMA_CPP_VERSION (default 0.3.36), EMBER_BUILD_JOBS,
# EMBER_LLAMA_VULKAN (auto | off).
set -euo pipefail

PYTHON=${1:-python3}
VERSION=${EMBER_LLAMA_CPP_VERSION:-0.3.36}
CACHE=${EMBER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ember/wheels}
JOBS=${EMBER_BUILD_JOBS:-$(nproc)}

if [ "$(uname -s)" != Linux ] || [ "$(uname -m)" != x86_64 ]; then
  echo "ember: the portable llama.cpp build is for x86-64 Linux; this is $(uname -s) $(uname -m)" >&2
  exit 2
fi

# x86-64-v3 for ggml-cpu. Everything explicit, so no default (native, SOURCE_DATE_EPOCH) leaks in.
common_args="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON"
common_args+=" -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF"
common_args+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
baseline_args="$common_args -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF"
dl_args="-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=OFF"
wheel_args="$baseline_args $dl_args -DLLAVA_BUILD=ON -DLLAMA_BUILD_COMMON=OFF"

vulkan_args=""
if [ "${EMBER_LLAMA_VULKAN:-auto}" = off ]; then
  echo "ember: llama.cpp's Vulkan backend left out (EMBER_LLAMA_VULKAN=off)" >&2
elif ! command -v glslc >/dev/null; then
  echo "ember: llama.cpp's Vulkan backend left out: no glslc (Debian: apt install glslc" \
       "libvulkan-dev spirv-headers)" >&2
elif headers=$(bash "$(dirname "$0")/vulkan_headers.sh"); then
  vulkan_args="-DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR=$headers"
else
  echo "ember: llama.cpp's Vulkan backend left out: no Vulkan headers it can build with" >&2
fi
wheel_args+=" $vulkan_args"

# name|rank|cpuinfo flags required beyond the baseline|cmake flags
# avx512: x86-64-v4 (F, CD, BW, DQ, VL): Skylake-X and later Xeons, Ice/Tiger/Rocket Lake,
#         Zen 4, Zen 5.
# avx512_vnni: + VBMI and VNNI, what Ice Lake, Sapphire Rapids and Zen 4/5 add (not Skylake-X;
#         Cascade Lake has VNNI but no VBMI). BF16 is left out: Ice Lake lacks it.
variants=(
  "avx512|10|avx512f avx512cd avx512bw avx512dq avx512vl|$common_args -DGGML_AVX512=ON -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF"
  "avx512_vnni|20|avx512f avx512cd avx512bw avx512dq avx512vl avx512vbmi avx512_vnni|$common_args -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=OFF"
)
baseline_requires="avx avx2 fma f16c bmi2 sse4_2"

py_tag=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
script_rev=5  # bump when the build steps change what lands in the folder
glslc_version=$( (command -v glslc >/dev/null && [ -n "$vulkan_args" ] && glslc --version | head -n1) || true)
key=$(printf '%s\n' "$VERSION" "$wheel_args" "${variants[@]}" "$py_tag" "$script_rev" "$glslc_version" | sha256sum | cut -c1-16)
dir="$CACHE/llama-cpp-python-$VERSION-portable-$py_tag-$key"

if [ -f "$dir/BUILD_INFO" ]; then
  echo "$dir"
  exit 0
fi

sdist="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$sdist" ]; then
  mkdir -p "$CACHE/sdist"
  "$PYTHON" -m pip download --no-deps --no-binary :all: -d "$CACHE/sdist" \
    "llama-cpp-python==$VERSION" >&2
fi

mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/.portable-tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$sdist" -C "$tmp"
src="$tmp/llama_cpp_python-$VERSION"

# The sdist forces LLAMA_BUILD_COMMON on; drop the FORCE in this build copy so OFF holds.
force_line='set(LLAMA_BUILD_COMMON ON CACHE BOOL "Build llama.cpp common library" FORCE)'
if [ "$(grep -cF "$force_line" "$src/CMakeLists.txt")" != 1 ]; then
  echo "ember: $src/CMakeLists.txt no longer forces LLAMA_BUILD_COMMON as expected; update $0" >&2
  exit 1
fi
sed -i "s|$(printf '%s' "$force_line" | sed 's/[][\.*^$|]/\\&/g')|# (ember: LLAMA_BUILD_COMMON left to the command line)|" "$src/CMakeLists.txt"

echo "ember: compiling portable llama-cpp-python $VERSION (x86-64-v3${vulkan_args:+, Vulkan}) on $JOBS cores" >&2
start=$(date +%s)
CMAKE_ARGS="$wheel_args" CMAKE_BUILD_PARALLEL_LEVEL=$JOBS \
  "$PYTHON" -m pip wheel --no-deps --no-cache-dir -w "$tmp/out" "$src" >&2
wheel_seconds=$(( $(date +%s) - start ))
wheel=$(ls "$tmp"/out/llama_cpp_python-*.whl)

"$PYTHON" -m zipfile -e "$wheel" "$tmp/wheel-unpacked"
for lib in libggml-cpu.so libggml.so libllama.so libmtmd.so; do
  if [ ! -e "$tmp/wheel-unpacked/llama_cpp/lib/$lib" ]; then
    echo "ember: the wheel has no llama_cpp/lib/$lib: was it built with GGML_BACKEND_DL?" >&2
    exit 1
  fi
done
if [ -n "$vulkan_args" ] && [ ! -e "$tmp/wheel-unpacked/llama_cpp/lib/libggml-vulkan.so" ]; then
  echo "ember: the wheel has no llama_cpp/lib/libggml-vulkan.so though Vulkan was asked for" >&2
  exit 1
fi

variant_info=""
for spec in "${variants[@]}"; do
  IFS='|' read -r name rank requires args <<<"$spec"
  echo "ember: compiling libggml-cpu for variant $name" >&2
  build="$tmp/build-$name"
  start=$(date +%s)
  # shellcheck disable=SC2086  # the flags are meant to split
  cmake -S "$src/vendor/llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_CURL=OFF -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN' \
    $dl_args $args >&2
  cmake --build "$build" --target ggml-cpu -j "$JOBS" >&2
  seconds=$(( $(date +%s) - start ))

  built=$(find "$build" -name 'libggml-cpu.so' -type f | head -n1)
  if [ -z "$built" ]; then
    echo "ember: variant $name built no libggml-cpu.so module" >&2
    exit 1
  fi
  out="$tmp/variants/$name"
  mkdir -p "$out"
  cp "$built" "$out/libggml-cpu.so"
  requires_json=$("$PYTHON" -c 'import json,sys; print(json.dumps(sys.argv[1].split()))' "$baseline_requires $requires")
  printf '{"name": "%s", "rank": %s, "requires": %s, "cmake_args": "%s", "compile_seconds": %s}\n' \
    "$name" "$rank" "$requires_json" "$args" "$seconds" >"$out/variant.json"
  variant_info+="variant_${name}_compile_seconds=$seconds"$'\n'
done

baseline_json=$("$PYTHON" -c 'import json,sys; print(json.dumps({"name": "baseline", "rank": 0, "requires": sys.argv[1].split()}))' "$baseline_requires")
printf '%s\n' "$baseline_json" >"$tmp/variants/baseline.json"

mkdir -p "$tmp/final"
mv "$wheel" "$tmp/final/"
mv "$tmp/variants" "$tmp/final/variants"
{
  printf 'version=%s\npython_tag=%s\nbaseline_requires=%s\n' "$VERSION" "$py_tag" "$baseline_requires"
  printf 'wheel_cmake_args=%s\nwheel_compile_seconds=%s\n' "$wheel_args" "$wheel_seconds"
  printf 'vulkan=%s\nglslc=%s\n' "$([ -n "$vulkan_args" ] && echo on || echo off)" "$glslc_version"
  printf '%s' "$variant_info"
  printf 'built_on=%s\n' "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
} >"$tmp/final/BUILD_INFO"
rm -rf "$dir"
mv "$tmp/final" "$dir"   # atomic: a half-built folder is never found by the next run
echo "$dir"
