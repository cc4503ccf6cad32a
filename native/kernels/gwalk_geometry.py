"""Host-side sizes of the gwalk backward-weight walk (no Triton import: the support check uses them too)."""

from __future__ import annotations

from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.kernels.base import cdiv
from tiledispatch.native.problem import ConvProblem

#: Reduction lanes one backward-weight split may sum in its tensor-core accumulators: the length igemm's
#: kernels sum in one accumulator before promoting to fp32 adds (``igemm_bwd_weight.PROMOTE_POSITIONS``;
#: tensor-core accumulation does not round to nearest, so longer sums drift past the bf16 error limit).
MAX_LANES_PER_SPLIT = 16384


def tma_tile_width(in_w: int, lanes: int) -> int:
    """Input columns of one image in a TMA-fed walk's ``lanes``-lane reduction tile (``num_stages`` > 1): the
    power of two at or above ``in_w`` (the TMA box's width is compiled in; columns past the row are zero-filled),
    at least 8 and at most ``lanes``; ``lanes // width`` images side by side."""
    width = 8
    while width < min(in_w, lanes):
        width *= 2
    return min(width, lanes)


def tma_tile_widths(lanes: int) -> tuple[int, ...]:
    """Every width :func:`tma_tile_width` can give for ``lanes`` lanes (8, 16, … up to the lanes): one compiled
    program each."""
    widths = [8]
    while widths[-1] < lanes:
        widths.append(widths[-1] * 2)
    return tuple(min(width, lanes) for width in widths)


def weight_walk_geometry(problem: ConvProblem, config: KernelConfig) -> dict[str, int]:
    """Sizes of the backward-weight walk: a group block's merged channels, the reduction tile's width (input
    columns) and images, the reduction units (images × output-row walks × input-column tiles), the reduction
    lanes one split sums (masked lanes included), and the grid (splits × group blocks)."""
    out_h = problem.output_size[0]
    in_w = problem.input_size[1]
    tile_w = tma_tile_width(in_w, config.block_k) if config.num_stages > 1 else min(in_w, config.block_k)
    images = config.block_k // tile_w
    units = cdiv(problem.batch, images) * cdiv(out_h, config.group_m) * cdiv(in_w, tile_w)
    return {"gc": config.merge * problem.c_per_group, "gk": config.merge * problem.k_per_group,
            "tile_w": tile_w, "images": images, "units": units,
            "lanes_per_split": cdiv(units, config.split_k) * config.group_m * config.block_k,
            "grid": (config.split_k, cdiv(problem.groups, config.merge), 1)}
