"""Depthwise backward-weight one filter row per program (``dwrow``, ``native/kernels/dwrow.py``) timed beside
every ``default`` depthwise backward-weight kernel of the same problem and cuDNN, in one run on one GPU: a probe
for choosing the tiles and splits that go into ``default``, not a report of the shipped registry.

Problems: the dev suite's depthwise backward-weight layers (2D 3×3 and 7×7, 3D 3×3×3) and the depthwise layers
of the PyTorch e2e models at batch 32 (MobileNetV2, ConvNeXt-tiny), strided ones included (dwroll walks stride-1
rows only; dwrow takes any stride).

Usage (GPU machine): ``python bench/gpu/dwrow_probe.py --out DIR``; writes ``DIR/dwrow.csv`` (one row per
problem × kernel: status, relative error, µs, registers, stack bytes) and ``DIR/dwrow.json`` (environment).
Every kernel is compiled by the registry's own build (``rule_set="probe"``) into ``/tmp/dwrow_registry``.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from probe_rows import probe_kernels_and_cudnn, probe_main

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import is_supported

PROBLEMS = (
    "3d|n8|g192|c192|k192|in16x28x28|f3x3x3|s1x1x1|d1x1x1|pb1x1x1|pe1x1x1",
    "2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g96|c96|k96|in56x56|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    "2d|n32|g32|c32|k32|in112x112|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g96|c96|k96|in112x112|f3x3|s2x2|d1x1|pb1x1|pe1x1",
    "2d|n32|g144|c144|k144|in56x56|f3x3|s2x2|d1x1|pb1x1|pe1x1",
    "2d|n32|g192|c192|k192|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g192|c192|k192|in28x28|f3x3|s2x2|d1x1|pb1x1|pe1x1",
    "2d|n32|g384|c384|k384|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g576|c576|k576|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g576|c576|k576|in14x14|f3x3|s2x2|d1x1|pb1x1|pe1x1",
    "2d|n32|g960|c960|k960|in7x7|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g192|c192|k192|in28x28|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    "2d|n32|g384|c384|k384|in14x14|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    "2d|n32|g768|c768|k768|in7x7|f7x7|s1x1|d1x1|pb3x3|pe3x3",
)

#: (block_w, block_n, warps): 4, 8 and (3-wide filters only) 16 elements per thread.
TILES = {4: ((32, 16, 4), (16, 32, 4), (64, 16, 8), (32, 32, 8), (8, 64, 4)),
         8: ((32, 32, 4), (64, 16, 4), (16, 64, 4), (64, 32, 8), (32, 64, 8), (128, 16, 8)),
         16: ((64, 32, 4), (32, 64, 4), (128, 32, 8))}
SPLITS = (16, 32, 64, 128)
#: Tiles also timed without loading a row ahead (num_stages 1).
PLAIN_TILES = ((32, 32, 4), (64, 16, 4))


def dwrow_configs(problem: ConvProblem) -> list[KernelConfig]:
    width = problem.filter_size[-1]
    tiles = TILES[4] + TILES[8] + (TILES[16] if width <= 3 else ())
    out = []
    for (block_w, block_n, warps), split_k in itertools.product(tiles, SPLITS):
        for stages in (2, 1) if (block_w, block_n, warps) in PLAIN_TILES else (2,):
            config = KernelConfig(problem.direction, problem.dtype, problem.ndim, Family.DWROW, block_w, block_n,
                                  width, warps, stages, 1, split_k, 1, 8)
            if is_supported(problem, config):
                out.append(config)
    return out


def default_configs(problem: ConvProblem) -> list[KernelConfig]:
    """default's depthwise kernels (dwroll, direct) that run the problem: the best of default on every depthwise
    backward-weight problem measured so far (dev suite and e2e layers, sessions 10-16)."""
    return [c for c in rule_set_configs("default", "sm_90", directions=[problem.direction], dtypes=[problem.dtype],
                                        ndims=[problem.ndim])
            if c.family in (Family.DWROLL, Family.DIRECT) and is_supported(problem, c)]


def run(out: Path, workers: int) -> int:
    problems = [ConvProblem.from_key(f"{Direction.BACKWARD_WEIGHT.value}|{DType.BF16.value}|{key}") for key in PROBLEMS]
    plan = {p.key: (dwrow_configs(p), default_configs(p)) for p in problems}
    return probe_kernels_and_cudnn(problems, plan, Path("/tmp/dwrow_registry"), workers, out, "dwrow")


def main(argv: list[str] | None = None) -> int:
    return probe_main(__doc__.splitlines()[0], "dwrow", run, argv)


if __name__ == "__main__":
    sys.exit(main())
