"""A CPU stand-in for the GPU handler, so the worker machinery (spawned processes, crash and hang
isolation, restarts, quarantine) and the GPU-only RPC paths run on hosts without a GPU.

It "runs" kernels with the float64 reference and "measures" them with made-up but deterministic
times. Faults are asked for by kernel name, through the handler options or the environment
variable ``TILEDISPATCH_FAKE_FAULTS`` (``crash:<kernel>,hang:<kernel>,fatal:<kernel>,error:<kernel>``)
so a server started as a subprocess can be told too.
"""

from __future__ import annotations

import os
import time
import zlib

import numpy as np

from tiledispatch.native.problem import ConvProblem, DType
from tiledispatch.native.reference import run_reference
from tiledispatch.v1 import codec

WIRE = {DType.BF16: np.dtype("<u2"), DType.FP16: np.dtype("<f2"), DType.FP32: np.dtype("<f4")}


def _faults(options: dict) -> dict[str, str]:
    spec = options.get("faults") or os.environ.get("TILEDISPATCH_FAKE_FAULTS", "")
    out = {}
    for item in filter(None, spec.split(",")):
        kind, _, kernel = item.partition(":")
        out[kernel] = kind
    return out


class FakeGpuHandler:
    def __init__(self, device: int, options: dict):
        self.device = device
        self.faults = _faults(options)

    def hello(self) -> dict:
        return {"index": self.device, "name": "Fake GPU (tests)", "capability": [9, 0], "cuda": "fake",
                "driver": "fake", "backend": "fake", "pid": os.getpid()}

    def _maybe_fault(self, kernel: str) -> None:
        kind = self.faults.get(kernel)
        if kind == "crash":
            os._exit(11)  # what a segfault looks like to the parent
        if kind == "hang":
            time.sleep(3600)
        if kind == "fatal":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if kind == "error":
            raise ValueError(f"{kernel}: launch failed (fake)")

    def run(self, payload: dict) -> dict:
        self._maybe_fault(payload["kernel"])
        problem = ConvProblem.from_dict(payload["problem"])
        shapes = problem.operand_shapes
        wire = WIRE[problem.dtype]
        # Large tensors arrive as arrays over the worker's shared memory, small ones as bytes.
        first, second = (np.frombuffer(payload[name], dtype=wire).reshape(shape)
                         for name, shape in (("first", shapes[0]), ("second", shapes[1])))
        start = time.perf_counter()  # the "kernel": what elapsed_us reports, like the GPU handler's events
        if problem.dtype is DType.BF16:
            first, second = codec.bf16_bits_to_float(first), codec.bf16_bits_to_float(second)
        out = run_reference(problem, first.astype(np.float64), second.astype(np.float64))
        data = codec.float_to_bf16_bits(out) if problem.dtype is DType.BF16 else out.astype(wire)
        return {"output": data, "elapsed_us": (time.perf_counter() - start) * 1e6}

    def measure(self, payload: dict) -> dict:
        kernel = payload["kernel"]
        self._maybe_fault(kernel)
        base = 10.0 + zlib.crc32(kernel.encode()) % 1000 / 10.0  # deterministic, distinct per kernel
        return {"median_us": base * 1.1, "min_us": base, "graph_us": base, "status": "ok", "relative_error": 1e-3,
                "message": ""}

    def is_fatal(self, error: BaseException) -> bool:
        return "CUDA error" in str(error)
