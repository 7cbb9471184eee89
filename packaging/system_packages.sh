#!/usr/bin/env bash
# The Debian packages the test suite needs beyond Python: what llama.cpp's Vulkan backend
# builds with and runs the tests on (Mesa's lavapipe), a real X server, a tray host for it
# and the tools that drive it (the window, tray and bundle tests), the Linux packaging tools
# (bundle, .deb, clean-root install, NSIS compile) and the X libraries Qt's xcb platform
# plugin loads at build time (docs/notes/packaging-traps.md, trap 6). Installed with apt-get
# as root, or through passwordless sudo.
# On another system, install the equivalents by hand; the tests that need them fail with the
# missing command's name.
set -euo pipefail

packages=(
  xvfb xauth xdotool x11-utils imagemagick              # real-window tests, screenshots
  trayer                                                # a tray on Xvfb (the tray icon)
  debootstrap dpkg-dev binutils zstd nsis               # bundle, .deb, clean root, installer
  desktop-file-utils appstream                          # .desktop and metainfo validation
  systemd                                               # systemd-analyze verify (ember service)
  fontconfig fonts-dejavu-core libegl1 libgl1 libfontconfig1 libdbus-1-3
  libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 libxcb-image0 libxcb-render-util0
  libxcb-randr0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1 libxkbcommon-x11-0
  libwayland-client0 libwayland-cursor0 libwayland-egl1
  glslc libvulkan-dev spirv-headers                     # llama.cpp's Vulkan backend (build)
  libvulkan1 mesa-vulkan-drivers                        # ... and lavapipe, a CPU Vulkan device
  libopenblas0-pthread                                  # MLX's BLAS (backends/mlx/cpu_blas.py)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "ember: the tests need these Debian packages (or your system's equivalents):" \
       "${missing[*]}" >&2
  exit 1
fi
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
echo "ember: installing ${#missing[@]} Debian packages for the tests: ${missing[*]}" >&2
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
