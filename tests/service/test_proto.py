"""The API definition: generated code matches the .proto, and buf's STANDARD lint passes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .harness import REPO

GENERATED = ("tiledispatch_pb2.py", "tiledispatch_pb2_grpc.py", "tiledispatch_pb2.pyi")
BUF = Path(sys.executable).parent / "buf"


def test_generated_code_is_current(tmp_path):
    subprocess.run(["bash", str(REPO / "scripts" / "gen_proto.sh"), str(tmp_path)], check=True,
                   env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    stale = [name for name in GENERATED
             if (tmp_path / "tiledispatch" / "v1" / name).read_bytes()
             != (REPO / "proto" / "tiledispatch" / "v1" / name).read_bytes()]
    assert not stale, f"regenerate with scripts/gen_proto.sh: {stale} differ from the .proto"


def test_buf_lint():
    buf = str(BUF) if BUF.exists() else shutil.which("buf")
    if buf is None:
        pytest.skip("the buf binary is not installed")
    done = subprocess.run([buf, "lint"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_generated_imports_use_the_package_path():
    text = (REPO / "proto" / "tiledispatch" / "v1" / "tiledispatch_pb2_grpc.py").read_text()
    assert "from tiledispatch.v1 import tiledispatch_pb2" in text
