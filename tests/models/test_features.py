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
