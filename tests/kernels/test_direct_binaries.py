"""Which binary of a direct config runs a problem, and the multiplier binary's launch grid (no GPU, no compile)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.kernels.cases import problem, small_config
from tiledispatch.native.configs import Family
from tiledispatch.native.kernels.base import cdiv
from tiledispatch.native.kernels.direct import FORWARD_J_BLOCK, DirectBackwardWeight
from tiledispatch.native.kernels.direct_multiplier import j_block
from tiledispatch.native.launch import template_for
from tiledispatch.native.problem import Direction, DType


def _plan(direction: Direction, label: str, ndim: int, **config_fields):
    prob = problem(direction, DType.BF16, ndim, label)
    config = dataclasses.replace(small_config(direction, DType.BF16, ndim, Family.DIRECT), **config_fields)
    template = template_for(config)
    return prob, config, template.plan(prob, config, None, None, None, None)


@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
@pytest.mark.parametrize(("label", "ndim", "binary"), [
    ("depthwise", 2, "depthwise"), ("dw_multiplier", 2, "multiplier"), ("dw_multiplier", 3, "multiplier"),
    ("grouped_odd", 2, "main"), ("grouped_odd", 3, "main")])
def test_each_problem_kind_runs_its_binary(direction, label, ndim, binary):
    _, config, launches = _plan(direction, label, ndim)
    assert launches[0].program == binary
    assert binary in template_for(config).programs(config)


def test_forward_multiplier_grid_is_row_blocks_by_group_blocks_by_j_chunks():
    prob, config, launches = _plan(Direction.FORWARD, "dw_multiplier", 3)  # 16 groups, K/G = 6: chunks of 4 and 2
    rows = prob.batch * prob.output_size[0] * prob.output_size[1] * prob.output_size[2]
    expected = cdiv(rows, config.block_m) * cdiv(prob.groups, config.block_n) * cdiv(prob.k_per_group, FORWARD_J_BLOCK)
    assert launches[0].grid == (expected, 1, 1) and cdiv(prob.k_per_group, FORWARD_J_BLOCK) == 2


def test_backward_weight_multiplier_grid_counts_group_blocks_j_chunks_and_tap_blocks():
    prob, config, launches = _plan(Direction.BACKWARD_WEIGHT, "dw_multiplier", 3, split_k=4)
    tap_block = DirectBackwardWeight.tiling(prob, config)[0]
    j = DirectBackwardWeight.j_block(config)
    expected = cdiv(prob.groups, config.block_n) * cdiv(prob.k_per_group, j) * cdiv(prob.filter_taps, tap_block)
    assert launches[0].grid == (expected, 4, 1)
    assert [launch.program for launch in launches] == ["multiplier", "reduce"]


@pytest.mark.parametrize(("vec", "elements", "expected"), [(8, 8, 4), (8, 16, 2), (8, 32, 1), (1, 4, 4), (1, 8, 2),
                                                           (1, 16, 1)])
def test_j_block_keeps_the_accumulators_within_budget(vec, elements, expected):
    config = dataclasses.replace(small_config(Direction.BACKWARD_WEIGHT, DType.BF16, 2, Family.DIRECT), vec=vec)
    assert j_block(config, elements) == expected
