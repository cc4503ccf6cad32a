"""Measures the CUDA-core fp32 FMA rate: the bound of the direct (non-tensor-core) kernels.

Each thread runs ``ITERATIONS`` dependent-free FMA chains on registers (8 independent
accumulators hide the FMA latency); FLOPs = 2 · elements · ITERATIONS · 8.
"""

from __future__ import annotations

import triton
import triton.language as tl

ITERATIONS = 4096
BLOCK = 1024


@triton.jit
def _fma_kernel(out_ptr, scale, ITERATIONS: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    a0 = offsets.to(tl.float32) * 1e-7
    a1 = a0 + 1.0
    a2 = a0 + 2.0
    a3 = a0 + 3.0
    a4 = a0 + 4.0
    a5 = a0 + 5.0
    a6 = a0 + 6.0
    a7 = a0 + 7.0
    for _ in range(ITERATIONS):
        a0 = a0 * scale + 0.5
        a1 = a1 * scale + 0.5
        a2 = a2 * scale + 0.5
        a3 = a3 * scale + 0.5
        a4 = a4 * scale + 0.5
        a5 = a5 * scale + 0.5
        a6 = a6 * scale + 0.5
        a7 = a7 * scale + 0.5
    tl.store(out_ptr + offsets, a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7)


def fma_probe_tflops() -> float:
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    programs = sms * 64
    out = torch.empty(programs * BLOCK, device="cuda", dtype=torch.float32)

    def launch():
        _fma_kernel[(programs,)](out, 0.999, ITERATIONS=ITERATIONS, BLOCK=BLOCK, num_warps=8)

    launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    milliseconds = sorted(times)[2]
    return 2 * 8 * ITERATIONS * programs * BLOCK / (milliseconds * 1e9)
