"""The analytic fallback predictor: sane, vectorised, fast, and shaped by the effects it models."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from tiledispatch.models.analytic import LAUNCH_US, AnalyticPredictor
from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import supported_configs

PREDICTOR = AnalyticPredictor("h200")


def conv(direction="fwd", n=32, g=1, c=256, k=256, hw=28, f=3, stride=1, dtype="bf16", ndim=2):
    pad = f // 2
    return ConvProblem(direction, dtype, n, g, c, k, (hw,) * ndim, (f,) * ndim, (stride,) * ndim, (1,) * ndim,
                       (pad,) * ndim, (pad,) * ndim)


PROBLEMS = [conv(d, **kw) for d in ("fwd", "bwd_data", "bwd_weight") for kw in (
    dict(), dict(g=32, c=128, k=128, hw=56), dict(g=256, c=256, k=256), dict(n=1, c=64, k=64, hw=56, f=1),
    dict(g=4, c=12, k=20, hw=17, f=5, stride=2), dict(g=8, c=16, k=32, hw=12, ndim=3))]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.key)
def test_predictions_are_finite_and_above_the_launch_cost(problem):
    configs = supported_configs(problem, rule_set_configs("default", "sm_90", directions=[problem.direction],
                                                          dtypes=[problem.dtype], ndims=[problem.ndim]))
    assert configs
    times = PREDICTOR.predict_us(problem, configs)
    assert times.shape == (len(configs),)
    assert np.all(np.isfinite(times)) and np.all(times >= LAUNCH_US)
    # Never faster than the physical limit of the problem at the datasheet rates.
    spec = PREDICTOR.spec
    bound_us = max(problem.flops / (spec.peak_tflops(problem.dtype) * 1e6),
                   problem.min_bytes / (spec.memory_bandwidth_gbs * 1e3))
    assert np.all(times >= bound_us)


def test_ranks_300_candidates_well_under_2ms():
    problem = conv("bwd_weight", g=32, c=128, k=128, hw=56)
    configs = rule_set_configs("default", "sm_90", directions=["bwd_weight"], dtypes=["bf16"])
    configs = (configs * 2)[:300]
    PREDICTOR.predict_us(problem, configs)
    runs = []
    for _ in range(30):
        start = time.perf_counter()
        PREDICTOR.predict_us(problem, configs)
        runs.append(time.perf_counter() - start)
    assert np.median(runs) < 2e-3, f"median {np.median(runs) * 1e3:.2f} ms"


def _igemm(**changes) -> KernelConfig:
    base = KernelConfig("fwd", "bf16", 2, Family.IGEMM, 128, 128, 32, 8, 4, 8, 1, 1, 8, False)
    return dataclasses.replace(base, **changes)


def test_tile_quantisation_penalises_padding():
    """K/G = 80 on 64-wide tiles computes 128 columns: nearly the time of 128, not 80/64 of 64's."""
    config = _igemm(block_m=128, block_n=64, block_k=64, num_stages=3, num_warps=4)
    t64, t80, t128 = (PREDICTOR.predict_us(conv(n=64, c=1024, k=k, hw=28), [config])[0] for k in (64, 80, 128))
    assert t80 > 1.6 * t64
    assert t80 == pytest.approx(t128, rel=0.1)


def test_gmerge_beats_igemm_on_small_groups():
    problem = conv(g=64, c=256, k=256, hw=56)  # C/G = K/G = 4
    igemm = _igemm(block_m=128, block_n=32, block_k=32, num_warps=4)
    gmerge = dataclasses.replace(igemm, family=Family.GMERGE, merge=8)
    t_igemm, t_gmerge = PREDICTOR.predict_us(problem, [igemm, gmerge])
    assert t_gmerge < t_igemm


def test_wave_quantisation_one_more_row_of_tiles_costs_a_wave():
    """128×128 tiles with 4 stages fit 2 CTAs per SM (registers): 264 slots on 132 SMs. 33 × 16
    tiles are exactly two waves; 34 × 16 need a third for 3% more work."""
    config = _igemm(block_m=128, block_n=128)
    full, over = (conv(n=rows * 128, c=4096, k=2048, hw=1, f=1) for rows in (33, 34))
    t_full, t_over = (PREDICTOR.predict_us(p, [config])[0] for p in (full, over))
    assert t_over > 1.4 * t_full


def test_split_k_adds_a_launch_and_workspace():
    problem = conv("bwd_weight", n=1, c=64, k=64, hw=8)
    base = KernelConfig("bwd_weight", "bf16", 2, Family.IGEMM, 64, 64, 32, 4, 4, 8, 1, 1, 8, False)
    t1, t4 = PREDICTOR.predict_us(problem, [base, dataclasses.replace(base, split_k=4)])
    assert t4 >= t1 + LAUNCH_US * 0.99  # tiny problem: the extra launch dominates


def test_empty_candidate_list():
    assert PREDICTOR.predict_us(conv(), []).shape == (0,)
