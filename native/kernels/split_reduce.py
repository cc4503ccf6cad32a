"""The split-K sum of partials: ``out[e] = Σ_{s < SPLIT_K} workspace[s, e]`` (fp32 partials, one row of
``ELEMENTS`` per split, cast to the output's dtype), shared by every split-K kernel: backward-weight (igemm,
gmerge, 1×1, direct, dwroll; ``out`` = dW) and the tensor-core forward and backward-data kernels (igemm,
gmerge, 1×1; ``out`` = Y or dX).

A program owns ``BLOCK`` elements and loads all ``SPLIT_K`` partials of them as one
``[SPLIT_K, BLOCK]`` tile (``split_k`` is a power of two: :class:`~tiledispatch.native.configs.KernelConfig`
checks), then sums it along the split axis with ``tl.sum``: a fixed reduction tree, so the result is
bitwise the same on every run (deterministic, no atomics), and every load is in flight at once. The
earlier form added the splits one load after another; with a run-time loop each addition waited for its
load (Nsight Compute, H200, depthwise c192 28² backward-weight with 64 splits: 2 programs of 1024
elements, 29.8 µs for a 1,728-element sum against 18.6 µs for the main kernel). ``BLOCK`` shrinks as
splits grow, so the tile stays at ``TILE_ELEMENTS`` (32 fp32 per thread at 4 warps) and small weights
still get tens of programs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl

from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.kernels.base import Launch, Program, cdiv, int_type, pointer_type
from tiledispatch.native.problem import ConvProblem

#: Elements of one program's [SPLIT_K, BLOCK] tile of partials.
TILE_ELEMENTS = 4096
REDUCE_WARPS = 4
#: The fewest elements a program owns (64 bytes of each split row: one L2 sector pair).
MIN_BLOCK = 16


@triton.jit
def _split_reduce_kernel(ws_ptr, out_ptr, ELEMENTS, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr,
                         INDEX64: tl.constexpr):
    """out[e] = Σ_s ws[s, e] over the ``SPLIT_K`` rows, for this program's ``BLOCK`` elements."""
    pid = tl.program_id(0)
    if INDEX64:
        pid = pid.to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    ok = offs < ELEMENTS
    # split × ELEMENTS may pass 2^31 even when every single size does not: 64-bit row offsets.
    rows = tl.arange(0, SPLIT_K).to(tl.int64) * ELEMENTS
    parts = tl.load(ws_ptr + rows[:, None] + offs[None, :], mask=ok[None, :], other=0.0)
    tl.store(out_ptr + offs, tl.sum(parts, axis=0).to(out_ptr.dtype.element_ty), mask=ok)


def reduce_block(split_k: int) -> int:
    """Elements per program for ``split_k`` partials."""
    return max(MIN_BLOCK, TILE_ELEMENTS // split_k)


def partials_elements(elements: int, config: KernelConfig) -> int:
    """fp32 workspace elements of ``config.split_k`` rows of ``elements`` partials, rounded up to 4 (16 bytes,
    so whatever follows them in a workspace starts aligned); 0 with split_k = 1. (Forward and backward-data:
    ``elements`` is the result's, Y or dX.)"""
    if config.split_k == 1:
        return 0
    return -(-config.split_k * elements // 4) * 4


def split_reduce_program(config: KernelConfig) -> Program:
    """The reduce program of a split-K kernel (``config.split_k`` > 1)."""
    return Program(_split_reduce_kernel,
                   {"SPLIT_K": config.split_k, "BLOCK": reduce_block(config.split_k), "INDEX64": config.index64},
                   {"ws_ptr": "*fp32", "out_ptr": pointer_type(config.dtype), "ELEMENTS": int_type(config)},
                   REDUCE_WARPS, 1)


def with_split_reduce(programs: dict[str, Program], config: KernelConfig) -> dict[str, Program]:
    """``programs`` plus the reduce program when ``config`` splits the reduction (split_k > 1)."""
    return {**programs, "reduce": split_reduce_program(config)} if config.split_k > 1 else programs


def split_reduce_launch(config: KernelConfig, workspace, out, elements: int) -> Launch:
    """The reduce launch summing ``workspace``'s ``config.split_k`` rows of ``elements`` into ``out``."""
    return Launch("reduce", (cdiv(elements, reduce_block(config.split_k)), 1, 1), (workspace, out, elements))


def weight_partials_elements(problem: ConvProblem, config: KernelConfig) -> int:
    """fp32 workspace elements of a split-K backward-weight kernel: ``split_k`` rows of dW (0 unsplit)."""
    return config.split_k * problem.weight_elements if config.split_k > 1 else 0


def weight_split_plan(config: KernelConfig, problem: ConvProblem, main: Callable[[Any], Launch], out,
                      workspace) -> list[Launch]:
    """A backward-weight kernel's launches: ``main(out)`` unsplit; split, ``main(workspace)`` writing the fp32
    partials, then the reduce summing them into ``out`` (dW)."""
    if config.split_k == 1:
        return [main(out)]
    needed = weight_partials_elements(problem, config)
    if workspace is None or workspace.numel() < needed:
        raise ValueError(f"workspace: split_k={config.split_k} needs {needed} fp32 elements")
    return [main(workspace), split_reduce_launch(config, workspace, out, problem.weight_elements)]
