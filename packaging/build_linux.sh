#!/usr/bin/env bash
# Build Ember's Linux artifacts from one command:
#
#   bash packaging/build_linux.sh            -> dist/ember/                      onedir bundle
#                                               dist/ember_<version>_amd64.deb
#                                               dist/ember-<version>-linux-x86_64.tar.zst
#                                               dist/Ember.AppDir/               AppImage input
#                                               dist/build-report.json           sizes, checks
#
# The AppImage file itself: on a release machine with internet (appimagetool downloads its
# runtime), `appimagetool dist/Ember.AppDir dist/Ember-<version>-x86_64.AppImage`
# (.github/workflows/release.yml does this).
#
# Needs Python 3.11+, a C/C++ compiler and CMake (the portable llama.cpp compiles once per
# machine and is cached, packaging/llama_cpp_portable.sh), binutils, dpkg-dev and zstd.
# The bundle is built in its own venv (build/bundle-venv) so the developer's native llama.cpp
# build never ends up in it. Set EMBER_DIST to write elsewhere than dist/.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
DIST=${EMBER_DIST:-dist}
BUILD=${EMBER_BUILD_DIR:-build}
venv="$BUILD/bundle-venv"
py="$venv/bin/python"
pip_q=(-m pip install --quiet --disable-pip-version-check)

started=$(date +%s)
portable=$(bash packaging/llama_cpp_portable.sh "$PYTHON")   # folder: wheel + variants/
[ -x "$py" ] || "$PYTHON" -m venv "$venv"
"$py" "${pip_q[@]}" --upgrade "pip>=24.1"
# The portable llama.cpp, reinstalled when the cached build changed (its path is its key).
marker="$venv/.llama-build"
if [ "$(cat "$marker" 2>/dev/null)" != "$portable" ]; then
  "$py" "${pip_q[@]}" --force-reinstall --no-deps "$portable"/llama_cpp_python-*.whl
  echo "$portable" > "$marker"
fi
"$py" "${pip_q[@]}" -e ".[gui,serve]" "pyinstaller==6.22.3" "pyinstaller-hooks-contrib>=2026.9" "pillow>=10"

"$py" packaging/icons.py "$BUILD/icons"
EMBER_ICON_DIR="$BUILD/icons" EMBER_LLAMA_VARIANTS="$portable/variants" \
  "$py" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$DIST" --workpath "$BUILD/pyinstaller" packaging/pyinstaller/ember.spec
bundled=$(date +%s)

"$py" packaging/linux_packages.py --bundle "$DIST/ember" --icons "$BUILD/icons" --out "$DIST" \
  --build-seconds "$((bundled - started))"
