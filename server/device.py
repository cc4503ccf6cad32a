"""What hardware and software this server runs on, found without a CUDA context in the server
process: the GPU probe runs in a child interpreter (DESIGN §2: no CUDA context before worker
processes exist), and versions come from package metadata, not imports."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass

log = logging.getLogger("tiledispatch.server.device")

_PROBE = """
import json, torch
out = {"cuda": torch.version.cuda or "", "devices": []}
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out["devices"].append({"index": i, "name": p.name, "capability": [p.major, p.minor],
                               "memory_bytes": p.total_memory})
print(json.dumps(out))
"""


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    capability: tuple[int, int]


def probe_gpus(timeout_s: float = 120.0) -> tuple[list[GpuDevice], str]:
    """The CUDA devices torch sees (and torch's CUDA version), asked of a child interpreter.

    No torch, or a torch without CUDA, means no GPU: GPU work needs torch anyway.
    """
    if importlib.util.find_spec("torch") is None:
        return [], ""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s,
                              check=True)
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, json.JSONDecodeError, IndexError, OSError) as error:
        log.warning("GPU probe failed; serving without a GPU", extra={"error": str(error)})
        return [], ""
    devices = [GpuDevice(d["index"], d["name"], tuple(d["capability"])) for d in found["devices"]]
    return devices, found.get("cuda", "")


def driver_version() -> str:
    """The NVIDIA driver version, from nvidia-smi when it is installed."""
    if shutil.which("nvidia-smi") is None:
        return ""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=True)
        return done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    except (subprocess.SubprocessError, OSError):
        return ""


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def software_versions() -> dict[str, str]:
    import grpc

    from tiledispatch import __version__

    return {"tiledispatch": __version__, "torch": package_version("torch"), "triton": package_version("triton"),
            "python": platform.python_version(), "grpc": grpc.__version__}
