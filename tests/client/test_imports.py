"""The client stays thin: importing it loads no torch, triton, lightgbm, nor the server or native code."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("torch", "triton", "lightgbm", "pandas", "tiledispatch.native", "tiledispatch.server",
             "tiledispatch.models", "prometheus_client")


def test_client_imports_only_grpc_protobuf_numpy():
    code = ("import sys, json; import tiledispatch.client, tiledispatch.client.cli; "
            "print(json.dumps(sorted({m.split('.')[0] if not m.startswith('tiledispatch') else "
            "'.'.join(m.split('.')[:2]) for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    assert not {name for name in FORBIDDEN if name in loaded}, loaded
    assert {"grpc", "google", "numpy", "tiledispatch.v1", "tiledispatch.client"} <= loaded


def test_importing_has_no_side_effects():
    code = ("import threading, tiledispatch.client, tiledispatch.server.main; "
            "print(threading.active_count())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1" and done.stderr == ""
