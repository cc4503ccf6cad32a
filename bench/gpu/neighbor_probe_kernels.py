"""Write ``neighbor_probe_kernels.json`` for ``config_probe.py``: the ``full`` neighbours of the dev suite's best
tensor-core kernels on the 2D grouped layers where the registry misses 1.5× cuDNN (the depthwise layers
run CUDA-core kernels, whose tiles earlier probes swept).

Why: ``default`` samples the splits, pipeline depths, merges and walk lengths of its tensor-core tiles coarsely
(backward-weight gmerge: splits 1, 4, 16; halo: the walks of a few probes). On the layers behind the missed
forward and backward-weight targets the best kernel's siblings along those axes were never timed. This lists, per
layer-direction, the two fastest tensor-core kernels of a dev-suite run and every ``full`` config that differs from
one of them in split count × pipeline depth (igemm / gmerge / gemm1x1), merge, or walk length × merge (gwalk;
halo: × its channel tile), and that supports the layer.

Result (H200, session 33, ``bench/results/2026-11-29_h200_s33/neighbor_probe_call1``): 256 kernels on 14
layer-directions; no neighbour beat ``default``'s best by more than 1.7 %, and ``default`` already held every halo
neighbour. Nothing was added to ``default``.

Usage (CPU): ``PYTHONPATH=. python bench/gpu/neighbor_probe_kernels.py --rows DIRECTION=DIR [...] --out FILE
[--below SPEEDUP] [--classes CLASS,...] [--long-splits also|only]``;
``--rows``: per direction (fwd, bwd_data, bwd_weight), the parquet folder
(``td bench`` output) to take its seeds and speedups from (one run per direction: cuDNN's times move between runs);
``--below``: the speedup over cuDNN under which a layer-direction is probed (default the 1.5 target); ``--classes``:
its problem classes (default ``2d_grouped``). ``loss_probe_kernels.json`` is ``--below 1.0 --classes
2d_grouped,3d_grouped`` over session 39's synthetic run (``bench/results/2026-11-29_h200_s39/raw/synthetic_calls2-3``,
all three directions) with ``--long-splits also``: 16 layer-directions where cuDNN was faster.
``dev_long_split_probe_kernels.json`` is ``--long-splits only`` over session 34's dev-suite backward-weight run
(``bench/results/2026-11-29_h200_s34/raw/dev_suite_bwd_weight_call1``, ``--below 1.5``): the seeds and their 128 / 256
split twins alone (session 33 timed their ``full`` neighbours).

Result of both (H200, session 40, ``bench/results/2026-11-29_h200_s40/loss_probe``): 128 and 256 splits lost on every
layer (0.37-0.48x the best ``default`` kernel on the dev suite's); gmerge backward-weight at 64 splits won n143 g4 c64
64x64 1x3 (150.9 -> 63.4 us, cuDNN 49.9) and 3D n3 g13 1x3x3 (286.9 -> 224.7, cuDNN 244.1), and ``default`` now holds
it (``rules.GMERGE_WEIGHT_LONG_SPLIT``); the other neighbours were within 0-6 %.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from pathlib import Path

import pandas as pd
from probe_lists import write_probe_list

from tiledispatch.native.configs import Family, KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.rules import rule_set_names
from tiledispatch.native.support import is_supported

#: Layers at or above this speedup over cuDNN are left out (the target).
TARGET = 1.5
SEEDS_PER_LAYER = 2
_SPLITS = (1, 2, 4, 8, 16, 32, 64)
_STAGES = (2, 3, 4, 5)
_MERGES = (1, 2, 4, 8, 16, 32)
_HALO_ROWS = (4, 7, 8, 14, 16, 28, 32)
_HALO_WIDTHS = (16, 32, 64)
_WALK_SPLITS = (4, 8, 16, 32, 64, 128)
#: ``--long-splits``: backward-weight tensor-core splits past ``full``'s 64, at the seed's pipeline depth.
_LONG_SPLITS = (128, 256)


def neighbours(seed: KernelConfig) -> list[KernelConfig]:
    """Configs one axis group away from ``seed`` (before the ``full`` and support filters)."""
    out = []
    if seed.family is Family.HALO:
        for width, rows, merge in itertools.product(_HALO_WIDTHS, _HALO_ROWS, _MERGES):
            out.append(dataclasses.replace(seed, block_n=width, block_k=width, group_m=rows, merge=merge))
    elif seed.family is Family.GWALK:
        for split, merge in itertools.product(_WALK_SPLITS if seed.split_k > 1 else (1,), _MERGES):
            out.append(dataclasses.replace(seed, split_k=split, merge=merge))
    elif seed.family in (Family.IGEMM, Family.GMERGE, Family.GEMM1X1):
        splits = _SPLITS if seed.direction.value == "bwd_weight" or seed.split_k > 1 else (1,)
        for split, stages in itertools.product(splits, _STAGES):
            out.append(dataclasses.replace(seed, split_k=split, num_stages=stages))
        if seed.family is Family.GMERGE:
            out.extend(dataclasses.replace(seed, merge=merge) for merge in _MERGES[1:])
    return out


def long_split_twins(seed: KernelConfig) -> list[KernelConfig]:
    """A backward-weight igemm / gmerge / gemm1x1 seed at :data:`_LONG_SPLITS` splits (outside ``full``, which stops
    at 64; the seed's other fields are a ``default`` tile's)."""
    if seed.direction.value != "bwd_weight" or seed.family not in (Family.IGEMM, Family.GMERGE, Family.GEMM1X1):
        return []
    return [dataclasses.replace(seed, split_k=split) for split in _LONG_SPLITS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="append", required=True, metavar="DIRECTION=DIR")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--below", type=float, default=TARGET,
                        help=f"keep layer-directions under this speedup over cuDNN (default {TARGET}: the target)")
    parser.add_argument("--classes", default="2d_grouped",
                        help="comma-separated problem classes to take layers from (default 2d_grouped)")
    parser.add_argument("--long-splits", choices=("also", "only"),
                        help=f"backward-weight tensor-core seeds also at {_LONG_SPLITS} splits (past full's "
                             f"{_SPLITS[-1]}); only: the seeds and those alone, not the full neighbours")
    args = parser.parse_args()
    classes = [name for name in args.classes.split(",") if name]
    frames = []
    for spec in args.rows:
        direction, _, folder = spec.partition("=")
        if direction not in ("fwd", "bwd_data", "bwd_weight") or not folder:
            parser.error(f"--rows: expected fwd=DIR, bwd_data=DIR or bwd_weight=DIR, got {spec!r}")
        frame = pd.concat([pd.read_parquet(path) for path in sorted(Path(folder).glob("rows-*.parquet"))])
        frames.append(frame[frame.direction == direction])
    rows = pd.concat(frames)
    rows = rows[(rows.status == "ok") & rows.problem_class.isin(classes)]
    full = rule_set_names("full")
    problems: dict[str, list[str]] = {}
    for key, layer in rows.groupby("problem_key"):
        cudnn = layer[layer.family == "cudnn"].graph_us.min()
        ours = layer[layer.family != "cudnn"].sort_values("graph_us")
        if ours.empty or cudnn / ours.graph_us.iloc[0] >= args.below:
            continue
        problem = ConvProblem.from_key(key)
        tensor = ours[ours.family.isin(["igemm", "gmerge", "gemm1x1", "gwalk", "halo"])]
        seeds = [parse_kernel_name(name) for name in tensor.kernel.head(SEEDS_PER_LAYER)]
        names = {seed.name for seed in seeds}
        for seed in seeds:
            candidates = [] if args.long_splits == "only" else [c for c in neighbours(seed) if c.name in full]
            if args.long_splits:
                candidates += long_split_twins(seed)
            names.update(c.name for c in candidates if is_supported(problem, c))
        problems[key] = sorted(names)
        print(f"{key}: cuDNN / best {cudnn / ours.graph_us.iloc[0]:.3f}, {len(names)} kernels", flush=True)
    directions = ", ".join(spec.partition("=")[0] for spec in args.rows)
    source = (f"per {'/'.join(classes)} layer-direction ({directions}) under {args.below}x cuDNN in "
              f"{', '.join(args.rows)}: its {SEEDS_PER_LAYER} fastest tensor-core kernels and "
              "their full-rule-set neighbours (bench/gpu/neighbor_probe_kernels.py)")
    write_probe_list(args.out, source, problems)


if __name__ == "__main__":
    main()
