#!/usr/bin/env bash
# The coding agents' real CLIs, pinned, for the tests that run them against `ember serve`
# (tests/integration/test_agent_clis.py): npm packages installed once per set of pins into
# ~/.cache/ember/agents/PINS-HASH (about 10 s and 250 MB). Prints the folder of their
# executables. Needs Node.js 18+ with npm (installed with apt-get when missing and possible).
set -euo pipefail

pins=(@anthropic-ai/claude-code@2.1.328 @openai/codex@0.169.0)
hash=$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-12)
dir=${EMBER_AGENTS_DIR:-$HOME/.cache/ember/agents}/$hash
if [ ! -f "$dir/.installed" ]; then
  if ! command -v npm >/dev/null; then
    if command -v apt-get >/dev/null; then
      sudo=()
      [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
      echo "ember: installing Node.js and npm from Debian for the agent CLI tests" >&2
      "${sudo[@]}" apt-get update -qq
      DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
        --no-install-recommends nodejs npm >/dev/null
    else
      echo "ember: the agent CLI tests need Node.js 18+ with npm" >&2
      exit 1
    fi
  fi
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  npm install --prefix "$dir.tmp" --no-audit --no-fund --loglevel=error "${pins[@]}" >&2
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
  touch "$dir/.installed"
fi
echo "$dir/node_modules/.bin"
