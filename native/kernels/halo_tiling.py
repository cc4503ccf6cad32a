"""The halo walk's geometry (``native/kernels/halo.py``) without Triton: the padded stream width, the row chunks and
column blocks, the grid — what the kernel's launcher, its NumPy emulation and the model features
(``models/features.py``) all compute the same way."""

from __future__ import annotations

from typing import Any

from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.kernels.base import cdiv
from tiledispatch.native.problem import ConvProblem, Direction


def padded_width(out_w: int, block_m: int) -> int:
    """Columns a stream occupies: the power of two ≥ ``out_w + 2``, at most ``block_m``."""
    width = 4
    while width < out_w + 2 and width < block_m:
        width *= 2
    return width


def halo_geometry(problem: ConvProblem, config: KernelConfig) -> dict[str, Any]:
    """Sizes of the walk: the walked and written tensors' sizes and channels, reduction / output channels per
    group, pads, the padded width, the grid."""
    backward = problem.direction is Direction.BACKWARD_DATA
    cg, kg = problem.c_per_group, problem.k_per_group
    src, dst = (problem.output_size, problem.input_size) if backward else (problem.input_size, problem.output_size)
    pads = tuple(2 - p for p in problem.pad_begin) if backward else tuple(problem.pad_begin)
    wp = padded_width(dst[1], config.block_m)
    row_chunks, col_blocks = cdiv(dst[0], config.group_m), cdiv(dst[1], wp - 2)
    grid = (cdiv(problem.batch, config.block_m // wp) * row_chunks * col_blocks, problem.groups // config.merge, 1)
    return {"src_c": problem.out_channels if backward else problem.in_channels,
            "dst_c": problem.in_channels if backward else problem.out_channels,
            "rg": kg if backward else cg, "og": cg if backward else kg,
            "src_h": src[0], "src_w": src[1], "dst_h": dst[0], "dst_w": dst[1], "pad_h": pads[0], "pad_w": pads[1],
            "wp": wp, "row_chunks": row_chunks, "col_blocks": col_blocks, "grid": grid}
