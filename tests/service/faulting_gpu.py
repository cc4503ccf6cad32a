"""A real GPU handler that, for the kernel names listed in ``TILEDISPATCH_GPU_FAULTS``, launches a
Triton kernel that stores far outside any allocation instead of the convolution: a genuine illegal
memory access on the device, which poisons the worker's CUDA context. Everything else is the real
:class:`GpuHandler`. Used only by the GPU fault-isolation test."""

from __future__ import annotations

import os

import triton
import triton.language as tl

from tiledispatch.server.gpu_handler import GpuHandler


@triton.jit
def _out_of_bounds_store(ptr):
    # 2^40 elements past a small tensor: no allocation is there, the MMU faults.
    tl.store(ptr + (1 << 40), 1.0)


class FaultingGpuHandler(GpuHandler):
    def __init__(self, device: int, options: dict):
        super().__init__(device, options)
        self.faulting = set(filter(None, os.environ.get("TILEDISPATCH_GPU_FAULTS", "").split(",")))

    def run(self, payload: dict) -> dict:
        if payload["kernel"] in self.faulting:
            torch = self._torch
            target = torch.zeros(16, device=self.device, dtype=torch.float32)
            _out_of_bounds_store[(1,)](target)
            torch.cuda.synchronize(self.device)  # raises: an illegal memory access was encountered
        return super().run(payload)
