"""Depthwise backward-weight with each thread owning a run of output columns (``dwrun``,
``native/kernels/dwrun.py``) timed beside the best kernels of ``default`` of the same problem (session 17's dwrow
probe: the best dwroll / direct kernel and the best dwrow kernel) and cuDNN, in one run on one GPU: a probe for
choosing the tiles and splits that go into ``default``, not a report of the shipped registry.

Problems: the stride-1 depthwise backward-weight layers of session 17's dwrow probe (the dev suite's 2D 3×3 and 7×7
and 3D 3×3×3 layers, and those of the PyTorch e2e models at batch 32: MobileNetV2, ConvNeXt-tiny) and a 5×5 layer.

Usage (GPU machine): ``python bench/gpu/dwrun_probe.py --out DIR``; writes ``DIR/dwrun.csv`` (one row per
problem × kernel: status, relative error, µs, registers, stack bytes) and ``DIR/dwrun.json`` (environment).
Every kernel is compiled by the registry's own build (``rule_set="probe"``) into ``/tmp/dwrun_registry``.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from dwrun_data_probe import strip_fits
from probe_rows import probe_kernels_and_cudnn, probe_main

from tiledispatch.native.configs import Family, KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.support import is_supported

_DWROLL = "gconv_bwd_weight_bf16_{}d_dwroll_{}_mg1_v8_i32"
_DWROW = "gconv_bwd_weight_bf16_2d_dwrow_{}_mg1_v8_i32"
#: Problem → the best default kernel and the best dwrow kernel of session 17's dwrow probe (same H200 kind).
PROBLEMS = {
    "3d|n8|g192|c192|k192|in16x28x28|f3x3x3|s1x1x1|d1x1x1|pb1x1x1|pe1x1x1": (
        _DWROLL.format(3, "16x32x3_w2_s2_gm1_sk128"),),
    "2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1": (_DWROLL.format(2, "16x32x3_w2_s2_gm1_sk128"),),
    "2d|n32|g96|c96|k96|in56x56|f7x7|s1x1|d1x1|pb3x3|pe3x3": (_DWROLL.format(2, "32x16x7_w8_s2_gm1_sk64"),),
    "2d|n32|g32|c32|k32|in112x112|f3x3|s1x1|d1x1|pb1x1|pe1x1": (_DWROLL.format(2, "64x16x3_w8_s2_gm1_sk128"),),
    "2d|n32|g192|c192|k192|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1": (_DWROLL.format(2, "16x32x3_w2_s2_gm1_sk128"),),
    "2d|n32|g384|c384|k384|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1": (_DWROLL.format(2, "16x32x3_w2_s2_gm1_sk64"),),
    "2d|n32|g576|c576|k576|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1": (_DWROLL.format(2, "16x32x3_w2_s2_gm1_sk32"),),
    "2d|n32|g960|c960|k960|in7x7|f3x3|s1x1|d1x1|pb1x1|pe1x1": (_DWROLL.format(2, "8x64x3_w2_s2_gm1_sk32"),),
    "2d|n32|g192|c192|k192|in28x28|f7x7|s1x1|d1x1|pb3x3|pe3x3": (_DWROLL.format(2, "16x16x7_w4_s2_gm1_sk64"),
                                                                 _DWROW.format("32x32x7_w4_s1_gm1_sk16")),
    "2d|n32|g384|c384|k384|in14x14|f7x7|s1x1|d1x1|pb3x3|pe3x3": (_DWROLL.format(2, "8x16x7_w2_s2_gm1_sk16"),),
    "2d|n32|g768|c768|k768|in7x7|f7x7|s1x1|d1x1|pb3x3|pe3x3": (_DWROLL.format(2, "8x16x7_w2_s1_gm1_sk16"),),
    "2d|n32|g480|c480|k480|in14x14|f5x5|s1x1|d1x1|pb2x2|pe2x2": (_DWROLL.format(2, "16x32x5_w4_s2_gm1_sk16"),),
}

#: Columns a thread owns, by filter height (7 and 14 tile the 56-, 28-, 14- and 7-wide rows exactly).
RUNS_BY_HEIGHT = {3: (7, 8, 14), 5: (7, 8), 7: (4, 7, 8)}
#: (runs, block_n, warps): one element of each tile a thread.
TILES = ((8, 16, 4), (4, 32, 4), (2, 64, 4), (16, 16, 8), (4, 16, 2), (1, 32, 1), (2, 32, 2), (1, 128, 4))
SPLITS = (16, 32, 64, 128)
#: Programs (channel blocks × depth taps × splits) a launch may have: about 2 to 8 per SM of a 132-SM GPU.
PROGRAMS = (256, 1100)


def dwrun_configs(problem: ConvProblem) -> list[KernelConfig]:
    height, width = problem.filter_size[-2], problem.output_size[-1]
    out = []
    for run, (runs, block_n, warps), split_k in itertools.product(RUNS_BY_HEIGHT[height], TILES, SPLITS):
        strip = run * runs
        if not strip_fits(width, strip):
            continue
        programs = -(-problem.in_channels // block_n) * problem.filter_size[0] ** (problem.ndim - 2) * split_k
        if not PROGRAMS[0] <= programs <= PROGRAMS[1]:
            continue
        for stages in (2, 1) if (runs, block_n, warps) == (8, 16, 4) or runs * run == width else (2,):
            config = KernelConfig(problem.direction, problem.dtype, problem.ndim, Family.DWRUN, run, block_n, height,
                                  warps, stages, runs, split_k, 1, 1)
            if is_supported(problem, config):
                out.append(config)
    return out


def run(out: Path, workers: int) -> int:
    problems = [ConvProblem.from_key(f"{Direction.BACKWARD_WEIGHT.value}|{DType.BF16.value}|{key}") for key in PROBLEMS]
    plan = {p.key: (dwrun_configs(p), [parse_kernel_name(name) for name in PROBLEMS[p.key.split("|", 2)[2]]])
            for p in problems}
    print({key: len(new) for key, (new, _) in plan.items()}, flush=True)
    return probe_kernels_and_cudnn(problems, plan, Path("/tmp/dwrun_registry"), workers, out, "dwrun")


def main(argv: list[str] | None = None) -> int:
    return probe_main(__doc__.splitlines()[0], "dwrun", run, argv)


if __name__ == "__main__":
    sys.exit(main())
