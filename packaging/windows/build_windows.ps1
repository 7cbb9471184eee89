# Build Ember for Windows x64 on a Windows machine (a windows runner in
# .github/workflows/release.yml):
#
#   pwsh packaging/windows/build_windows.ps1   -> dist\ember\ (Ember.exe, ember-cli.exe, _internal\)
#                                               dist\Ember-<version>-setup.exe (NSIS installer)
#
# Needs Python 3.11, Visual Studio Build Tools (C++ and CMake) for llama.cpp and NSIS (makensis).
# llama.cpp is built portable (AVX2 baseline, no -march=native), as on Linux.
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..\..")

$venv = "build\bundle-venv"
if (-not (Test-Path "$venv\Scripts\python.exe")) { python -m venv $venv }
$py = "$venv\Scripts\python.exe"
& $py -m pip install --quiet --upgrade "pip>=24.1"
$env:CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF"
& $py -m pip install --quiet --no-cache-dir "llama-cpp-python==0.3.36"
if ($LASTEXITCODE -ne 0) { throw "llama-cpp-python did not build" }
& $py -m pip install --quiet -e ".[gui,serve]" "pyinstaller==6.22.3" "pyinstaller-hooks-contrib>=2026.9" "pillow>=10"
& $py packaging/icons.py build/icons
$env:EMBER_ICON_DIR = "build\icons"
& $py -m PyInstaller --noconfirm --clean --log-level WARN --distpath dist --workpath build\pyinstaller packaging\pyinstaller\ember.spec
if ($LASTEXITCODE -ne 0) { throw "PyInstaller failed" }
& dist\ember\ember-cli.exe --version
if ($LASTEXITCODE -ne 0) { throw "the bundle does not start" }

$version = & $py -c "import app; print(app.__version__)"
makensis "-DVERSION=$version" "-DPAYLOAD=dist\ember" "-DICON=build\icons\ember.ico" "-DOUTFILE=dist\Ember-$version-setup.exe" packaging\windows\ember.nsi
if ($LASTEXITCODE -ne 0) { throw "makensis failed" }
