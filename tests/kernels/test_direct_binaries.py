"""Which binary of a direct config runs a problem, and the multiplier binary's launch grid (no GPU, no compile)."""

from __future__ import annotations

import pytest

from tests.kernels.cases import problem, small_config
from tiledispatch.native.configs import ConfigError, Family, KernelConfig
from tiledispatch.native.kernels.base import cdiv
from tiledispatch.native.launch import template_for
from tiledispatch.native.problem import Direction, DType
from tiledispatch.native.support import is_supported


def _plan(direction: Direction, label: str, ndim: int, **config_fields):
    prob = problem(direction, DType.BF16, ndim, label)
    config = small_config(direction, DType.BF16, ndim, Family.DIRECT, **config_fields)
    return prob, config, template_for(config).plan(prob, config, None, None, None, None)


@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
@pytest.mark.parametrize(("label", "ndim", "binary"), [
    ("depthwise", 2, "depthwise"), ("dw_multiplier", 2, "main"), ("dw_multiplier", 3, "main"),
    ("grouped_odd", 2, "main"), ("grouped_odd", 3, "main")])
def test_group_m_1_configs_run_the_general_or_depthwise_binary(direction, label, ndim, binary):
    _, config, launches = _plan(direction, label, ndim)
    assert launches[0].program == binary
    assert set(template_for(config).programs(config)) >= {"main", "depthwise"}


@pytest.mark.parametrize("multiplier", (2, 4))
@pytest.mark.parametrize("ndim", (2, 3))
def test_forward_multiplier_grid_is_row_blocks_by_group_blocks_by_j_chunks(ndim, multiplier):
    prob, config, launches = _plan(Direction.FORWARD, "dw_multiplier", ndim, multiplier=multiplier)
    rows = prob.batch
    for size in prob.output_size:
        rows *= size
    chunks = cdiv(prob.k_per_group, multiplier)
    assert launches[0].program == "multiplier" and list(template_for(config).programs(config)) == ["multiplier"]
    assert launches[0].grid == (cdiv(rows, config.block_m) * cdiv(prob.groups, config.block_n) * chunks, 1, 1)


@pytest.mark.parametrize("label", ("depthwise", "grouped_odd", "small_groups"))
def test_the_multiplier_binary_refuses_every_other_problem(label):
    config = small_config(Direction.FORWARD, DType.BF16, 2, Family.DIRECT, multiplier=4)
    support = is_supported(problem(Direction.FORWARD, DType.BF16, 2, label), config)
    assert not support and "group_m 4" in support.reason and "C/G = 1, K/G > 1" in support.reason


@pytest.mark.parametrize(("direction", "group_m", "block_k"), [(Direction.FORWARD, 3, 1), (Direction.FORWARD, 8, 1),
                                                               (Direction.BACKWARD_DATA, 4, 1),
                                                               (Direction.BACKWARD_WEIGHT, 2, 1),
                                                               (Direction.FORWARD, 4, 8)])
def test_direct_group_m_is_the_forward_multiplier_binary_only(direction, group_m, block_k):
    with pytest.raises(ConfigError, match="group_m"):
        KernelConfig(direction, DType.BF16, 2, Family.DIRECT, 64, 32, block_k, 4, 1, group_m, 1, 1, 1)
