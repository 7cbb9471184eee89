#!/usr/bin/env bash
# Build (or reuse) the portable llama-cpp-python a bundle ships, with its AVX-512 variants,
# and print the cache folder that holds them.
#
# The development wheel (packaging/llama_cpp_wheel.sh) is -march=native: on an AVX-512 machine
# it dies with SIGILL on most consumer CPUs. This one is built for the x86-64-v3 baseline
# (AVX, AVX2, FMA, F16C, BMI2; no AVX-512, AVX-VNNI or AMX) with every ggml flag explicit:
# with SOURCE_DATE_EPOCH set, ggml's defaults silently drop to SSE.
#
# Variants: only libggml-cpu depends on the instruction set, so a variant is that one library
# built again (cmake on the sdist's vendor/llama.cpp, target ggml-cpu only) and placed in a
# copy of the wheel's lib folder. backends/llamacpp/cpu_variant.py picks one at start from the
# CPU's flags and points LLAMA_CPP_LIB_PATH at it.
#
# Layout (the folder printed; keyed by version, flags and Python tag, not by this CPU):
#   llama_cpp_python-<version>-py3-none-linux_x86_64.whl   the portable baseline wheel
#   variants/<name>/libllama.so ... libggml-cpu.so        one lib folder per variant
#   variants/<name>/variant.json                          {"name", "rank", "requires", "cmake_args"}
#   variants/baseline.json                                the baseline's "requires" (no libs)
#   BUILD_INFO                                            versions, flags, compile seconds
#
# Not built: the multimodal library (LLAVA_BUILD=OFF; Ember loads no mtmd chat handler and
# llama_cpp imports mtmd_cpp only inside those handlers) and llama.cpp's "common" library
# (the tools' helper, unused by the Python bindings; the sdist forces it on, so the build
# copy of its CMakeLists is patched, never the cached sdist). Both shorten the compile.
#
# Environment: EMBER_WHEEL_CACHE (default ~/.cache/ember/wheels, shared with the dev wheel
# and its sdist cache), EMBER_LLAMA_CPP_VERSION (default 0.3.36), EMBER_BUILD_JOBS.
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
wheel_args="$baseline_args -DLLAVA_BUILD=OFF -DLLAMA_BUILD_COMMON=OFF"

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
script_rev=3  # bump when the build steps change what lands in the folder
key=$(printf '%s\n' "$VERSION" "$wheel_args" "${variants[@]}" "$py_tag" "$script_rev" | sha256sum | cut -c1-16)
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

echo "ember: compiling portable llama-cpp-python $VERSION (x86-64-v3) on $JOBS cores" >&2
start=$(date +%s)
CMAKE_ARGS="$wheel_args" CMAKE_BUILD_PARALLEL_LEVEL=$JOBS \
  "$PYTHON" -m pip wheel --no-deps --no-cache-dir -w "$tmp/out" "$src" >&2
wheel_seconds=$(( $(date +%s) - start ))
wheel=$(ls "$tmp"/out/llama_cpp_python-*.whl)

mkdir -p "$tmp/wheel-libs"
"$PYTHON" -m zipfile -e "$wheel" "$tmp/wheel-unpacked"
cp "$tmp"/wheel-unpacked/llama_cpp/lib/*.so* "$tmp/wheel-libs/"

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
    $args >&2
  cmake --build "$build" --target ggml-cpu -j "$JOBS" >&2
  seconds=$(( $(date +%s) - start ))

  built=$(find "$build" -name 'libggml-cpu.so.*.*.*' -type f | head -n1)
  real=$(basename "$built")
  if [ ! -f "$tmp/wheel-libs/$real" ]; then
    echo "ember: variant $name built $real but the wheel has no such library (version skew?)" >&2
    exit 1
  fi
  out="$tmp/variants/$name"
  mkdir -p "$out"
  # One real file per library under its full version, the SONAME and linker names as
  # relative symlinks, as cmake installs them (the wheel's three copies are zip's doing).
  for lib in "$tmp"/wheel-libs/lib*.so.*.*.*; do
    base=$(basename "$lib")
    if [ "${base%%.so.*}" = libggml-cpu ]; then cp "$built" "$out/$base"; else cp "$lib" "$out/$base"; fi
    soname=$(readelf -d "$out/$base" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    ln -s "$base" "$out/$soname"
    ln -s "$soname" "$out/${base%%.so.*}.so"
  done
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
  printf '%s' "$variant_info"
  printf 'built_on=%s\n' "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
} >"$tmp/final/BUILD_INFO"
rm -rf "$dir"
mv "$tmp/final" "$dir"   # atomic: a half-built folder is never found by the next run
echo "$dir"
