#!/usr/bin/env bash
# Build Ember.app and Ember-<version>.dmg on macOS (Apple Silicon or Intel; a macOS runner in
# .github/workflows/release.yml):
#
#   bash packaging/macos/build_macos.sh      -> dist/Ember.app, dist/Ember-<version>.dmg
#
# llama.cpp builds with Metal on Apple Silicon (its default there); Apple Silicon also gets the
# mlx backend. The app is signed ad hoc (Apple Silicon refuses unsigned code); a notarized
# release signs it again with a Developer ID (codesign + notarytool) before the dmg is made.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3}
DIST=${EMBER_DIST:-dist}
BUILD=${EMBER_BUILD_DIR:-build}
venv="$BUILD/bundle-venv"
py="$venv/bin/python"
[ -x "$py" ] || "$PYTHON" -m venv "$venv"
"$py" -m pip install --quiet --upgrade "pip>=24.1"
extras=gui,serve
if [ "$(uname -m)" = arm64 ]; then extras=gui,serve,mlx; fi
# Intel Macs: a portable AVX2 baseline, as on Linux; Apple Silicon: Metal (llama.cpp's default).
if [ "$(uname -m)" = x86_64 ]; then
  export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_METAL=OFF"
fi
"$py" -m pip install --quiet --no-cache-dir "llama-cpp-python==0.3.36"
"$py" -m pip install --quiet -e ".[$extras]" "pyinstaller==6.22.3" "pyinstaller-hooks-contrib>=2026.9" "pillow>=10"
"$py" packaging/icons.py "$BUILD/icons"
EMBER_ICON_DIR="$BUILD/icons" "$py" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$DIST" --workpath "$BUILD/pyinstaller" packaging/pyinstaller/ember.spec
codesign --force --deep --sign - "$DIST/Ember.app"
"$DIST/Ember.app/Contents/MacOS/ember" --version

version=$("$py" -c 'import app; print(app.__version__)')
staging=$(mktemp -d)
cp -R "$DIST/Ember.app" "$staging/"
ln -s /Applications "$staging/Applications"   # drag Ember onto Applications to install
hdiutil create -volname Ember -srcfolder "$staging" -ov -format UDZO "$DIST/Ember-$version.dmg"
rm -rf "$staging"
