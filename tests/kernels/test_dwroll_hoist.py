"""Which dwroll kernels hold their weights in registers (2D 3x3 forward / backward-data, at most 8 elements
per thread) and what that changes in their launches: one program reading W itself, no workspace."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from tiledispatch.native import launch  # noqa: E402
from tiledispatch.native.configs import Family, KernelConfig  # noqa: E402
from tiledispatch.native.kernels.dwroll_tiling import hoists_weights  # noqa: E402
from tiledispatch.native.problem import ConvProblem, Direction, DType  # noqa: E402


def _config(direction=Direction.FORWARD, ndim=2, tile=(16, 64, 4), height=3, stages=1, split_k=1):
    block_w, block_n, warps = tile
    return KernelConfig(direction, DType.BF16, ndim, Family.DWROLL, block_w, block_n, height, warps, stages, 1,
                        split_k, 1, 8)


@pytest.mark.parametrize("config, holds", [
    (_config(), True),                                                   # 8 elements per thread
    (_config(Direction.BACKWARD_DATA, tile=(8, 64, 2), stages=2), True),
    (_config(tile=(64, 32, 4)), False),                                  # 16 elements per thread
    (_config(ndim=3), False),                                            # 3D reads taps per depth
    (_config(height=5), False),                                          # 25 weights per channel
    (_config(Direction.BACKWARD_WEIGHT, tile=(16, 64, 4), split_k=16), False),
])
def test_which_kernels_hold_their_weights(config, holds):
    assert hoists_weights(config) is holds


@pytest.mark.parametrize("direction", [Direction.FORWARD, Direction.BACKWARD_DATA])
def test_holding_kernels_launch_once_on_w_and_need_no_workspace(direction):
    problem = ConvProblem(direction=direction, dtype=DType.BF16, batch=2, groups=16, in_channels=16,
                          out_channels=16, input_size=(6, 7), filter_size=(3, 3), stride=(1, 1), dilation=(1, 1),
                          pad_begin=(1, 1), pad_end=(1, 1))
    held, walked = _config(direction), _config(direction, tile=(64, 32, 4))
    template = launch.template_for(held)
    assert set(template.programs(held)) == {"roll"} and template.workspace_elements(problem, held) == 0
    launches = template.plan(problem, held, "first", "weight", "out", None)
    assert [(ln.program, ln.args[:3]) for ln in launches] == [("roll", ("first", "weight", "out"))]
    assert set(template.programs(walked)) == {"roll", "tap_major"}
    walked_launches = template.plan(problem, walked, "first", "weight", "out", "ws")
    assert [ln.program for ln in walked_launches] == ["tap_major", "roll"]


@pytest.mark.parametrize("direction", [Direction.FORWARD, Direction.BACKWARD_DATA])
@pytest.mark.parametrize("held", [2, 4, 8])
def test_held_row_programs_own_group_m_rows_and_read_the_tap_major_weights(direction, held):
    """group_m > 1: one chunk of group_m output rows per program (the grid counts them), tap-major weights."""
    from tiledispatch.native.kernels.dwroll_tiling import data_rows

    problem = ConvProblem(direction=direction, dtype=DType.BF16, batch=2, groups=16, in_channels=16,
                          out_channels=16, input_size=(13, 7), filter_size=(3, 3), stride=(1, 1), dilation=(1, 1),
                          pad_begin=(1, 1), pad_end=(1, 1))
    config = KernelConfig(direction, DType.BF16, 2, Family.DWROLL, 16, 64, 3, 4, 1, held, 1, 1, 8)
    assert not hoists_weights(config) and data_rows(problem, config) == held
    template = launch.template_for(config)
    assert set(template.programs(config)) == {"roll", "tap_major"}
    roll = template.plan(problem, config, "first", "weight", "out", "ws")[-1]
    assert roll.args[-1] == held and roll.grid[0] == 2 * -(-13 // held)  # batch x row chunks (1 strip, 1 block)
