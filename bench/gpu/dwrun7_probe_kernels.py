"""Write ``dwrun7_probe_kernels.json`` for ``config_probe.py``: 7×7 depthwise forward / backward-data dwrun tiles
beyond ``default``'s three, on the dev suite's 7×7 layer and two ConvNeXt-shaped ones.

Why: the dev suite's n32 c96 56×56 7×7 forward runs at 0.15 of its roofline (61.3 µs, cuDNN 73.0; H200, session
40), the layer-direction furthest below the forward target. Its best tile (run 4, 16 channels × 4 runs, two warps,
the next row in registers) issues 425 SASS instructions for 196 FFMA a step with 151 registers (six two-warp programs
an SM; ``bench/sass_mix.py``). Session 19's probe swept runs and channel blocks at one and two stages with one channel
a thread; two things were never timed on 7×7:

* rows through shared memory (``num_stages`` 3 and 4: Triton's ``cp.async`` pipeline, no prefetch registers), which
  needs two or four channels a thread (``vec``; Triton pipelines loads of 4 bytes or more) — with the prefetch
  registers gone a channel pair's tiles fit where session 22's pairs (164–239 registers) did not;
* short runs (1–3 columns) and one- or eight-warp programs with one channel a thread.

The list crosses run (1–8), channel block (16, 32, 64), warps (1, 2, 4, 8), stages (one channel a thread: 2, the
next row in registers, session 19's best; two or four: 3 and 4) and ``vec`` and keeps the configs whose
thread tiles cover the program once (``RUNS · BLOCK_N = 32 · warps · vec``) and whose live values stay under
``MAX_PROBE_VALUES`` (the probe may exceed ``full``'s 160: ptxas decides), and that support the layer.

Result (H200, session 40, ``bench/results/2026-11-29_h200_s40/dwrun7_probe``): one-warp programs with runs of 3 win
on all six layer-directions: n32 c96 56×56 forward 60.0 → 51.6 µs (``default``'s best in the same run; cuDNN 73.3),
c384 14×14 forward 31.5 → 19.3 (cuDNN 23.8), backward-data 1.14–1.60×; shared-memory channel pairs come within
3–12 %, never first. The follow-ups, ``--with-default`` (``default``'s dwrun and dwrow kernels in the same run):
``dwrun3_w1_probe_kernels.json`` (``--height 3 --directions fwd,bwd_data,bwd_weight --warps 1``) and
``dwrun7_w1_weight_probe_kernels.json`` (``--height 7 --directions bwd_weight --warps 1``), both generated at commit
``bfc2f06``, before ``default`` took the one-warp tiles (run now, ``--with-default`` adds their 128-split kernels).

Usage (CPU): ``PYTHONPATH=. python bench/gpu/dwrun7_probe_kernels.py --out FILE [--height 3|7] [--directions
fwd,bwd_data,bwd_weight] [--warps 1,2,4,8] [--with-default]``; the defaults write ``dwrun7_probe_kernels.json``.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from probe_lists import write_probe_list

from tiledispatch.native.configs import ConfigError, DType, Family, KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem, Direction
from tiledispatch.native.rules import dwrun_live_values, rule_set_names
from tiledispatch.native.support import is_supported

#: fp32 live values a thread may hold in the probe (``full`` keeps ≤ 160).
MAX_PROBE_VALUES = 180
#: (batch, channels, size) by filter height: 7: the dev suite's 7×7 layer, ConvNeXt-T stages 2 and 3 at batch 32;
#: 3: the dev suite's 3×3 layer and MobileNetV2's 28², 14² and 7² ones at batch 32.
LAYERS = {
    7: ((32, 96, 56), (32, 192, 28), (32, 384, 14)),
    3: ((32, 144, 56), (32, 192, 28), (32, 576, 14), (32, 960, 7)),
}
#: backward-weight: ``default``'s dwrun splits up to 64.
WEIGHT_SPLITS = (16, 32, 64)


def problems(height: int, directions: list[Direction]) -> list[ConvProblem]:
    out = []
    pad = height // 2
    for direction, (batch, channels, size) in itertools.product(directions, LAYERS[height]):
        key = (f"{direction.value}|bf16|2d|n{batch}|g{channels}|c{channels}|k{channels}|in{size}x{size}|"
               f"f{height}x{height}|s1x1|d1x1|pb{pad}x{pad}|pe{pad}x{pad}")
        out.append(ConvProblem.from_key(key))
    return out


def configs(direction: Direction, height: int, warp_counts: tuple[int, ...]) -> list[KernelConfig]:
    weight = direction is Direction.BACKWARD_WEIGHT
    out = []
    for run, block_n, warps, stages, vec, split in itertools.product(
            range(1, 9), (16, 32, 64), warp_counts, (1, 2) if weight else (2, 3, 4), (1,) if weight else (1, 2, 4),
            WEIGHT_SPLITS if weight else (1,)):
        if not weight and (stages >= 3) != (vec >= 2):  # rows in shared memory need vec >= 2; vec >= 2 at 2 stages:
            continue                                     # session 22
        runs, rest = divmod(32 * warps * vec, block_n)
        if rest or runs < 1 or runs & (runs - 1):
            continue
        try:
            config = KernelConfig(direction, DType.BF16, 2, Family.DWRUN, block_m=run,
                                  block_n=block_n, block_k=height, num_warps=warps, num_stages=stages, group_m=runs,
                                  split_k=split, vec=vec)
        except ConfigError:
            continue
        if dwrun_live_values(config) <= MAX_PROBE_VALUES:
            out.append(config)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--height", type=int, choices=sorted(LAYERS), default=7)
    parser.add_argument("--directions", default="fwd,bwd_data", help="comma-separated (default fwd,bwd_data)")
    parser.add_argument("--warps", default="1,2,4,8", help="comma-separated warp counts (default 1,2,4,8)")
    parser.add_argument("--with-default", action="store_true",
                        help="also default's dwrun and dwrow kernels that run each layer (the baseline, same run)")
    args = parser.parse_args()
    directions = [Direction(name) for name in args.directions.split(",") if name]
    warp_counts = tuple(int(count) for count in args.warps.split(",") if count)
    default = [parse_kernel_name(name) for name in sorted(rule_set_names("default"))
               if "_dwrun_" in name or "_dwrow_" in name] if args.with_default else []
    listed: dict[str, list[str]] = {}
    for problem in problems(args.height, directions):
        names = {c.name for c in configs(problem.direction, args.height, warp_counts) if is_supported(problem, c)}
        if args.with_default:
            names.update(c.name for c in default if c.direction is problem.direction and is_supported(problem, c))
        listed[problem.key] = sorted(names)
        print(f"{problem.key}: {len(names)} kernels", flush=True)
    source = (f"{args.height}x{args.height} depthwise {'/'.join(d.value for d in directions)} dwrun tiles (runs 1-8, "
              f"{'/'.join(map(str, warp_counts))} warps, stages, vec) on the layers of LAYERS[{args.height}] "
              f"(bench/gpu/dwrun7_probe_kernels.py --height {args.height} --directions {args.directions} "
              f"--warps {args.warps}{' --with-default' if args.with_default else ''})")
    write_probe_list(args.out, source, listed)


if __name__ == "__main__":
    main()
