"""dwroll programs that hold their output rows (``group_m`` > 1, ``_dwroll_held_kernel``) timed beside every
``default`` depthwise kernel of the same problem and cuDNN, in one run on one GPU: a probe for choosing the
held tiles, not a report of the shipped registry.

The rolling walk (``group_m`` 1) loads one input row per step and depth tap and uses it at once; the held form
issues every load of a depth tap together (session 14). Problems: the dev suite's 3D depthwise layer and 2D
depthwise layers of the PyTorch e2e models (stride 1, where dwroll runs), forward and backward-data.

Usage (GPU machine): ``python bench/gpu/held_probe.py --out DIR``; writes ``DIR/held.csv`` (one row per
problem × variant) and ``DIR/held.json`` (environment). Every kernel, held or not, is compiled by the
registry's own build (``rule_set="probe"``) into ``/tmp/held_registry``.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import torch
from probe_rows import ProbeRows, compiled_call, probe_main

from tiledispatch.native.bench import BenchSettings, _cudnn_call, environment_manifest, measure_ceilings, new_setup
from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.registry import Registry, build
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import is_supported

#: The dev suite's 3D depthwise layer, then 2D stride-1 depthwise layers (dev suite; MobileNetV2 / ConvNeXt-tiny
#: at batch 32).
PROBLEMS = (
    "3d|n8|g192|c192|k192|in16x28x28|f3x3x3|s1x1x1|d1x1x1|pb1x1x1|pe1x1x1",
    "2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g96|c96|k96|in56x56|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    "2d|n32|g32|c32|k32|in112x112|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g192|c192|k192|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g576|c576|k576|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g384|c384|k384|in14x14|f7x7|s1x1|d1x1|pb3x3|pe3x3",
)

#: Held tiles (block_w, block_n, warps) x held rows.
HELD_TILES = ((32, 16, 4), (32, 32, 4), (32, 32, 8), (64, 16, 4), (64, 32, 4), (64, 32, 8), (16, 32, 4),
              (16, 64, 4), (128, 16, 4))
HELD_ROWS = (2, 4, 8)


def held_configs(problem: ConvProblem) -> list[KernelConfig]:
    height = problem.filter_size[-2]
    out = []
    for (block_w, block_n, warps), held in itertools.product(HELD_TILES, HELD_ROWS):
        config = KernelConfig(problem.direction, problem.dtype, problem.ndim, Family.DWROLL, block_w, block_n, height,
                              warps, 1, held, 1, 1, 8)
        if is_supported(problem, config):
            out.append(config)
    return out


def default_configs(problem: ConvProblem) -> list[KernelConfig]:
    """default's dwroll and direct kernels that run the problem."""
    return [c for c in rule_set_configs("default", "sm_90")
            if c.direction is problem.direction and c.dtype is problem.dtype and c.ndim == problem.ndim
            and c.family in (Family.DWROLL, Family.DIRECT) and is_supported(problem, c)]


def run(out: Path, workers: int) -> int:
    out.mkdir(parents=True, exist_ok=True)
    cache = Path("/tmp/held_registry")
    problems = [ConvProblem.from_key(f"{d.value}|{DType.BF16.value}|{key}")
                for key in PROBLEMS for d in (Direction.FORWARD, Direction.BACKWARD_DATA)]
    plan = {p.key: (held_configs(p), default_configs(p)) for p in problems}
    wanted = {c for held, base in plan.values() for c in held + base}
    started = time.time()
    build(sorted(wanted, key=lambda c: c.name), arch="sm_90", cache_dir=cache, workers=workers, rule_set="probe")
    print(f"built {len(wanted)} kernels in {time.time() - started:.0f}s", flush=True)
    registry = Registry.load(cache, "sm_90")
    settings = BenchSettings(cache_dir=str(cache), event_timing=False)
    ceilings = measure_ceilings()
    (out / "held.json").write_text(json.dumps(environment_manifest(settings, ceilings), indent=2, default=str))
    probe = ProbeRows(out / "held.csv", settings, ceilings)

    def record(problem: ConvProblem, setup, variant: str, call, cudnn: bool = False) -> None:
        probe.record(problem, setup, variant, call, cudnn=cudnn, held="_gm1_" not in variant and not cudnn)

    loader = registry.loader()
    for problem in problems:
        print(problem.key, flush=True)
        setup = new_setup(problem, settings)
        torch.backends.cudnn.benchmark = True
        record(problem, setup, "cudnn", _cudnn_call(problem, setup), cudnn=True)
        held, base = plan[problem.key]
        for config in base + held:
            if config.name not in registry.entries:
                continue  # its build failed: the build log says why
            record(problem, setup, config.name, compiled_call(problem, config, setup, loader))
        del setup
    return 0


def main(argv: list[str] | None = None) -> int:
    return probe_main(__doc__.splitlines()[0], "held", run, argv)


if __name__ == "__main__":
    sys.exit(main())
