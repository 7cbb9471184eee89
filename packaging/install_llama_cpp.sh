#!/usr/bin/env bash
# Install llama-cpp-python into the Python given (a venv's), built once per machine and cached.
#
#   bash packaging/install_llama_cpp.sh .venv/bin/python
#
# x86-64 Linux: the portable build a bundle ships (packaging/llama_cpp_portable.sh: the
# x86-64-v3 baseline wheel plus AVX-512 variants of libggml-cpu), with the variants put beside
# the package's lib folder, where backends/llamacpp/cpu_variant.py finds them. The set-up and
# the tests then run the same llama.cpp a user's bundle runs, one compile serves both (about
# 3 minutes on 2 cores, against 9 for a -march=native wheel and 3 more for the bundle's), and
# `EMBER_LLAMA_VARIANT=baseline` runs everything as an AVX2-only CPU would.
# Elsewhere (macOS, ARM Linux), or with EMBER_LLAMA_AMX=1 (the portable build has no AMX: see
# llama_cpp_wheel.sh): the wheel built for this machine (packaging/llama_cpp_wheel.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

py=${1:?usage: install_llama_cpp.sh PYTHON}
pip_q=(-m pip install --quiet --disable-pip-version-check)

site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ] || [ "${EMBER_LLAMA_AMX:-0}" = 1 ]; then
  wheel=$(bash packaging/llama_cpp_wheel.sh "$py")
  "$py" "${pip_q[@]}" "$wheel"
  if [ -d "$site/llama_cpp/variants" ]; then  # the portable build was there: replace it
    "$py" "${pip_q[@]}" --force-reinstall --no-deps "$wheel"
    rm -rf "$site/llama_cpp/variants"
  fi
  exit 0
fi

portable=$(bash packaging/llama_cpp_portable.sh "$py")
wheel=$(ls "$portable"/llama_cpp_python-*.whl)
# The cache folder's name is the build's key: reinstall when it differs from what is in place
# (a wheel of the same version built otherwise would count as installed to pip).
stamp="$site/llama_cpp/variants/BUILD_KEY"
if [ "$(cat "$stamp" 2>/dev/null || true)" = "$(basename "$portable")" ]; then
  exit 0
fi
"$py" "${pip_q[@]}" "$wheel"  # its dependencies (numpy, diskcache, jinja2)
"$py" "${pip_q[@]}" --force-reinstall --no-deps "$wheel"
rm -rf "$site/llama_cpp/variants"
cp -a "$portable/variants" "$site/llama_cpp/variants"
basename "$portable" >"$stamp"
