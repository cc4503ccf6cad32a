"""Depthwise forward and backward-data with each thread owning a run of output columns (``dwrun``,
``native/kernels/dwrun.py`` ``_dwrun_data_kernel``) timed beside every ``default`` dwroll kernel of the same problem
(the family that is best on the dev suite's stride-1 depthwise layers in both directions) and cuDNN, in one run on
one GPU: a probe for choosing the tiles that go into ``default``, not a report of the shipped registry.

Problems: the dev suite's 2D 3×3 and 7×7 depthwise layers and stride-1 depthwise layers of the PyTorch e2e models
at batch 32 (MobileNetV2, ConvNeXt-tiny), forward and backward-data.

Usage (GPU machine): ``python bench/gpu/dwrun_data_probe.py --out DIR``; writes ``DIR/dwrun_data.csv`` (one row per
problem × kernel: status, relative error, µs, registers, stack bytes) and ``DIR/dwrun_data.json`` (environment).
Every kernel is compiled by the registry's own build (``rule_set="probe"``) into ``/tmp/dwrun_data_registry``.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from probe_rows import default_kernels, probe_kernels_and_cudnn, probe_main

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.support import is_supported

PROBLEMS = (
    "2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g96|c96|k96|in56x56|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    "2d|n32|g32|c32|k32|in112x112|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g192|c192|k192|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g576|c576|k576|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g192|c192|k192|in28x28|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    "2d|n32|g384|c384|k384|in14x14|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    "2d|n32|g768|c768|k768|in7x7|f7x7|s1x1|d1x1|pb3x3|pe3x3",
)
DIRECTIONS = (Direction.FORWARD, Direction.BACKWARD_DATA)

#: Columns a thread owns, by filter height, and whether that run also runs without loading a row ahead.
RUNS_BY_HEIGHT = {3: (8, 14, 16), 7: (4, 7, 14)}
#: (runs, block_n, warps): one element of each tile a thread.
TILES = ((4, 32, 4), (8, 16, 4), (2, 64, 4), (1, 128, 4), (4, 16, 2))
#: Widest strip padding accepted: the strip's columns past the row cost FMAs on zeros.
MAX_STRIP_WASTE = 1.15


def strip_fits(width: int, strip: int) -> bool:
    """Whether strips of ``strip`` columns cover an output row of ``width`` within :data:`MAX_STRIP_WASTE` and are
    at most twice as wide as the row."""
    return -(-width // strip) * strip <= MAX_STRIP_WASTE * width and strip <= 2 * width


def dwrun_configs(problem: ConvProblem) -> list[KernelConfig]:
    height, width = problem.filter_size[-2], problem.output_size[-1]
    out = []
    for run, (runs, block_n, warps) in itertools.product(RUNS_BY_HEIGHT[height], TILES):
        strip = run * runs
        if not strip_fits(width, strip):
            continue
        # the longest runs hold too many values to load a row ahead as well (ptxas: 254 registers at 14 x 7x7)
        for stages in (1,) if run * height >= 98 else (2, 1):
            config = KernelConfig(problem.direction, problem.dtype, problem.ndim, Family.DWRUN, run, block_n, height,
                                  warps, stages, runs, 1, 1, 1)
            if is_supported(problem, config):
                out.append(config)
    return out


def run(out: Path, workers: int) -> int:
    problems = [ConvProblem.from_key(f"{d.value}|{DType.BF16.value}|{key}") for key in PROBLEMS for d in DIRECTIONS]
    plan = {p.key: (dwrun_configs(p), default_kernels(p, Family.DWROLL)) for p in problems}
    print({key: (len(new), len(base)) for key, (new, base) in plan.items()}, flush=True)
    return probe_kernels_and_cudnn(problems, plan, Path("/tmp/dwrun_data_registry"), workers, out, "dwrun_data")


def main(argv: list[str] | None = None) -> int:
    return probe_main(__doc__.splitlines()[0], "dwrun_data", run, argv)


if __name__ == "__main__":
    sys.exit(main())
