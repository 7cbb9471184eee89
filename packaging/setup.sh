#!/usr/bin/env bash
# Set Ember up in ./.venv (idempotent), then start it or run the test suite.
#
#   bash packaging/setup.sh           set up, install the default model, start Ember
#   bash packaging/setup.sh --test    set up (with test tools), lint, type-check and run the
#                                     whole test suite
#
# Needs Python 3.11+ and a C/C++ compiler with CMake (llama-cpp-python compiles once per
# machine, about 3 minutes on 2 cores on x86-64 Linux, where it is the portable build a bundle
# ships, plus about 2.5 for its Vulkan backend where glslc and the Vulkan headers are
# installed; kept in ~/.cache/ember/wheels). EMBER_LLAMA_VARIANT=baseline runs llama.cpp as an
# AVX2-only CPU would (backends/llamacpp/cpu_variant.py).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=start
if [ "${1:-}" = "--test" ]; then mode=test; shift; fi
if [ "${1:-}" = "--start" ]; then shift; fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "ember: needs Python 3.11 or newer (found: $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
VENV=${EMBER_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
py="$VENV/bin/python"
pip_q=(-m pip install --quiet --disable-pip-version-check)
# pip >= 24.1 reports download progress in a form Ember reads ("--progress-bar raw").
"$py" "${pip_q[@]}" --upgrade "pip>=24.1"
# The tests' Debian packages come first: they include what llama.cpp's Vulkan backend builds
# with (glslc, the Vulkan headers) and runs the tests on (Mesa's lavapipe, a CPU Vulkan device).
if [ "$mode" = test ]; then bash packaging/system_packages.sh; fi
bash packaging/install_llama_cpp.sh "$py"

if [ "$mode" = test ]; then
  # mlx and cuda: the tests run both on this CPU (mlx[cpu]; torch's CPU build, pinned)
  "$py" "${pip_q[@]}" -e ".[gui,serve,mlx,cuda,dev]"
  # Lint and type-check first (seconds; mypy about 40 s with a cold cache), so pytest's
  # summary is the run's last line; either failing stops the run.
  "$py" -m ruff check .
  PYTHON="$py" bash packaging/typecheck.sh
  export PYTHONFAULTHANDLER=1
  if [ "${EMBER_LLAMA_VARIANT:-}" = baseline ]; then
    # The whole suite as an AVX2-only CPU runs it: llama.cpp's AVX2 build, and the libraries
    # that pick kernels at run time from the CPU they find held to AVX2 as well (torch's ATen
    # for the cuda engine on the CPU, oneDNN, MKL, numpy). tests/conftest.py prints them.
    export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
    export NPY_DISABLE_CPU_FEATURES="AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"
  fi
  exec "$py" -m pytest "$@"
fi
extras=gui,serve
# Apple Silicon gets the mlx backend (Metal); elsewhere it stays optional (`pip install -e .[mlx]`).
if [ "$(uname -s)-$(uname -m)" = "Darwin-arm64" ]; then extras=gui,serve,mlx; fi
"$py" "${pip_q[@]}" -e ".[$extras]"
"$VENV/bin/ember" pull qwen2.5-coder-0.5b-instruct
exec "$VENV/bin/ember" "$@"
