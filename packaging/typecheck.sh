#!/usr/bin/env bash
# Type-check the typed core with mypy: what it checks and how strictly is [tool.mypy] in
# pyproject.toml. Runs in the environment packaging/setup.sh --test made (its dev extra has
# mypy); PYTHON picks another interpreter. The exit status is mypy's.
#
#   bash packaging/typecheck.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-${EMBER_VENV:-.venv}/bin/python}" -m mypy "$@"
