"""The halo walk's geometry (``native/kernels/halo.py``) without Triton: the residue classes of a dilated problem,
the padded stream width, the row chunks and column blocks, the grid — what the kernel's launcher, its NumPy
emulation and the model features (``models/features.py``) all compute the same way.

Dilation ``d`` (per axis) splits the written positions into ``d_h · d_w`` residue classes: output rows
``o_h = r_h + d_h·o'`` read input rows ``r_h − p_h + d_h·(o' + t_h)`` only, so each class is a 3×3 convolution at
dilation 1 over every ``d``-th input row and column (a sub-grid of ``⌈out / d⌉`` rows and columns), walked by the
same ring; dilation 1 is the one class.
"""

from __future__ import annotations

from typing import Any

from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.kernels.base import cdiv
from tiledispatch.native.problem import ConvProblem, Direction


def padded_width(out_w: int, block_m: int) -> int:
    """Columns a stream occupies: the power of two ≥ ``out_w`` (at least 4), at most ``block_m``."""
    width = 4
    while width < out_w and width < block_m:
        width *= 2
    return width


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
    return {"src_c": problem.out_channels if backward else problem.in_channels,
            "dst_c": problem.in_channels if backward else problem.out_channels,
            "rg": kg if backward else cg, "og": cg if backward else kg,
            "src_h": src[0], "src_w": src[1], "dst_h": dst[0], "dst_w": dst[1], "pad_h": pads[0], "pad_w": pads[1],
            "dil_h": dil_h, "dil_w": dil_w, "sub_h": sub_h, "sub_w": sub_w,
            "wp": wp, "row_chunks": row_chunks, "col_blocks": col_blocks, "grid": grid}
