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

Usage (CPU): ``PYTHONPATH=. python bench/gpu/dwrun7_probe_kernels.py --out bench/gpu/dwrun7_probe_kernels.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from tiledispatch.native.configs import ConfigError, DType, Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction
from tiledispatch.native.rules import dwrun_live_values
from tiledispatch.native.support import is_supported

#: fp32 live values a thread may hold in the probe (``full`` keeps ≤ 160).
MAX_PROBE_VALUES = 180
_LAYERS = (  # (batch, channels, size): the dev suite's 7×7 layer, ConvNeXt-T stage 2 and 3 at batch 32
    (32, 96, 56),
    (32, 192, 28),
    (32, 384, 14),
)


def problems() -> list[ConvProblem]:
    out = []
    for direction, (batch, channels, size) in itertools.product(
            (Direction.FORWARD, Direction.BACKWARD_DATA), _LAYERS):
        key = (f"{direction.value}|bf16|2d|n{batch}|g{channels}|c{channels}|k{channels}|in{size}x{size}|f7x7|s1x1|"
               "d1x1|pb3x3|pe3x3")
        out.append(ConvProblem.from_key(key))
    return out


def configs(direction: Direction) -> list[KernelConfig]:
    out = []
    for run, block_n, warps, stages, vec in itertools.product(
            range(1, 9), (16, 32, 64), (1, 2, 4, 8), (2, 3, 4), (1, 2, 4)):
        if (stages >= 3) != (vec >= 2):  # shared-memory rows need vec >= 2; vec >= 2 at 1-2 stages: session 22
            continue
        runs, rest = divmod(32 * warps * vec, block_n)
        if rest or runs < 1 or runs & (runs - 1):
            continue
        try:
            config = KernelConfig(direction, DType.BF16, 2, Family.DWRUN, block_m=run, block_n=block_n, block_k=7,
                                  num_warps=warps, num_stages=stages, group_m=runs, vec=vec)
        except ConfigError:
            continue
        if dwrun_live_values(config) <= MAX_PROBE_VALUES:
            out.append(config)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    listed: dict[str, list[list]] = {}
    for problem in problems():
        names = sorted(c.name for c in configs(problem.direction) if is_supported(problem, c))
        listed[problem.key] = [[name, None] for name in names]
        print(f"{problem.key}: {len(names)} kernels", flush=True)
    source = ("7x7 depthwise forward / backward-data dwrun tiles (runs 1-8, 1-8 warps, 2-4 stages, vec 1/2/4) on the "
              "dev suite's 7x7 layer and two ConvNeXt-shaped ones (bench/gpu/dwrun7_probe_kernels.py)")
    args.out.write_text(json.dumps({"source": source, "problems": listed}, indent=1) + "\n")
    print(f"{sum(len(v) for v in listed.values())} (problem, kernel) pairs, "
          f"{len({n for v in listed.values() for n, _ in v})} kernels -> {args.out}")


if __name__ == "__main__":
    main()
