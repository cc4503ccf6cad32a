"""Write ``warp_twin_probe_kernels.json`` for ``config_probe.py``: the CUDA-core kernels (``direct``, ``dwrow``,
``dwroll``, ``dwrun``) that run a bench run's lowest-roofline layers best, each beside its twins at 1, 2, 4 and 8 warps.

Why: session 40's depthwise probes (``dwrun7_probe_kernels.py``; H200, ``bench/results/2026-11-29_h200_s40``) found
one-warp ``dwrun`` programs 1.12-1.65x faster than the four- and two-warp tiles every earlier probe had settled on,
on 14 forward / backward-data layer-directions. The kernels of the synthetic run's lowest fractions of the roofline are
all four-warp programs of the other CUDA-core families: the g239 / n24 g471 depthwise multipliers (``direct`` forward
and backward-data, the scalar ``dwrow`` backward-weight), n15 g534 C/G = 3, the strided 7×7 depthwise g931. Their
warp counts were never swept against the same tiles.

Per layer-direction of ``--rows`` (a ``td bench`` folder) whose best kernel runs under ``--below`` of the roofline and
whose bound is at least ``--min-bound-us``: its ``SEEDS_PER_LAYER`` fastest CUDA-core kernels and their twins at 1,
2, 4 and 8 warps with the seed's elements a thread (the program's tile scales with its warps: ``block_m``, or
``block_n`` where ``block_m`` would leave :data:`BLOCK_M_RANGE`; session 40's one-warp ``dwrun`` tiles were small
programs, not more work a thread — the same tile on one warp holds four times the values and spills), that are valid
configs and support the layer. ``--compile-check DIR``: compile every twin for sm_90 here (CPU, ``config_probe``'s
worker, as ``--variants cap`` builds it) and leave out those ptxas spills.

Usage (CPU): ``PYTHONPATH=. python bench/gpu/warp_twin_probe_kernels.py --rows DIR --out FILE [--below FRACTION]
[--min-bound-us US] [--compile-check DIR]``. ``warp_twin_probe_kernels.json`` is ``--rows
bench/results/2026-11-29_h200_s39/raw/synthetic_calls2-3 --compile-check /tmp/twin_bin``: not yet timed (for
``call.sh configs``, ``PROBE_VARIANTS=cap``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from pathlib import Path

import pandas as pd
from probe_lists import write_probe_list

from tiledispatch.native.configs import ConfigError, KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.support import is_supported

SEEDS_PER_LAYER = 2
WARP_COUNTS = (1, 2, 4, 8)
CUDA_CORE = ("direct", "dwrow", "dwroll", "dwrun")
#: The ``block_m`` a scaled twin may take (``direct``: output positions; ``dwrow``: columns of a filter row).
BLOCK_M_RANGE = (8, 256)


def twin(seed: KernelConfig, warps: int) -> KernelConfig | None:
    """``seed`` on ``warps`` warps with its elements a thread: ``block_m`` (else ``block_n``) scaled by the warp ratio;
    None where neither can be."""
    if warps == seed.num_warps:
        return seed
    for field in ("block_m", "block_n"):
        value = getattr(seed, field) * warps // seed.num_warps
        if getattr(seed, field) * warps % seed.num_warps or value < 1:
            continue
        if field == "block_m" and not BLOCK_M_RANGE[0] <= value <= BLOCK_M_RANGE[1]:
            continue
        try:
            return dataclasses.replace(seed, num_warps=warps, **{field: value})
        except ConfigError:
            continue
    return None


@functools.cache
def spills(name: str, binaries: Path) -> bool:
    """Whether ptxas spills any program of ``name`` (compiled here for sm_90 by config_probe's worker, ``cap``; once a
    kernel, whichever layers list it)."""
    from config_probe import _compile

    return any(program["spill_bytes"] for program in _compile(name, "cap", str(binaries))["programs"].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, required=True, help="a td bench output folder (rows-*.parquet)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--below", type=float, default=0.15, help="best kernel's fraction of the roofline under this")
    parser.add_argument("--min-bound-us", type=float, default=20.0, help="the layer's roofline bound at least this")
    parser.add_argument("--compile-check", type=Path, metavar="DIR",
                        help="compile each twin for sm_90 into DIR and leave out the ones that spill")
    args = parser.parse_args()
    rows = pd.concat([pd.read_parquet(path) for path in sorted(args.rows.glob("rows-*.parquet"))])
    rows = rows[rows.status == "ok"]
    problems: dict[str, list[str]] = {}
    for key, layer in rows.groupby("problem_key"):
        ours = layer[~layer.family.str.startswith("cudnn")].sort_values("graph_us")
        if ours.empty:
            continue
        bound, fraction = ours.bound_us.iloc[0], ours.bound_us.iloc[0] / ours.graph_us.iloc[0]
        if bound < args.min_bound_us or fraction >= args.below:
            continue
        problem = ConvProblem.from_key(key)
        seeds = [parse_kernel_name(name) for name in ours[ours.family.isin(CUDA_CORE)].kernel.head(SEEDS_PER_LAYER)]
        names = {seed.name for seed in seeds}
        for seed in seeds:
            for warps in WARP_COUNTS:
                config = twin(seed, warps)
                if config is None or config.name in names or not is_supported(problem, config):
                    continue
                if args.compile_check and spills(config.name, args.compile_check):
                    print(f"  {config.name}: spills, left out", flush=True)
                    continue
                names.add(config.name)
        if names:
            problems[key] = sorted(names)
            print(f"{key}: fraction {fraction:.3f}, {len(names)} kernels", flush=True)
    source = (f"per layer-direction of {args.rows} under {args.below} of the roofline "
              f"(bound >= {args.min_bound_us} us): its {SEEDS_PER_LAYER} fastest CUDA-core kernels and their twins "
              f"at {WARP_COUNTS} warps, elements a thread kept{', spill-free' if args.compile_check else ''} "
              "(bench/gpu/warp_twin_probe_kernels.py)")
    write_probe_list(args.out, source, problems)


if __name__ == "__main__":
    main()
