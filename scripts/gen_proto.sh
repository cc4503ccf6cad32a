#!/usr/bin/env bash
# Regenerate the Python code of the tiledispatch API beside its .proto files.
#
#   scripts/gen_proto.sh            # writes proto/tiledispatch/v1/*_pb2{,_grpc}.py and *_pb2.pyi
#   scripts/gen_proto.sh OUT_DIR    # writes the same tree under OUT_DIR instead (the drift test)
#
# Uses grpc_tools.protoc from the project's environment (grpcio-tools is pinned in the dev extra),
# with `-I proto`, so generated imports read `from tiledispatch.v1 import ...`, which pyproject's
# package-dir maps to proto/tiledispatch/v1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-"$root/.venv/bin/python"}
[ -x "$python" ] || python=python3
out=${1:-"$root/proto"}
mkdir -p "$out"
cd "$root/proto"
"$python" -m grpc_tools.protoc -I . \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  tiledispatch/v1/*.proto
