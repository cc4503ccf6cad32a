from __future__ import annotations

import random

import numpy as np

from tiledispatch.models.features import FEATURE_NAMES, FEATURE_SETS, SCHEMA_VERSION, FeatureEngine
from tiledispatch.native.problem import Direction
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.sampler import sample_problem
from tiledispatch.native.support import is_supported


def test_names_unique_and_every_shipped_set_is_still_made():
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert FEATURE_SETS[SCHEMA_VERSION] == FEATURE_NAMES
    for version, names in FEATURE_SETS.items():
        assert set(names) <= set(FEATURE_NAMES), version


def test_rows_are_finite_vectorised_and_unaliased():
    engine = FeatureEngine("sm_90")
    rng = random.Random(3)
    for direction in Direction:
        pool = rule_set_configs("default", "sm_90", directions=[direction], dtypes=["bf16"])
        for stratum in ("dense", "grouped_small", "grouped_large", "depthwise", "depthwise_multiplier"):
            problem = sample_problem(rng, stratum, direction=direction)
            configs = [c for c in pool if is_supported(problem, c)]
            x = engine.build(problem, configs)
            assert x.shape == (len(configs), len(engine.names))
            assert np.isfinite(x).all()
            # one config at a time gives the same rows as all at once
            for i in (0, len(configs) // 2, len(configs) - 1):
                np.testing.assert_array_equal(engine.build(problem, [configs[i]])[0], x[i])
            # distinct kernels never share a feature row
            assert len({row.tobytes() for row in x}) == len(configs)


def test_problem_features_follow_the_problem():
    engine = FeatureEngine("sm_90")
    problem = sample_problem(random.Random(1), "dense")
    config = [c for c in rule_set_configs("default", "sm_90", directions=["fwd"], dtypes=["bf16"])
              if is_supported(problem, c)][0]
    row = engine.build(problem, [config])[0]
    assert row[engine.index["p_batch"]] == problem.batch
    assert row[engine.index["p_gemm_m"]] == problem.gemm_mnk[0]
    assert row[engine.index["k_block_m"]] == config.block_m
    assert row[engine.index["h_sms"]] == 132


# ---- families: looked up by name; tma and unknown families are costed, never an error -----------

def _igemm_config(direction="fwd"):
    from tiledispatch.native.configs import Family, KernelConfig

    return KernelConfig(direction, "bf16", 2, Family.IGEMM, 128, 128, 64, 8, 3, 8, 1, 1, 8, False)


def _conv(pad: int, direction="fwd"):
    from tiledispatch.native.problem import ConvProblem

    return ConvProblem(direction, "bf16", 32, 1, 256, 256, (28, 28), (3, 3), (1, 1), (1, 1), (pad, pad), (pad, pad))


class _FutureFamily:
    """A family value neither the analytic model nor the engine knows (as a newer configs.py may add)."""

    def __init__(self, tensor_cores: bool):
        self.value, self.uses_tensor_cores = "future", tensor_cores


def _with_family(config, family):
    import dataclasses

    other = dataclasses.replace(config)
    object.__setattr__(other, "family", family)  # bypasses KernelConfig's check of known families
    return other


def test_one_hot_columns_are_looked_up_by_family_name():
    from tiledispatch.models import analytic
    from tiledispatch.models.features import ONE_HOT_FAMILIES

    engine = FeatureEngine("sm_90")
    one_hot = [f"k_{f}" for f in ONE_HOT_FAMILIES]
    assert [n for n in engine.names if n in set(one_hot)] == one_hot
    assert set(ONE_HOT_FAMILIES) <= set(analytic.FAMILY_CODES)
    assert analytic.family_code("never-heard-of") == analytic.UNKNOWN_FAMILY
    assert len(set(analytic.FAMILY_CODES.values())) == len(analytic.FAMILY_CODES)


def test_an_unknown_family_gets_the_cost_view_of_its_kind_and_finite_features():
    from tiledispatch.models.analytic import AnalyticPredictor

    predictor, engine = AnalyticPredictor("sm_90"), FeatureEngine("sm_90")
    igemm = _igemm_config()
    problem = _conv(1)
    tensor_core = _with_family(igemm, _FutureFamily(tensor_cores=True))
    t_igemm, t_future = predictor.predict_us(problem, [igemm, tensor_core])
    assert t_future == t_igemm  # the implicit-GEMM view, no extra term
    x = engine.build(problem, [igemm, tensor_core])
    assert np.isfinite(x).all()
    hot = [engine.index[f"k_{f}"] for f in ("igemm", "gmerge", "gemm1x1", "direct")]
    assert x[0, hot].tolist() == [1, 0, 0, 0] and x[1, hot].tolist() == [0, 0, 0, 0]
    # One that does not use the tensor cores is costed like a direct kernel of the same tile.
    from tiledispatch.native.configs import Family, KernelConfig

    direct = KernelConfig("fwd", "bf16", 2, Family.DIRECT, 64, 32, 1, 4, 1, 1, 1, 1, 8, False)
    cuda_core = _with_family(direct, _FutureFamily(tensor_cores=False))
    assert predictor.predict_us(problem, [cuda_core])[0] == predictor.predict_us(problem, [direct])[0]
    assert np.isfinite(engine.build(problem, [direct, cuda_core])).all()


def test_tma_is_igemm_plus_the_padded_input_copy():
    import dataclasses

    import pytest

    from tiledispatch.models import analytic
    from tiledispatch.native.configs import Family

    predictor, engine = analytic.AnalyticPredictor("sm_90"), FeatureEngine("sm_90")
    igemm = _igemm_config()
    tma = dataclasses.replace(igemm, family=Family.TMA)
    unpadded = _conv(0)
    assert analytic.padded_copy_elements(unpadded) == 0
    t_igemm, t_tma = predictor.predict_us(unpadded, [igemm, tma])
    assert t_tma == t_igemm
    padded = _conv(1)
    assert analytic.padded_copy_elements(padded) == 32 * 30 * 30 * 256
    b = predictor.breakdown(padded, analytic.config_table([igemm, tma]))
    # N·prod(in + pads)·C bf16 elements written once and read once, at the v8 bandwidth.
    bandwidth = predictor.spec.memory_bandwidth_gbs * 1e9 * analytic.BANDWIDTH_EFFICIENCY_V8
    copy_us = 2 * (32 * 30 * 30 * 256 * 2) / bandwidth * 1e6
    assert b["memory_us"][1] - b["memory_us"][0] == pytest.approx(copy_us)
    assert b["compute_us"][1] == b["compute_us"][0] and b["launches"].tolist() == [1, 2]
    x = engine.build(padded, [igemm, tma])
    assert np.isfinite(x).all() and x[1, engine.index["k_igemm"]] == 0 and x[0, engine.index["k_igemm"]] == 1


# ---- launch geometry: the grid the launchers really launch ---------------------------------------

class _Workspace:
    """Stands in for the workspace tensor ``plan`` slices (only its size and views are used)."""

    def numel(self) -> int:
        return 1 << 50

    def view(self, *args):
        return self

    def __getitem__(self, key):
        return self


def test_launch_grid_is_the_launchers_grid():
    import math

    from tiledispatch.native.launch import template_for

    engine = FeatureEngine("sm_90")
    column = engine.index["x_grid_log_ctas"]
    rng = random.Random(5)
    checked = 0
    for direction in Direction:
        pool = rule_set_configs("default", "sm_90", directions=[direction], dtypes=["bf16"])
        for stratum in ("dense", "grouped_small", "grouped_large", "depthwise", "depthwise_multiplier"):
            problem = sample_problem(rng, stratum, direction=direction)
            configs = [c for c in pool if is_supported(problem, c) and c.family.value != "tma"]
            x = engine.build(problem, configs)
            for row, config in zip(x, configs):
                launches = template_for(config).plan(problem, config, None, None, None, _Workspace())
                main = [launch for launch in launches if launch.program not in ("reduce", "pack", "tap_major")]
                assert row[column] == np.log(math.prod(main[-1].grid)), config.name
                checked += 1
    assert checked > 100
