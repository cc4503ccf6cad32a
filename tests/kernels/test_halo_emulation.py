"""The halo walk's index arithmetic on the CPU: Gluon kernels do not run under Triton's interpreter, so
``halo.emulate`` replays the kernel's programs (streams, padded columns, the ring of input rows, column shifts,
block-diagonal taps, walked rows) in float64 and must reproduce the reference exactly — every output written
(the emulation starts from NaN), every tap and group in place. The GPU tests run the kernels themselves; the
``tiny`` registry build compiles them for sm_90 in CI."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tiledispatch.native import reference
from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels import halo_tiling
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.support import is_supported

pytest.importorskip("triton")

from tiledispatch.native.kernels import halo  # noqa: E402  (imports Gluon)

DIRECTIONS = (Direction.FORWARD, Direction.BACKWARD_DATA)


def _config(direction: Direction, block_m: int, block: int, rows: int, merge: int) -> KernelConfig:
    return KernelConfig(direction, DType.BF16, 2, Family.HALO, block_m, block, block, 4, 1, rows, 1, merge, 8)


def _problem(direction: Direction, batch: int, groups: int, cg: int, kg: int, size: tuple[int, int],
             pad_begin: tuple[int, int], pad_end: tuple[int, int], dilation: tuple[int, int] = (1, 1),
             stride: tuple[int, int] = (1, 1)) -> ConvProblem:
    return ConvProblem(direction=direction, dtype=DType.BF16, batch=batch, groups=groups, in_channels=groups * cg,
                       out_channels=groups * kg, input_size=size, filter_size=(3, 3), stride=stride,
                       dilation=dilation, pad_begin=pad_begin, pad_end=pad_end)


def _check(problem: ConvProblem, config: KernelConfig) -> None:
    assert is_supported(problem, config), is_supported(problem, config).reason
    rng = np.random.default_rng(random.randrange(2**32))  # fresh inputs every run
    first = rng.standard_normal(problem.operand_shapes[0])
    weight = rng.standard_normal(problem.weight_shape)
    got = halo.emulate(problem, config, first, weight)
    expected = reference.run_reference(problem, first, weight).reshape(got.shape)
    assert not np.isnan(got).any(), f"{config.name}: outputs never written on {problem.key}"
    error = reference.relative_error(got, expected)
    assert error < 1e-12, f"{config.name} on {problem.key}: relative error {error:.3g}"


# (label, batch, groups, C/G, K/G, size, pad_begin, pad_end, config (block_m, block, rows, merge)[, dilation])
CASES = [
    # ResNeXt-like: 4 groups of 8 merged, one stream of 32 columns per 64 rows x 2, walk shorter than the height
    ("merged_c8", 3, 8, 8, 8, (9, 11), (1, 1), (1, 1), (64, 32, 4, 4)),
    # wide rows: two column blocks of a 64-row tile (62 + 8 columns), one stream
    ("two_column_blocks", 1, 2, 8, 8, (5, 70), (1, 1), (1, 1), (64, 16, 4, 2)),
    # narrow images: 8-column streams, 8 of them a tile, batch not a multiple
    ("many_streams", 5, 4, 4, 4, (6, 3), (2, 0), (0, 2), (64, 16, 8, 4)),
    # asymmetric pads and unequal group widths (K/G = 2 C/G), the walk longer than the image
    ("asymmetric", 2, 2, 8, 16, (7, 13), (0, 2), (2, 1), (64, 32, 16, 1)),
    # a 128-row tile, a merged block with padding (2 x 8 in a 32 tile), no padding at all
    ("padded_block_valid", 2, 4, 8, 8, (10, 9), (0, 0), (0, 0), (128, 32, 4, 2)),
    # one group wide: C/G 24 in a 32 tile
    ("wide_group", 1, 3, 24, 24, (4, 6), (1, 1), (1, 1), (64, 32, 8, 1)),
    # walks that are not powers of two: 7 rows over a 14-row image (the ring's slot order wraps mid-walk), and
    # 14 rows over 17 (the second chunk's walk runs past the image)
    ("walk_of_7", 2, 4, 8, 8, (14, 14), (1, 1), (1, 1), (64, 32, 7, 2)),
    ("walk_of_14", 1, 2, 16, 16, (17, 12), (1, 1), (1, 1), (64, 16, 14, 1)),
    # dilation: 2 x 2 residue classes of a 64-wide layer's kind (odd sizes: classes of unequal length), the
    # dilation of each axis its own (2 x 3, asymmetric pads), and a dilation past half the image (empty taps)
    ("dilation_2", 2, 4, 8, 8, (13, 11), (2, 2), (2, 2), (64, 32, 4, 2), (2, 2)),
    ("dilation_2x3", 1, 2, 8, 16, (12, 17), (1, 3), (3, 2), (64, 16, 7, 1), (2, 3)),
    ("dilation_wide", 3, 2, 8, 8, (7, 9), (4, 4), (4, 4), (64, 16, 4, 2), (4, 4)),
]


@pytest.mark.parametrize("direction", DIRECTIONS, ids=lambda d: d.value)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_walk_matches_reference(case, direction):
    _, batch, groups, cg, kg, size, pad_begin, pad_end, (block_m, block, rows, merge), *dilation = case
    problem = _problem(direction, batch, groups, cg, kg, size, pad_begin, pad_end, *dilation)
    _check(problem, _config(direction, block_m, block, rows, merge))


# Stride 2 (forward; the ``strided`` program: two new input rows a step into a ring of five, every other input
# column): (label, batch, groups, C/G, K/G, size, pad_begin, pad_end, config (block_m, block, rows, merge))
STRIDED_CASES = [
    # ResNeXt's stride-2 kind, odd sizes (7 x 6 outputs), the walk shorter than the output: two row chunks
    ("merged_c8", 3, 8, 8, 8, (13, 11), (1, 1), (1, 1), (64, 32, 4, 4)),
    # TF "same" padding (0 before, 1 after) on an even image, a 7-row walk (the ring's five slots wrap mid-walk)
    ("same_pads_walk_of_7", 2, 4, 8, 8, (14, 14), (0, 0), (1, 1), (64, 16, 7, 2)),
    # wide rows: 75 output columns, two column blocks of a 64-row tile; the walk longer than the output
    ("two_column_blocks", 1, 2, 16, 16, (5, 150), (1, 1), (1, 1), (64, 16, 4, 1)),
    # a 128-row tile, unequal group widths, asymmetric pads, no pad at the start
    ("rows_128_asymmetric", 2, 2, 8, 16, (10, 9), (0, 1), (2, 0), (128, 32, 8, 1)),
    # a 14-row walk over a 17-row image (9 outputs): rows past the input are zeros, rows past the walk unread
    ("walk_of_14", 1, 2, 16, 16, (17, 12), (1, 1), (1, 1), (64, 16, 14, 1)),
]


@pytest.mark.parametrize("case", STRIDED_CASES, ids=lambda c: c[0])
def test_strided_walk_matches_reference(case):
    _, batch, groups, cg, kg, size, pad_begin, pad_end, (block_m, block, rows, merge) = case
    problem = _problem(Direction.FORWARD, batch, groups, cg, kg, size, pad_begin, pad_end, stride=(2, 2))
    config = _config(Direction.FORWARD, block_m, block, rows, merge)
    assert halo_tiling.halo_geometry(problem, config)["ring"] == 5
    _check(problem, config)


def test_padded_width_fits_the_row_and_the_tile():
    width = halo_tiling.padded_width
    assert width(28, 64) == 32 and width(56, 64) == 64 and width(14, 64) == 16 and width(64, 64) == 64
    assert width(7, 64) == 8 and width(3, 64) == 4
    assert width(70, 64) == 64 and width(70, 128) == 128  # wider: column blocks


@pytest.mark.parametrize("key, reason", [
    ("bwd_data|bf16|2d|n2|g4|c32|k32|in9x9|f3x3|s2x2|d1x1|pb1x1|pe1x1", "stride"),
    ("fwd|bf16|2d|n2|g4|c32|k32|in9x9|f3x3|s2x2|d2x2|pb2x2|pe2x2", "stride/dilation"),
    ("fwd|bf16|2d|n2|g4|c32|k32|in9x9|f3x3|s3x3|d1x1|pb1x1|pe1x1", "stride"),
    ("fwd|bf16|2d|n2|g4|c32|k32|in9x9|f3x3|s1x2|d2x2|pb2x2|pe2x2", "stride"),
    ("fwd|bf16|2d|n2|g4|c32|k32|in9x9|f5x5|s1x1|d1x1|pb2x2|pe2x2", "filter_size"),
    ("fwd|bf16|2d|n2|g2|c32|k32|in9x9|f3x3|s1x1|d1x1|pb1x1|pe1x1", "groups"),
    ("fwd|bf16|2d|n2|g4|c128|k128|in9x9|f3x3|s1x1|d1x1|pb1x1|pe1x1", "in_channels/out_channels"),
    ("fwd|bf16|2d|n2|g8|c24|k24|in9x9|f3x3|s1x1|d1x1|pb1x1|pe1x1", "in_channels/out_channels"),
])
def test_support_names_the_field(key, reason):
    problem = ConvProblem.from_key(key)
    support = is_supported(problem, _config(problem.direction, 64, 32, 8, 4))
    assert not support and support.reason.startswith(reason), support.reason


def test_stride_2_needs_the_ring_to_fit():
    # 128 rows x 64 channels: a ring of 5 x 3 shifts is 240 KB, past sm_90's 227 KB; 64 rows x 64 fits (200 KB)
    key = "fwd|bf16|2d|n2|g8|c64|k64|in9x9|f3x3|s2x2|d1x1|pb1x1|pe1x1"
    support = is_supported(ConvProblem.from_key(key), _config(Direction.FORWARD, 128, 64, 8, 8))
    assert not support and support.reason.startswith("stride") and "shared memory" in support.reason
    assert is_supported(ConvProblem.from_key(key), _config(Direction.FORWARD, 64, 64, 8, 8))
    assert not halo_tiling.strided_fits(_config(Direction.BACKWARD_DATA, 64, 16, 8, 1))


def test_the_stride_1_ring_is_the_configs_shared_memory_estimate():
    # halo_tiling.smem_bytes (features, support) and KernelConfig.smem_bytes_estimate (the rule set) count the same
    # stride-1 program; every default halo tile has a stride-2 program (forward)
    from tiledispatch.native.rules import rule_set_configs

    configs = [c for c in rule_set_configs("default", "sm_90") if c.family is Family.HALO]
    assert configs and all(halo_tiling.smem_bytes(c, 1) == c.smem_bytes_estimate for c in configs)
    assert all(halo_tiling.strided_fits(c) for c in configs if c.direction is Direction.FORWARD)


def test_geometry_grid_covers_every_output():
    problem = _problem(Direction.FORWARD, 5, 8, 8, 8, (28, 28), (1, 1), (1, 1))
    geo = halo_tiling.halo_geometry(problem, _config(Direction.FORWARD, 64, 32, 16, 4))
    # 32-column streams, two a tile: 3 image pairs x 2 row chunks x 1 column block; 2 group blocks
    assert (geo["wp"], geo["row_chunks"], geo["col_blocks"]) == (32, 2, 1)
    assert geo["grid"] == (3 * 2 * 1, 2, 1)


def test_geometry_of_a_dilated_layer():
    # the dev suite's dilation-2 layer (64 x 64, pad 2): four residue classes of a 32 x 32 sub-grid, 32-column
    # streams two a tile (no column wasted), backward-data walking dY with pad 2·2 − 2
    problem = ConvProblem.from_key("fwd|bf16|2d|n8|g8|c256|k256|in64x64|f3x3|s1x1|d2x2|pb2x2|pe2x2")
    geo = halo_tiling.halo_geometry(problem, _config(Direction.FORWARD, 64, 64, 8, 2))
    assert (geo["sub_h"], geo["sub_w"], geo["wp"]) == (32, 32, 32)
    assert (geo["row_chunks"], geo["col_blocks"]) == (2 * 4, 2 * 1)
    assert geo["grid"] == (4 * 8 * 2, 4, 1)
    backward = ConvProblem.from_key("bwd_data|bf16|2d|n8|g8|c256|k256|in64x64|f3x3|s1x1|d2x2|pb2x2|pe2x2")
    assert (halo_tiling.halo_geometry(backward, _config(Direction.BACKWARD_DATA, 64, 64, 8, 2))["pad_h"]) == 2
