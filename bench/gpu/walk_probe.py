"""gwalk tiles beyond ``default`` timed beside the registry's earlier best kernels and cuDNN, in one run on one
GPU: a probe for choosing the family's tiles, not a report of the shipped registry.

The row walk (``native/kernels/gwalk.py``) began here: calls 1–2 of session 12
(``bench/results/2026-11-26_h200_s12/walk_probe/``) ran a probe copy of it, JIT-compiled with Triton's
integer specialisation, at ``fe25839`` and ``138562f`` (weights held in registers as a variant). The kernel is
in the package since ``2c46d18`` (16-byte channel runs in the registry's binaries since ``ce7478e``), so the
probe now measures the package's kernel at any gwalk config (``launch.run`` with the JIT backend: the same
program as the registry's binary, without integer specialisation) on ResNeXt-50's stride-1 grouped 3×3 layers.

Backward-weight (``--directions bwd_weight``, session 13): the walks of ``gwalk_bwd_weight.py`` at
:data:`WEIGHT_TILES` × lanes × rows × splits, compiled in parallel through the registry (a config whose registry
build spills runs JIT-launched instead, with Triton's integer specialisation: compare it with care).

Usage (GPU machine): ``python bench/gpu/walk_probe.py --out DIR [--directions fwd,bwd_data,bwd_weight]``; writes
``DIR/walk.csv`` (one row per problem × variant) and ``DIR/walk.json`` (environment).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch
from probe_rows import ProbeRows

from tiledispatch.native import launch
from tiledispatch.native.bench import BenchSettings, _cudnn_call, environment_manifest, measure_ceilings, new_setup
from tiledispatch.native.configs import Family, KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.registry import Registry, build
from tiledispatch.native.rules import rule_set_names
from tiledispatch.native.support import is_supported

#: ResNeXt-50 32x4d's stride-1 grouped 3×3 layers (dev suite) at batch 32, and one at batch 128.
PROBLEMS = (
    "2d|n32|g32|c128|k128|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g32|c512|k512|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g32|c1024|k1024|in7x7|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n128|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
)

#: The dev suite's best earlier kernels of these layers (session 10, 93f200e) and gmerge's unpipelined tiles,
#: through the registry.
REGISTRY_CANDIDATES = {
    "fwd": ("gconv_fwd_bf16_2d_gmerge_128x32x32_w4_s1_gm8_sk1_mg8_v8_i32",
            "gconv_fwd_bf16_2d_gmerge_128x32x32_w4_s1_gm8_sk1_mg4_v8_i32",
            "gconv_fwd_bf16_2d_gmerge_128x32x32_w4_s1_gm8_sk1_mg2_v8_i32",
            "gconv_fwd_bf16_2d_gmerge_128x64x64_w4_s3_gm8_sk1_mg8_v8_i32",
            "gconv_fwd_bf16_2d_igemm_128x32x32_w4_s4_gm8_sk1_mg1_v8_i32"),
    "bwd_data": ("gconv_bwd_data_bf16_2d_gmerge_128x32x32_w4_s4_gm8_sk1_mg8_v8_i32",
                 "gconv_bwd_data_bf16_2d_gmerge_128x32x32_w4_s4_gm8_sk1_mg4_v8_i32",
                 "gconv_bwd_data_bf16_2d_gmerge_128x32x32_w4_s4_gm8_sk1_mg2_v8_i32",
                 "gconv_bwd_data_bf16_2d_gmerge_128x32x32_w4_s1_gm8_sk1_mg4_v8_i32",
                 "gconv_bwd_data_bf16_2d_igemm_128x32x32_w4_s4_gm8_sk1_mg1_v8_i32"),
    # the best backward-weight kernels of these layers in session 12's dev suites (ce7478e)
    "bwd_weight": ("gconv_bwd_weight_bf16_2d_gmerge_64x64x64_w4_s3_gm8_sk16_mg16_v8_i32",
                   "gconv_bwd_weight_bf16_2d_gmerge_64x64x64_w4_s3_gm8_sk16_mg8_v8_i32",
                   "gconv_bwd_weight_bf16_2d_gmerge_64x64x64_w4_s3_gm8_sk4_mg4_v8_i32",
                   "gconv_bwd_weight_bf16_2d_igemm_64x32x64_w4_s3_gm8_sk4_mg1_v8_i32",
                   "gconv_bwd_weight_bf16_2d_igemm_64x32x64_w4_s3_gm8_sk1_mg1_v8_i32"),
}

#: gwalk (block_m, channel tile, warps) beyond default's: 32-row tiles, 8 warps on 64-row tiles, 1-row walks.
TILES = ((32, 32, 4), (64, 16, 4), (64, 32, 4), (64, 32, 8), (64, 64, 4), (128, 16, 4), (128, 32, 4),
         (128, 32, 8), (128, 64, 8), (256, 32, 8))


#: gwalk backward-weight (block_m, block_n, warps) x reduction lanes x rows x splits; the merge that fills the
#: tile (the largest the problem supports).
WEIGHT_TILES = ((16, 16, 2), (16, 16, 4), (32, 32, 4), (32, 32, 8), (64, 32, 8))
WEIGHT_LANES = (64, 128)
WEIGHT_ROWS = (1, 2, 4)
WEIGHT_SPLITS = (16, 32, 64, 128)


def walk_configs(problem: ConvProblem) -> list[KernelConfig]:
    """Every gwalk config of :data:`TILES` × 1, 2, 4 rows × merges that the problem supports (backward-weight:
    :data:`WEIGHT_TILES` × lanes × rows × splits at the largest merge that fits)."""
    out = []
    if problem.direction is Direction.BACKWARD_WEIGHT:
        for (block_m, block_n, warps), lanes, rows, split in itertools.product(WEIGHT_TILES, WEIGHT_LANES,
                                                                               WEIGHT_ROWS, WEIGHT_SPLITS):
            for merge in (16, 8, 4, 2, 1):
                config = KernelConfig(problem.direction, problem.dtype, 2, Family.GWALK, block_m, block_n, lanes,
                                      warps, 1, rows, split, merge, 8)
                if is_supported(problem, config):
                    out.append(config)
                    break
        return out
    for (block_m, side, warps), rows, merge in itertools.product(TILES, (1, 2, 4), (1, 2, 4, 8, 16)):
        config = KernelConfig(problem.direction, problem.dtype, 2, Family.GWALK, block_m, side, side, warps, 1,
                              rows, 1, merge, 8)
        if is_supported(problem, config):
            out.append(config)
    return out


def run(out: Path, workers: int, directions: list[Direction]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    cache = Path("/tmp/walk_registry")
    problems = [ConvProblem.from_key(f"{d.value}|{DType.BF16.value}|{key}") for d in directions for key in PROBLEMS]
    # every candidate and every backward-weight walk compiled in parallel (the data-direction walks run JIT)
    wanted = {parse_kernel_name(n) for d in directions for n in REGISTRY_CANDIDATES[d.value]}
    wanted |= {c for p in problems if p.direction is Direction.BACKWARD_WEIGHT for c in walk_configs(p)}
    build(sorted(wanted, key=lambda c: c.name), arch="sm_90", cache_dir=cache, workers=workers, rule_set="probe")
    registry = Registry.load(cache, "sm_90")
    default = rule_set_names("default")
    settings = BenchSettings(cache_dir=str(cache), event_timing=False)
    ceilings = measure_ceilings()
    (out / "walk.json").write_text(json.dumps(environment_manifest(settings, ceilings), indent=2, default=str))
    probe = ProbeRows(out / "walk.csv", settings, ceilings)

    def record(problem: ConvProblem, setup, variant: str, call, cudnn: bool = False) -> None:
        probe.record(problem, setup, variant, call, cudnn=cudnn, in_default=variant in default)

    for problem in problems:
        print(problem.key, flush=True)
        setup = new_setup(problem, settings)
        torch.backends.cudnn.benchmark = True
        record(problem, setup, "cudnn", _cudnn_call(problem, setup), cudnn=True)
        configs = [parse_kernel_name(n) for n in REGISTRY_CANDIDATES[problem.direction.value]]
        for config in configs + walk_configs(problem):
            if not is_supported(problem, config):
                continue
            compiled = config.name in registry.entries
            loader = registry.loader() if compiled else None

            def call(i, c=config, p=problem, su=setup, ld=loader, backend="compiled" if compiled else "jit"):
                return launch.run(p, c, su.first[i], su.second[i], su.out[i], backend=backend, loader=ld,
                                  check_support=False)
            record(problem, setup, config.name, call)
        del setup
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--directions", default="fwd,bwd_data", help="comma-separated: fwd, bwd_data, bwd_weight")
    args = parser.parse_args(argv)
    started = time.time()
    code = run(args.out, args.workers, [Direction.parse(d) for d in args.directions.split(",")])
    print(f"walk probe done in {time.time() - started:.0f}s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
