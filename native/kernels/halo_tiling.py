"""The halo walk's geometry (``native/kernels/halo.py``) without Triton: the residue classes of a dilated problem,
the padded stream width, the row chunks and column blocks, the grid — what the kernel's launcher, its NumPy
emulation and the model features (``models/features.py``) all compute the same way.

Dilation ``d`` (per axis) splits the written positions into ``d_h · d_w`` residue classes: output rows
``o_h = r_h + d_h·o'`` read input rows ``r_h − p_h + d_h·(o' + t_h)`` only, so each class is a 3×3 convolution at
dilation 1 over every ``d``-th input row and column (a sub-grid of ``⌈out / d⌉`` rows and columns), walked by the
same ring; dilation 1 is the one class.

Stride 2 (forward, dilation 1; the ``strided`` program): output row ``o`` reads input rows ``2·o − p_h + t_h`` and
columns ``2·o_w − p_w + t_w``, so a chunk of ``R`` output rows walks ``2·R + 1`` input rows, two new ones a step, and a
stream's column ``m`` reads every other input column; the ring holds five rows (the window and the two the next
window adds).
"""

from __future__ import annotations

from typing import Any

from tiledispatch.native.arch import get_arch
from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.kernels.base import cdiv
from tiledispatch.native.problem import ConvProblem, Direction
from tiledispatch.native.rules import EPILOGUE_SMEM_RESERVE


def padded_width(out_w: int, block_m: int) -> int:
    """Columns a stream occupies: the power of two ≥ ``out_w`` (at least 4), at most ``block_m``."""
    width = 4
    while width < out_w and width < block_m:
        width *= 2
    return width


#: Shared memory a program may take on sm_90 (the only target of this Gluon kernel), less the reserve the rule set
#: keeps for the epilogue (the limit ``rules`` holds the stride-1 ring to).
SMEM_LIMIT_BYTES = get_arch("sm_90").smem_per_block_bytes - EPILOGUE_SMEM_RESERVE


def ring_slots(stride: int) -> int:
    """Input-row slots of the ring: stride 1 reads a 3-row window and prefetches the one row the next window adds
    (4); stride 2 holds its 3-row window and the two rows the next one adds (5)."""
    return 4 if stride == 1 else 5


def smem_bytes(config: KernelConfig, stride: int) -> int:
    """A program's shared memory: the ring (3 column shifts × :func:`ring_slots` tiles of ``block_m × block_k``),
    the nine tap matrices and the epilogue's conversion scratch (stride 1: ``KernelConfig.smem_bytes_estimate``)."""
    ring = 3 * ring_slots(stride) * config.block_m * config.block_k
    return (ring + 9 * config.block_k * config.block_n + config.block_m * config.block_n) * config.dtype.itemsize


def strided_fits(config: KernelConfig) -> bool:
    """Whether the config has a stride-2 (forward) program: its ring of 5 fits in shared memory."""
    return config.direction is Direction.FORWARD and smem_bytes(config, 2) <= SMEM_LIMIT_BYTES


def halo_geometry(problem: ConvProblem, config: KernelConfig) -> dict[str, Any]:
    """Sizes of the walk: the walked and written tensors' sizes and channels, reduction / output channels per
    group, pads (backward-data walks dY with ``2·d − pad_begin``), dilations, the sub-grid a residue class walks
    (``sub_h`` × ``sub_w``), the padded width, the grid (row chunks and column blocks count every class)."""
    backward = problem.direction is Direction.BACKWARD_DATA
    cg, kg = problem.c_per_group, problem.k_per_group
    src, dst = (problem.output_size, problem.input_size) if backward else (problem.input_size, problem.output_size)
    dil_h, dil_w = problem.dilation
    pads = (2 * dil_h - problem.pad_begin[0], 2 * dil_w - problem.pad_begin[1]) if backward \
        else tuple(problem.pad_begin)
    sub_h, sub_w = cdiv(dst[0], dil_h), cdiv(dst[1], dil_w)
    wp = padded_width(sub_w, config.block_m)
    row_chunks, col_blocks = dil_h * cdiv(sub_h, config.group_m), dil_w * cdiv(sub_w, wp)
    grid = (cdiv(problem.batch, config.block_m // wp) * row_chunks * col_blocks, problem.groups // config.merge, 1)
    stride = problem.stride[0]
    return {"src_c": problem.out_channels if backward else problem.in_channels,
            "dst_c": problem.in_channels if backward else problem.out_channels,
            "rg": kg if backward else cg, "og": cg if backward else kg,
            "src_h": src[0], "src_w": src[1], "dst_h": dst[0], "dst_w": dst[1], "pad_h": pads[0], "pad_w": pads[1],
            "dil_h": dil_h, "dil_w": dil_w, "sub_h": sub_h, "sub_w": sub_w,
            "wp": wp, "row_chunks": row_chunks, "col_blocks": col_blocks, "grid": grid,
            "stride": stride, "ring": ring_slots(stride), "smem_bytes": smem_bytes(config, stride),
            "rows_read": stride * (config.group_m - 1) + 3}
