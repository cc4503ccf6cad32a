"""How the dwroll launchers tile a problem (``native/kernels/dwroll.py``), without Triton: row chunks,
the forward pass each direction runs, backward-weight work items; and the work items of the dwrow and dwrun
backward-weight launchers (``native/kernels/dwrow.py``, ``native/kernels/dwrun.py``). Shared by the launchers and the
feature engine (``models/features.py``), which evaluates :func:`row_chunk` over arrays of configs.

A program owns a strip of ``block_m`` output columns × ``block_n`` channels at one ``(n, o_d)`` and a
chunk of ``ROWS`` output rows; each chunk re-reads ``F_H − 1`` halo input rows.
"""

from __future__ import annotations

import numpy as np

from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.kernels.base import as3d, cdiv
from tiledispatch.native.problem import ConvProblem, Direction

#: Programs a launch aims for before it splits the output rows into chunks: 8 per SM of a 132-SM
#: GPU. Fewer leave SMs idle (one strip is one program); more only add halo rows (F_H − 1 per chunk).
TARGET_PROGRAMS = 1056
#: Rows of the shortest chunk, as a multiple of the halo (F_H − 1 extra input rows per chunk).
MIN_ROWS_PER_HALO = 2


def row_chunk(strips, out_h: int, f_h: int):
    """Output rows per chunk: whole columns when ``strips`` programs already fill the GPU, else chunks
    of at least ``MIN_ROWS_PER_HALO·(F_H − 1)`` rows (or 4) until about :data:`TARGET_PROGRAMS`.
    ``strips``: an int (a launch) or an int64 array (one per config: the feature engine)."""
    chunks = np.maximum(1, np.minimum(cdiv(TARGET_PROGRAMS, np.maximum(strips, 1)), out_h))
    shortest = max(4, MIN_ROWS_PER_HALO * (f_h - 1))
    return np.maximum(min(out_h, shortest), cdiv(out_h, chunks))


def data_geometry(problem: ConvProblem) -> dict[str, tuple[int, ...]]:
    """Extents and pads of the forward pass the kernel runs: the problem's own (forward and
    backward-weight), or over dY with the flipped filter (backward-data: stride 1,
    ``pad' = dil·(F − 1) − pad_begin``)."""
    filt = as3d(problem.filter_size, 1)
    dil = as3d(problem.dilation, 1)
    if problem.direction is not Direction.BACKWARD_DATA:
        return {"in": as3d(problem.input_size, 1), "out": as3d(problem.output_size, 1), "filter": filt,
                "stride": as3d(problem.stride, 1), "dil": dil, "pad": as3d(problem.pad_begin, 0)}
    pads = tuple(d * (f - 1) - p for d, f, p in zip(dil, filt, as3d(problem.pad_begin, 0)))
    return {"in": as3d(problem.output_size, 1), "out": as3d(problem.input_size, 1), "filter": filt,
            "stride": (1, 1, 1), "dil": dil, "pad": pads}


def data_rows(problem: ConvProblem, config: KernelConfig, geo: dict[str, tuple[int, ...]] | None = None) -> int:
    """ROWS of a forward / backward-data launch (see :func:`row_chunk`; held-rows configs: ``group_m``);
    ``geo``: the problem's :func:`data_geometry`, when the caller has it."""
    if config.group_m > 1:  # the held-rows kernel: one chunk of group_m rows per program
        return config.group_m
    geo = data_geometry(problem) if geo is None else geo
    out_d, out_h, out_w = geo["out"]
    strips = cdiv(problem.in_channels, config.block_n) * cdiv(out_w, config.block_m) * problem.batch * out_d
    return int(row_chunk(strips, out_h, geo["filter"][1]))


def weight_tiling(problem: ConvProblem, config: KernelConfig, strip_w: int | None = None) -> tuple[int, int]:
    """(ROWS, ITEMS_PER_SPLIT) of a backward-weight launch: chunks so that there are about
    ``split_k`` work items per split or more, items split evenly. ``strip_w``: output columns of a work
    item (default ``block_m``)."""
    out_d, out_h, out_w = as3d(problem.output_size, 1)
    strips = problem.batch * out_d * cdiv(out_w, config.block_m if strip_w is None else strip_w)
    rows = int(row_chunk(strips * cdiv(TARGET_PROGRAMS, config.split_k), out_h, problem.filter_size[-2]))
    items = strips * cdiv(out_h, rows)
    return rows, cdiv(items, config.split_k)


def dwrow_tiling(problem: ConvProblem, config: KernelConfig) -> tuple[int, int, int]:
    """(ROWS, ITEMS_PER_SPLIT, work items) of a dwrow backward-weight launch (``dwrow.py``): whole output
    columns per work item unless that leaves splits without an item; then row chunks until there are at least
    ``split_k`` items (no halo here: a chunk costs one more first-row latency, nothing re-read), items
    split evenly."""
    out_d, out_h, out_w = as3d(problem.output_size, 1)
    strips = problem.batch * out_d * cdiv(out_w, config.block_m)
    chunks = min(out_h, max(1, cdiv(config.split_k, strips)))
    rows = cdiv(out_h, chunks)
    items = strips * cdiv(out_h, rows)
    return rows, cdiv(items, config.split_k), items


def dwrun_tiling(problem: ConvProblem, config: KernelConfig) -> tuple[int, int]:
    """(ROWS, ITEMS_PER_SPLIT) of a dwrun backward-weight launch (``dwrun.py``): :func:`weight_tiling` over strips
    of ``group_m`` runs of ``block_m`` columns."""
    return weight_tiling(problem, config, config.block_m * config.group_m)


def dwrun_data_rows(problem: ConvProblem, config: KernelConfig, geo: dict[str, tuple[int, ...]] | None = None) -> int:
    """ROWS of a dwrun forward / backward-data launch (``dwrun.py``; 2D): :func:`row_chunk` over programs of
    ``block_n`` channels × ``group_m`` runs of ``block_m`` columns."""
    geo = data_geometry(problem) if geo is None else geo
    _, out_h, out_w = geo["out"]
    strips = (cdiv(problem.in_channels, config.block_n) * cdiv(out_w, config.block_m * config.group_m)
              * problem.batch)
    return int(row_chunk(strips, out_h, geo["filter"][1]))


#: Elements per thread up to which a 2D 3×3 forward / backward-data program holds its channel block's
#: nine weights in registers (72 fp32 values for 8 channels per thread): 128 registers at 8 elements
#: per thread, 180 at 16 (ptxas, sm_90), where the per-step L1 reloads cost less than the occupancy.
HOIST_MAX_ELEMENTS_PER_THREAD = 8


def hoists_weights(config: KernelConfig) -> bool:
    """Whether a dwroll forward / backward-data kernel reads its weights once, straight from ``W``, and
    keeps them in registers (2D, 3×3, ≤ :data:`HOIST_MAX_ELEMENTS_PER_THREAD` elements per thread), instead
    of two 16-byte L1 loads per tap and row from a tap-major copy written by a first launch."""
    per_thread = config.block_m * config.block_n // (32 * config.num_warps)
    return (config.direction is not Direction.BACKWARD_WEIGHT and config.ndim == 2 and config.block_k == 3
            and config.group_m == 1 and per_thread <= HOIST_MAX_ELEMENTS_PER_THREAD)
