#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine (no GPU needed): creates .venv, installs the CPU
# build of torch first (so nothing pulls a multi-GB CUDA build), the project with its gpu and dev
# extras, then lint, generated-code check and pytest, one worker per core (pytest-xdist;
# TILEDISPATCH_TEST_WORKERS=0 runs in one process). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[gpu,dev]"
.venv/bin/ruff check .
set +e
.venv/bin/python -m pytest -n "${TILEDISPATCH_TEST_WORKERS:-auto}" "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
