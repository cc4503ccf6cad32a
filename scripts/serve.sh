#!/usr/bin/env bash
# Starts the service on its embedded defaults: 127.0.0.1:50051 (gRPC), :9464 (/metrics), the
# shipped models, a SQLite tuning database under ~/.cache/tiledispatch, and on a host without a GPU
# the CPU fallback (Select from the models, Run on the float64 reference). Installs what it needs
# into .venv first. Extra arguments go to 'tiledispatch serve' (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q -e ".[gpu]"
else
  .venv/bin/python -m pip install -q -e .
fi
exec .venv/bin/tiledispatch serve "$@"
