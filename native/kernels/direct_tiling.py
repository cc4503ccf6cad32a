"""The direct backward-weight kernel's tiling model (see :mod:`~tiledispatch.native.kernels.direct`).

Kept free of Triton so the feature engine (:mod:`tiledispatch.models.features`) can state a direct
kernel's launch grid and per-program work exactly as the launcher computes them, without importing
the kernels. :mod:`tiledispatch.native.kernels.direct` re-exports every name here.
"""

from __future__ import annotations

from functools import lru_cache

from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.kernels.base import cdiv
from tiledispatch.native.problem import ConvProblem

#: Backward-weight tiling model (Hopper, H100 SXM / H200). Only the ratios matter: they weigh the
#: CUDA-core issue time of a tiling against the L2→SM traffic of re-reading dY and X once per tap
#: block, and penalise grids with fewer programs than 132 SMs × 4 resident CTAs. Uncalibrated
#: estimates from the SASS of the kernels (≈ 5 instructions per FMA in the inner loop) and
#: published Hopper figures; a GPU measurement should tune them.
FILL_PROGRAMS = 4 * 132
ISSUE_RATE = 132 * 4 * 32 * 1.755e9  # thread instructions per second
INSTRUCTIONS_PER_FMA = 5.0
L2_BANDWIDTH = 5.5e12  # bytes per second


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _row_tiling(tap_block: int, block_m: int, out_h: int, out_w: int) -> tuple[int, int, float]:
    """(LINE_BLOCK, ROW_WIDTH, fraction of tile rows doing useful work) for a tap block."""
    positions = block_m // tap_block
    if positions >= out_w:
        line_block = max(1, min(positions // out_w, out_h))  # ≤ OUT_H: the kernel's single carry
        return line_block, out_w, tap_block * line_block * out_w / block_m
    steps = cdiv(out_w, positions)
    row_width = cdiv(out_w, steps)  # the same number of steps, spread evenly over the line
    return 1, row_width, tap_block * out_w / (steps * block_m)


@lru_cache(maxsize=4096)
def bwd_weight_tiling(problem: ConvProblem, config: KernelConfig) -> tuple[int, int, int, int]:
    """(TAP_BLOCK, LINE_BLOCK, ROW_WIDTH, LINES_PER_SPLIT) for the backward-weight kernel.

    A tap block of TB taps serves TB taps from every dY/X window it reads, so the chunk is
    streamed from L2 ``taps / TB`` times; larger blocks leave fewer programs and may leave tile
    rows idle. Candidates are the filter's own groupings (all taps, one plane, one row, one tap)
    and the blocks that split an output line into equal steps; the pick minimises
    ``max(issue time / useful fraction, L2 time) / min(1, programs / FILL_PROGRAMS)``.

    Tap-row configs (``block_k`` > 1) have no tap block: TAP_BLOCK is 1 and the tile rows are
    positions, LINE_BLOCK lines of ROW_WIDTH columns as for a one-tap block.
    """
    taps = problem.filter_taps
    out_h, out_w = problem.output_size[-2], problem.output_size[-1]
    block_m = config.block_m
    lines = problem.batch * _prod(problem.output_size[:-1])
    if config.block_k > 1:  # tap rows: every tile row is a position; the taps are unrolled
        line_block, row_width, _ = _row_tiling(1, block_m, out_h, out_w)
        return 1, line_block, row_width, cdiv(lines, config.split_k)
    fixed = cdiv(problem.out_channels, config.block_n) * problem.c_per_group * config.split_k
    fmas = problem.batch * _prod(problem.output_size) * problem.out_channels * problem.c_per_group * taps
    streamed = (problem.output_elements + problem.input_elements) * problem.dtype.itemsize
    candidates = {taps, problem.filter_size[-1] * problem.filter_size[-2], problem.filter_size[-1], 1}
    candidates.update(block_m // cdiv(out_w, steps) for steps in range(1, 9))
    best = None
    for tap_block in sorted(tb for tb in candidates if 1 <= tb <= min(taps, block_m)):
        line_block, row_width, useful = _row_tiling(tap_block, block_m, out_h, out_w)
        blocks = cdiv(taps, tap_block)
        useful *= taps / (blocks * tap_block)
        issue = fmas * INSTRUCTIONS_PER_FMA / ISSUE_RATE / useful
        l2 = blocks * streamed / L2_BANDWIDTH
        cost = max(issue, l2) / min(1.0, fixed * blocks / FILL_PROGRAMS)
        if best is None or cost <= best[0]:  # ties go to the larger block
            best = (cost, tap_block, line_block, row_width)
    _, tap_block, line_block, row_width = best
    return tap_block, line_block, row_width, cdiv(lines, config.split_k)
