"""Depthwise dwrun kernels with a channel pair a thread (``vec`` 2: one 32-bit load of two neighbouring channels,
``native/kernels/dwrun.py`` ``channel_vectors``) timed beside `default`'s dwrun kernels (``vec`` 1: on every one of
these layers faster than the dwroll ones, ``bench/results/2026-11-27_h200_s19``) of the same problem and cuDNN, in
one run on one GPU, forward, backward-data and backward-weight: a probe for choosing tiles, not a report of the
shipped registry.

Problems: the stride-1 depthwise layers of ``dwrun_data_probe.py`` (the dev suite's 3×3 and 7×7 layers and the
MobileNetV2 / ConvNeXt-tiny layers at batch 32).

Usage (GPU machine): ``python bench/gpu/dwrun_pair_probe.py --out DIR``; writes ``DIR/dwrun_pair.csv`` (one row per
problem × kernel: status, relative error, µs, registers, stack bytes) and ``DIR/dwrun_pair.json`` (environment).
Every kernel is compiled by the registry's own build into ``/tmp/dwrun_pair_registry``.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from dwrun_data_probe import PROBLEMS, strip_fits
from probe_rows import default_kernels, probe_kernels_and_cudnn, probe_main

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.support import is_supported

DIRECTIONS = (Direction.FORWARD, Direction.BACKWARD_DATA, Direction.BACKWARD_WEIGHT)
#: Columns a thread owns, by filter height (a pair doubles the fp32 values a thread keeps: shorter runs).
RUNS_BY_HEIGHT = {3: (4, 7, 8, 14), 7: (2, 4)}
#: (runs, block_n, warps): one channel pair of each tile a thread (runs · block_n = 64 × warps).
TILES = ((4, 32, 2), (2, 64, 2), (8, 16, 2), (8, 32, 4), (4, 64, 4), (2, 128, 4), (16, 16, 4))
#: Backward-weight: loads a step ahead (as every default dwrun weight tile but one), at 64 splits (what the best
#: default kernels of the 56-wide layers use; the probe compares tiles, not splits).
WEIGHT_SPLITS = (64,)


def pair_configs(problem: ConvProblem) -> list[KernelConfig]:
    height, width = problem.filter_size[-2], problem.output_size[-1]
    weight = problem.direction is Direction.BACKWARD_WEIGHT
    out = []
    for run, (runs, block_n, warps) in itertools.product(RUNS_BY_HEIGHT[height], TILES):
        strip = run * runs
        if not strip_fits(width, strip):
            continue
        for stages, split_k in itertools.product((2,) if weight else (2, 1), WEIGHT_SPLITS if weight else (1,)):
            config = KernelConfig(problem.direction, problem.dtype, problem.ndim, Family.DWRUN, run, block_n, height,
                                  warps, stages, runs, split_k, 1, 2)
            if is_supported(problem, config):
                out.append(config)
    return out


def run(out: Path, workers: int) -> int:
    problems = [ConvProblem.from_key(f"{d.value}|{DType.BF16.value}|{key}") for key in PROBLEMS for d in DIRECTIONS]
    plan = {p.key: (pair_configs(p), default_kernels(p, Family.DWRUN)) for p in problems}
    print({key: (len(new), len(base)) for key, (new, base) in plan.items()}, flush=True)
    return probe_kernels_and_cudnn(problems, plan, Path("/tmp/dwrun_pair_registry"), workers, out, "dwrun_pair")


def main(argv: list[str] | None = None) -> int:
    return probe_main(__doc__.splitlines()[0], "dwrun_pair", run, argv)


if __name__ == "__main__":
    sys.exit(main())
