"""Depthwise forward / backward-data dwrun kernels whose input rows travel through shared memory (``num_stages`` 3
and 4: Triton's ``cp.async`` pipeline, ``native/kernels/dwrun.py``) and four channels a thread (``vec`` 4, one 64-bit
load) timed beside ``default``'s dwrun kernels of the same problem and cuDNN, in one run on one GPU: a probe for
choosing tiles, not a report of the shipped registry.

Why: ``default``'s best 3×3 tiles (two channels a thread, the next row prefetched in registers) run the dev suite's
n32 c144 56×56 layer at 0.48 of the memory bound; at 72 registers an SM holds 14 two-warp programs, each with one row
(24 bytes a thread) in flight. A pipelined row costs shared memory, not registers, so the same programs can keep two
or three rows in flight.

Problems: the 3×3 stride-1 depthwise layers of ``dwrun_data_probe.py`` (dev suite, MobileNetV2 at batch 32) and two
MobileNetV2 layers at batch 128 (the e2e benchmark's), forward and backward-data. 7×7 is left out: a channel pair
there already takes 164-239 registers.

Usage (GPU machine): ``python bench/gpu/dwrun_stages_probe.py --out DIR``; writes ``DIR/dwrun_stages.csv`` (one row
per problem × kernel: status, relative error, µs, registers, stack bytes) and ``DIR/dwrun_stages.json``
(environment). Every kernel is compiled by the registry's own build into ``/tmp/dwrun_stages_registry``.
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

DIRECTIONS = (Direction.FORWARD, Direction.BACKWARD_DATA)
LAYERS = tuple(key for key in PROBLEMS if "|f3x3|" in key) + (
    "2d|n128|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n128|g32|c32|k32|in112x112|f3x3|s1x1|d1x1|pb1x1|pe1x1",
)
#: (vec, runs a thread owns, (runs, block_n, warps) tiles, num_stages): tiles of ``vec`` channels a thread
#: (``runs · block_n = 32 · vec × warps``).
VARIANTS = (
    (2, (4, 7, 8), ((4, 32, 2), (2, 64, 2), (8, 16, 2), (8, 32, 4), (4, 64, 4), (16, 16, 4)), (3, 4)),
    (4, (2, 4), ((4, 64, 2), (8, 32, 2), (2, 128, 2), (8, 64, 4), (4, 128, 4), (16, 32, 4)), (2, 3, 4)),
)


def stage_configs(problem: ConvProblem) -> list[KernelConfig]:
    height, width = problem.filter_size[-2], problem.output_size[-1]
    out = []
    for vec, runs_a_thread, tiles, stages in VARIANTS:
        for run, (runs, block_n, warps), stage in itertools.product(runs_a_thread, tiles, stages):
            strip = run * runs
            if not strip_fits(width, strip):
                continue
            config = KernelConfig(problem.direction, problem.dtype, problem.ndim, Family.DWRUN, run, block_n, height,
                                  warps, stage, runs, 1, 1, vec)
            if is_supported(problem, config):
                out.append(config)
    return out


def run(out: Path, workers: int) -> int:
    problems = [ConvProblem.from_key(f"{d.value}|{DType.BF16.value}|{key}") for key in LAYERS for d in DIRECTIONS]
    plan = {p.key: (stage_configs(p), default_kernels(p, Family.DWRUN)) for p in problems}
    print({key: (len(new), len(base)) for key, (new, base) in plan.items()}, flush=True)
    return probe_kernels_and_cudnn(problems, plan, Path("/tmp/dwrun_stages_registry"), workers, out, "dwrun_stages")


def main(argv: list[str] | None = None) -> int:
    return probe_main(__doc__.splitlines()[0], "dwrun_stages", run, argv)


if __name__ == "__main__":
    sys.exit(main())
