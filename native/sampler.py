"""Seeded, stratified synthetic sampler over the problem space (DESIGN §6 source a).

Distribution (documented here, reproduced exactly by the seed):

* class strata, equal weight: ``dense`` (G = 1), ``grouped_small`` (G > 1, C/G and K/G in 2–16),
  ``grouped_large`` (G > 1, C/G and K/G in 16–256), ``depthwise`` (C/G = K/G = 1),
  ``depthwise_multiplier`` (C/G = 1, K/G in 2–4);
* ``ndim``: 2D with probability 0.75, else 3D;
* channels per group drawn log-uniformly in the stratum's range; one draw in four is odd
  (not divisible by 8), as in real networks (39% of crawled shapes); groups drawn so that
  total channels stay within 16–2048 (dense: 16–1024);
* filter: 1×1 (25%), 3×3 (45%), 5×5 (10%), 7×7 (10%), non-square (10%, e.g. 1×7, 7×1, 3×5);
  3D filters add a depth of 1 or 3;
* stride 1 (70%) or 2 (30%); dilation 1 (90%) or 2–3 (10%) when the filter is larger than 1;
  padding "same" (80%), zero (10%) or asymmetric (10%);
* batch log-uniform in 1–256; spatial size log-uniform in 7–112 (2D), depth 4–32 and 7–56 (3D),
  then the batch is reduced until the forward FLOPs are <= ``max_gflops`` (keeps single
  measurements short) and the largest tensor is <= ``max_elements``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from tiledispatch.native.problem import ConvProblem, Direction, DType

STRATA = ("dense", "grouped_small", "grouped_large", "depthwise", "depthwise_multiplier")


@dataclass(frozen=True)
class SamplerSettings:
    max_gflops: float = 60.0
    max_elements: int = 1 << 27
    p_3d: float = 0.25


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def _channels(rng: random.Random, low: int, high: int) -> int:
    value = _log_uniform(rng, low, high)
    if rng.random() < 0.25:
        return max(low, value | 1)  # odd
    return max(low, (value + 7) // 8 * 8) if value >= 8 else value


def _filter(rng: random.Random, ndim: int) -> tuple[int, ...]:
    roll = rng.random()
    if roll < 0.25:
        plane = (1, 1)
    elif roll < 0.70:
        plane = (3, 3)
    elif roll < 0.80:
        plane = (5, 5)
    elif roll < 0.90:
        plane = (7, 7)
    else:
        plane = rng.choice([(1, 7), (7, 1), (3, 5), (5, 3), (1, 3), (3, 1)])
    if ndim == 3:
        return (rng.choice([1, 3]), *plane)
    return plane


def sample_problem(rng: random.Random, stratum: str, settings: SamplerSettings = SamplerSettings(),
                   direction: Direction = Direction.FORWARD, dtype: DType = DType.BF16) -> ConvProblem:
    ndim = 3 if rng.random() < settings.p_3d else 2
    if stratum == "dense":
        groups, cg, kg = 1, _channels(rng, 16, 1024), _channels(rng, 16, 1024)
    elif stratum == "grouped_small":
        cg = _channels(rng, 2, 16)
        kg = cg if rng.random() < 0.7 else _channels(rng, 2, 16)
        groups = _log_uniform(rng, 2, max(2, 2048 // max(cg, kg)))
    elif stratum == "grouped_large":
        cg = _channels(rng, 16, 256)
        kg = cg if rng.random() < 0.7 else _channels(rng, 16, 256)
        groups = _log_uniform(rng, 2, max(2, min(64, 2048 // max(cg, kg))))
    elif stratum == "depthwise":
        cg = kg = 1
        groups = _channels(rng, 16, 1536)
    elif stratum == "depthwise_multiplier":
        cg, kg = 1, rng.choice([2, 3, 4])
        groups = _channels(rng, 8, 512)
    else:
        raise ValueError(f"stratum: must be one of {STRATA}, got {stratum!r}")
    filter_size = _filter(rng, ndim)
    stride = 2 if rng.random() < 0.3 else 1
    strides = (stride,) * ndim
    if ndim == 3 and rng.random() < 0.5:
        strides = (1, stride, stride)
    dilation = tuple(rng.choice([2, 3]) if f > 1 and rng.random() < 0.1 else 1 for f in filter_size)
    reach = [d * (f - 1) for f, d in zip(filter_size, dilation)]
    roll = rng.random()
    if roll < 0.8:
        pad_begin = tuple(r // 2 for r in reach)
        pad_end = tuple(r - r // 2 for r in reach)
    elif roll < 0.9:
        pad_begin = pad_end = (0,) * ndim
    else:
        pad_begin = tuple(r // 2 for r in reach)
        pad_end = tuple(max(0, r // 2 - 1) for r in reach)
    if ndim == 2:
        side = _log_uniform(rng, 7, 112)
        spatial = (side, side) if rng.random() < 0.8 else (side, _log_uniform(rng, 7, 112))
    else:
        side = _log_uniform(rng, 7, 56)
        spatial = (_log_uniform(rng, 4, 32), side, side)
    spatial = tuple(max(s, r + 1) for s, r in zip(spatial, reach))
    batch = _log_uniform(rng, 1, 256)
    while True:
        problem = ConvProblem(direction=direction, dtype=dtype, batch=batch, groups=groups,
                              in_channels=groups * cg, out_channels=groups * kg, input_size=spatial,
                              filter_size=filter_size, stride=strides, dilation=dilation,
                              pad_begin=pad_begin, pad_end=pad_end)
        too_big = (problem.flops > settings.max_gflops * 1e9
                   or max(problem.input_elements, problem.output_elements) > settings.max_elements)
        if not too_big or batch == 1:
            return problem
        batch = max(1, batch // 2)


def sample_problems(count: int, seed: int = 0, settings: SamplerSettings = SamplerSettings()) -> list[ConvProblem]:
    """``count`` distinct forward bf16 problems, strata in rotation (each class equally often)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[ConvProblem] = []
    attempts = 0
    while len(out) < count:
        stratum = STRATA[len(out) % len(STRATA)]
        problem = sample_problem(rng, stratum, settings)
        attempts += 1
        if problem.shape_key in seen:
            if attempts > count * 50:
                raise RuntimeError("sampler: too many duplicate draws; widen the ranges")
            continue
        seen.add(problem.shape_key)
        out.append(problem)
    return out
