"""Backward-weight tensor-core kernels with one accumulator per split (``flat``) against the same binaries'
chunked, promoting ``main`` program, in one run on one GPU, with cuDNN: the A/B for
``igemm_bwd_weight.uses_flat_program`` (``native/kernels/igemm_bwd_weight.py``), not a report of the registry.

``main`` sums each chunk of PROMOTE_POSITIONS positions in its own tensor-core accumulator and adds the chunks
in fp32, which keeps a second accumulator tile live (64×128, 4 warps: 233 registers, 2 programs per SM);
``flat`` sums a split in one (155 registers, 3 per SM). Both are the registry's build of the same kernel; the
probe runs each problem × kernel twice, once as the launch plans it (``flat``) and once with the plan forced
to ``main``, so the difference is the program alone.

Kernels: ``flat_probe_kernels.json`` (``--write-kernels`` makes it from a dev-suite run's raw rows, no GPU): per
non-depthwise bf16 backward-weight dev-suite problem, the ``default`` igemm / gmerge / gemm1x1 kernels within
``--within`` of that problem's best kernel that would run ``flat`` on it.

Usage (GPU machine): ``python bench/gpu/flat_probe.py --out DIR``; writes ``DIR/flat.csv`` (one row per problem ×
kernel × program: status, relative error, µs, registers and stack bytes of the kernel's build) and
``DIR/flat.json`` (environment). Compiled by the registry's own build into ``/tmp/flat_registry``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "flat_probe_kernels.json"


def write_kernels(raw: Path, within: float, out: Path) -> int:
    """The kernel list from a dev-suite run's raw parquet rows (``bench/results/.../raw/dev_suite_*``)."""
    import pandas as pd

    from tiledispatch.native.configs import Family, parse_kernel_name
    from tiledispatch.native.kernels.igemm_bwd_weight import uses_flat_program
    from tiledispatch.native.problem import ConvProblem

    rows = pd.concat([pd.read_parquet(p) for p in sorted(raw.glob("rows-*.parquet"))], ignore_index=True)
    rows = rows[(rows.direction == "bwd_weight") & (rows.status == "ok") & (rows.family != "cudnn")]
    problems: dict[str, list[list]] = {}
    for key, group in rows.groupby("problem_key"):
        problem = ConvProblem.from_key(key)
        if problem.groups == problem.in_channels == problem.out_channels:
            continue  # depthwise: no tensor-core kernel is near its best
        best = group.graph_us.min()
        picked = []
        for name, us in group.sort_values("graph_us")[["kernel", "graph_us"]].itertuples(index=False):
            config = parse_kernel_name(name)
            if (us <= within * best and config.family in (Family.IGEMM, Family.GMERGE, Family.GEMM1X1)
                    and uses_flat_program(problem, config)):
                picked.append([name, round(float(us), 2)])
        if picked:
            problems[key] = picked
    source = (f"per non-depthwise bf16 backward-weight dev-suite problem, the default igemm/gmerge/gemm1x1 kernels "
              f"within {within}x of its best kernel in {raw} that run `flat` there (their time in that run beside "
              f"each)")
    out.write_text(json.dumps({"source": source, "problems": problems}, indent=1) + "\n")
    print(f"{sum(map(len, problems.values()))} problem-kernels on {len(problems)} problems -> {out}")
    return 0


@contextlib.contextmanager
def _planned_program(flat: bool, decisions: list[bool]):
    """The launch plan forced to ``main`` (``flat`` False) or left as it decides (True); every decision the
    plan takes meanwhile is appended to ``decisions``. Launches cache their plan per (problem, kernel), so
    the cache is cleared on the way in and out: without that the second variant would reuse the first's plan
    (session 18's first run of this probe did, and timed ``flat`` twice)."""
    from tiledispatch.native import launch
    from tiledispatch.native.kernels import igemm_bwd_weight

    planned = igemm_bwd_weight.uses_flat_program

    def decide(problem, config):
        decisions.append(planned(problem, config) if flat else False)
        return decisions[-1]

    launch.clear_plans()
    igemm_bwd_weight.uses_flat_program = decide
    try:
        yield
    finally:
        igemm_bwd_weight.uses_flat_program = planned
        launch.clear_plans()


def run(out: Path, workers: int) -> int:
    import torch
    from probe_rows import compiled_call, start_probe

    from tiledispatch.native.bench import _cudnn_call, new_setup
    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.kernels.igemm_bwd_weight import uses_flat_program
    from tiledispatch.native.problem import ConvProblem

    plan = {ConvProblem.from_key(key): [parse_kernel_name(name) for name, _ in kernels]
            for key, kernels in json.loads(KERNELS.read_text())["problems"].items()}
    built, registry, settings, probe = start_probe([c for configs in plan.values() for c in configs],
                                                   Path("/tmp/flat_registry"), workers, out, "flat")
    loader = registry.loader()
    for problem, configs in plan.items():
        print(problem.key, flush=True)
        setup = new_setup(problem, settings)
        torch.backends.cudnn.benchmark = True
        probe.record(problem, setup, "cudnn", _cudnn_call(problem, setup), cudnn=True, program="", registers=0,
                     stack_bytes=0)
        for config in configs:
            result = built.get(config.name)
            assert uses_flat_program(problem, config), config.name
            for flat in (True, False):
                program = "flat" if flat else "main"
                if config.name not in registry.entries:
                    print(f"  {config.name:66s} {program}: not timed ({result.status if result else 'not built'})",
                          flush=True)
                    continue
                call = compiled_call(problem, config, setup, loader)
                decisions: list[bool] = []
                with _planned_program(flat, decisions):
                    row = probe.record(problem, setup, config.name, call, program=program,
                                       registers=result.registers if result else 0,
                                       stack_bytes=result.stack_bytes if result else 0)
                # the plan was made under this variant, and chose its program
                assert decisions and set(decisions) == {flat}, (config.name, program, decisions, row)
        del setup
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--write-kernels", type=Path, metavar="RAW_DIR",
                        help="write flat_probe_kernels.json from a dev-suite run's raw rows (no GPU) and stop")
    parser.add_argument("--within", type=float, default=1.3)
    args = parser.parse_args(argv)
    if args.write_kernels:
        return write_kernels(args.write_kernels, args.within, KERNELS)
    if args.out is None:
        parser.error("--out is required to run the probe")
    started = time.time()
    code = run(args.out, args.workers)
    print(f"flat probe done in {time.time() - started:.0f}s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
