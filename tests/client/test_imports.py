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


def test_client_imports_when_only_grpcio_protobuf_numpy_are_installed():
    """A finder refuses every top-level module that is neither the standard library nor what
    grpcio, protobuf and numpy install: the client and its CLI must import and build a request."""
    code = """
import importlib.abc, sys
# grpcio brings typing_extensions with it (its own dependency).
ALLOWED = set(sys.stdlib_module_names) | {"grpc", "google", "numpy", "typing_extensions", "tiledispatch",
                                         "_distutils_hack"}
class OnlyThese(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in ALLOWED:
            raise ImportError(f"{name} is not installed in this test")
        return None
sys.meta_path.insert(0, OnlyThese())
import tiledispatch.client, tiledispatch.client.cli
from tiledispatch.client import Client
client = Client("127.0.0.1:1")
client.close()
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
