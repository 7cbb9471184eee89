#!/usr/bin/env bash
# Print an include folder whose Vulkan headers llama.cpp's Vulkan backend builds with.
#
# llama.cpp's Vulkan code uses VK_EXT_layer_settings (Vulkan headers 1.3.272 and later).
# The system's headers are used when they have it (Debian 13, Ubuntu 24.04, the Vulkan SDK);
# Debian 12's are 1.3.239, so there the headers of Debian 13's libvulkan-dev are fetched once
# from the Debian archive (pinned by SHA-256), unpacked into the cache and printed instead.
# Headers only: the program links the system's Vulkan loader (libvulkan.so.1), whose ABI is
# stable, and at run time uses whatever loader and drivers the user's machine has.
#
# Exit status 1 (and a line on stderr) when neither is available.
set -euo pipefail

CACHE=${EMBER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ember/wheels}
DEB_VERSION=1.4.309.0-1
DEB_URL=${EMBER_VULKAN_HEADERS_URL:-http://deb.debian.org/debian/pool/main/v/vulkan-loader/libvulkan-dev_${DEB_VERSION}_amd64.deb}
DEB_SHA256=8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a

has_layer_settings() {
  grep -q "VK_EXT_layer_settings" "$1/vulkan/vulkan_core.h" 2>/dev/null
}

system=${EMBER_VULKAN_INCLUDE:-/usr/include}
if has_layer_settings "$system"; then
  echo "$system"
  exit 0
fi

dir="$CACHE/vulkan-headers-$DEB_VERSION"
if has_layer_settings "$dir/include"; then
  echo "$dir/include"
  exit 0
fi

echo "ember: the Vulkan headers in $system are too old for llama.cpp (no VK_EXT_layer_settings);" \
     "fetching Debian's libvulkan-dev $DEB_VERSION headers" >&2
mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/.vulkan-headers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! curl -fsSL --retry 3 -o "$tmp/headers.deb" "$DEB_URL"; then
  echo "ember: could not download $DEB_URL" >&2
  exit 1
fi
if [ "$(sha256sum "$tmp/headers.deb" | cut -d' ' -f1)" != "$DEB_SHA256" ]; then
  echo "ember: $DEB_URL does not have the expected SHA-256 ($DEB_SHA256)" >&2
  exit 1
fi
# A .deb is an ar archive holding data.tar.*; dpkg-deb is there on Debian, ar everywhere
if command -v dpkg-deb >/dev/null; then
  dpkg-deb -x "$tmp/headers.deb" "$tmp/root"
else
  (cd "$tmp" && ar x headers.deb && mkdir root && tar -xf data.tar.* -C root)
fi
mkdir -p "$tmp/final/include"
cp -a "$tmp/root/usr/include/vulkan" "$tmp/root/usr/include/vk_video" "$tmp/final/include/"
rm -rf "$dir"
mv "$tmp/final" "$dir"   # atomic: a half-unpacked folder is never found by the next run
echo "$dir/include"
