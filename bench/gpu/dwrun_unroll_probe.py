"""Depthwise forward / backward-data ``dwrun`` with the output-row window unrolled ``F_H`` steps an iteration, timed
beside ``default``'s dwrun kernels of the same problem and cuDNN, in one run on one GPU: a probe for the kernel, not
a report of the shipped registry.

Why (ptxas and SASS of ``gconv_fwd_bf16_2d_dwrun_4x16x7_w2_s2_gm4_sk1_mg1_v1_i32``, sm_90, this repository's
build): its loop issues 424 instructions a step for 196 FFMA; 44 of them are ``IMAD.MOV``, the window of ``F_H``
output rows (``F_H·RUN`` accumulators) shifted by one row every step (``_data_step`` returns the rolled tuple) and the
prefetched row handed over. At the dev suite's n32 c96 56×56 7×7 layer (1,536 two-warp programs, 34 steps each)
that instruction count alone is 42 µs at one instruction a clock per scheduler; the kernel runs 61.6 µs.

The kernel here keeps output row ``o`` (relative to the chunk) in slot ``o mod F_H`` for its whole life: a loop
iteration walks ``F_H`` steps, statically unrolled, so at step ``s = s0 + u`` (``s0`` a multiple of ``F_H``) the
input row pairs with filter row ``t_h`` in slot ``(u − t_h) mod F_H``, a compile-time index: no register moves. The
finished row (``t_h = F_H − 1``, slot ``(u + 1) mod F_H``) is stored once ``s ≥ F_H − 1`` and its slot zeroed. The
walk is padded to a multiple of ``F_H`` steps (masked loads and stores past the chunk). The math and the grid are
``_dwrun_data_kernel``'s (``native/kernels/dwrun.py``): ``Y[n, o_h, o_w, k] = Σ_{t_h, t_w} W[k, t_h, t_w] ·
X[n, o_h − p_h + t_h, o_w − p_w + t_w, k]``, no GEMM (C/G = K/G = 1: CUDA-core FMAs).

Measured (H200, session 30, ``bench/results/2026-11-28_h200_s30/probe_dwrun_unroll_call4``): not kept. The 4-column
tile unrolled runs as fast as rolled (0.98–1.00× on the 56² and 28² layers, 0.81–0.83× on 14²): the moves were not
the limit. Runs of 7–14 columns cut the instructions per FMA 1.2× but hold 190–255 registers and lose 25–60 % at
batch 32; only ConvNeXt-T's batch-128 stage-1 layer gains (7-column runs, 1.10–1.12×). Nsight Compute of the rolled
kernel: 73 % of the issue slots busy with 2.8 warps a scheduler — issue-bound on the loads' address and mask work.

Usage (GPU machine): ``python bench/gpu/dwrun_unroll_probe.py --out DIR`` (``--compile-only``: compile every tile for
sm_90 here and print registers, spills and the loop's instruction mix; no GPU). Writes ``DIR/dwrun_unroll.csv`` (one
row per problem × kernel: status, relative error, µs, registers) and ``DIR/dwrun_unroll.json`` (environment).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import triton
import triton.language as tl

from tiledispatch.native.kernels.base import cdiv
from tiledispatch.native.kernels.direct import _f32
from tiledispatch.native.kernels.dwroll import _zeros_tuple
from tiledispatch.native.kernels.dwroll_tiling import data_geometry, row_chunk
from tiledispatch.native.kernels.dwrun import _row_loads
from tiledispatch.native.problem import ConvProblem, Direction, DType

PROBLEMS = (
    "2d|n32|g96|c96|k96|in56x56|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    "2d|n32|g192|c192|k192|in28x28|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    "2d|n32|g384|c384|k384|in14x14|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    "2d|n128|g96|c96|k96|in56x56|f7x7|s1x1|d1x1|pb3x3|pe3x3",
)
DIRECTIONS = (Direction.FORWARD, Direction.BACKWARD_DATA)
#: (run, runs, block_n, warps, prefetch) by filter height: one element of each (runs, block_n) tile a thread.
#: Registers (ptxas, sm_90, bf16): 4-column runs 167-168, 7 190 (223 with the next row in registers), 8 211, 14 255;
#: no spills. 3×3 is left out: its step is 72 FFMA of ~370 instructions, memory- and address-bound (vec 4 tiles).
TILES = {
    7: ((4, 4, 16, 2, True), (4, 4, 16, 2, False), (7, 4, 16, 2, True), (7, 4, 16, 2, False), (7, 2, 32, 2, False),
        (7, 8, 16, 4, False), (8, 2, 32, 2, False), (14, 2, 16, 1, False)),
}


@triton.jit
def _dwrun_data_unrolled_kernel(
    x_ptr, w_ptr, y_ptr,
    BATCH, CHANNELS, IN_H, IN_W, OUT_H, OUT_W, F_W, PAD_H, PAD_W, ROWS,
    RUN: tl.constexpr, RUNS: tl.constexpr, BLOCK_N: tl.constexpr, F_H: tl.constexpr, FLIP: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """See the module docstring; arguments, grid and weight layout as ``_dwrun_data_kernel``."""
    C = CHANNELS
    num_c = tl.cdiv(C, BLOCK_N)
    strip_w = RUNS * RUN
    num_w = tl.cdiv(OUT_W, strip_w)
    num_h = tl.cdiv(OUT_H, ROWS)
    pid = tl.program_id(0)
    pid_c = pid % num_c
    rest = pid // num_c
    pid_w = rest % num_w
    rest = rest // num_w
    pid_h = rest % num_h
    n = rest // num_h
    cols = pid_c * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < C
    run_col = pid_w * strip_w + tl.arange(0, RUNS) * RUN
    x_col = run_col - PAD_W
    x_tile = (x_col * C)[:, None] + cols[None, :]
    y_tile = (run_col * C)[:, None] + cols[None, :]
    oh0 = pid_h * ROWS
    steps = tl.minimum(oh0 + ROWS, OUT_H) - oh0 + F_H - 1
    x_plane = n * IN_H
    y_plane = n * OUT_H

    taps = F_H * F_W
    weights = ()
    for i in tl.static_range(F_H * F_H):  # i = t_h·F_H + t_w; columns t_w ≥ F_W hold zeros
        if FLIP:
            tap = (F_H - 1 - i // F_H) * F_W + (F_W - 1 - i % F_H)
        else:
            tap = (i // F_H) * F_W + i % F_H
        weights = weights + (tl.load(w_ptr + cols * taps + tap, mask=col_ok & (i % F_H < F_W), other=0.0
                                     ).to(tl.float32)[None, :],)

    acc = _zeros_tuple(F_H * RUN, RUNS, BLOCK_N)  # slot r·RUN + j: column j of the output row o with o mod F_H = r
    nxt = _row_loads(x_ptr, 0, steps, oh0, PAD_H, IN_H, IN_W, C, x_plane, x_tile, x_col, col_ok, F_W, RUN, F_H)
    for s0 in range(0, steps, F_H):
        for u in tl.static_range(F_H):
            s = s0 + u
            if PREFETCH:
                cur = nxt
                nxt = _row_loads(x_ptr, s + 1, steps, oh0, PAD_H, IN_H, IN_W, C, x_plane, x_tile, x_col, col_ok, F_W,
                                 RUN, F_H)
            else:
                cur = _row_loads(x_ptr, s, steps, oh0, PAD_H, IN_H, IN_W, C, x_plane, x_tile, x_col, col_ok, F_W,
                                 RUN, F_H)
            acc = _unrolled_step(acc, cur, weights, s, steps, y_ptr, y_plane, oh0, OUT_W, C, y_tile, run_col, col_ok,
                                 F_W, u, RUN, F_H, RUNS, BLOCK_N)


@triton.jit
def _unrolled_step(acc, cur, weights, s, steps, y_ptr, y_plane, oh0, OUT_W, C, y_tile, run_col, col_ok, F_W,
                   u: tl.constexpr, RUN: tl.constexpr, F_H: tl.constexpr, RUNS: tl.constexpr, BLOCK_N: tl.constexpr):
    """Step ``s = s0 + u``: input row ``s`` into output rows ``s − t_h`` (slots ``(u − t_h) mod F_H``), then the
    row that has seen every filter row (slot ``(u + 1) mod F_H``) stored and zeroed."""
    xs = ()
    for m in tl.static_range(RUN + F_H - 1):
        xs = xs + (_f32(cur[m]),)
    for tw in tl.static_range(F_H):
        if tw < F_W:
            out = ()
            for i in tl.static_range(F_H * RUN):  # i = slot·RUN + j; slot = (u − t_h) mod F_H
                out = out + (acc[i] + weights[((u - i // RUN + F_H) % F_H) * F_H + tw] * xs[i % RUN + tw],)
            acc = out
    if (s >= F_H - 1) & (s < steps):
        y_row = y_ptr + (y_plane + oh0 + s - (F_H - 1)) * OUT_W * C
        for j in tl.static_range(RUN):
            ok = (run_col + j < OUT_W)[:, None] & col_ok[None, :]
            tl.store(y_row + y_tile + j * C, acc[((u + 1) % F_H) * RUN + j].to(y_ptr.dtype.element_ty), mask=ok)
    out = ()
    for i in tl.static_range(F_H * RUN):
        if i // RUN == (u + 1) % F_H:
            out = out + (tl.zeros((RUNS, BLOCK_N), dtype=tl.float32),)
        else:
            out = out + (acc[i],)
    return out


def launch_args(problem: ConvProblem, run: int, runs: int, block_n: int):
    """(grid, the kernel's integer arguments) of ``problem`` (forward or backward-data) for a tile."""
    geo = data_geometry(problem)
    (_, in_h, in_w), (_, out_h, out_w) = geo["in"], geo["out"]
    strips = cdiv(problem.in_channels, block_n) * cdiv(out_w, run * runs) * problem.batch
    rows = int(row_chunk(strips, out_h, geo["filter"][1]))
    grid = (strips * cdiv(out_h, rows),)
    _, pad_h, pad_w = geo["pad"]
    return grid, (problem.batch, problem.in_channels, in_h, in_w, out_h, out_w, geo["filter"][2], pad_h, pad_w, rows)


def tile_name(run: int, runs: int, block_n: int, warps: int, prefetch: bool) -> str:
    return f"unrolled_{run}x{block_n}_runs{runs}_w{warps}{'_pf' if prefetch else ''}"


def constants(problem: ConvProblem, tile) -> dict:
    run, runs, block_n, _, prefetch = tile
    return {"RUN": run, "RUNS": runs, "BLOCK_N": block_n, "F_H": problem.filter_size[-2],
            "FLIP": problem.direction is Direction.BACKWARD_DATA, "PREFETCH": prefetch}


def compile_only() -> int:
    """Compile every tile for sm_90 on this machine: registers, spills and the main loop's instruction mix."""
    import collections
    import re
    import subprocess
    import tempfile

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tiledispatch.native.registry import _cuobjdump, _resource_usage

    ints = ("BATCH", "CHANNELS", "IN_H", "IN_W", "OUT_H", "OUT_W", "F_W", "PAD_H", "PAD_W", "ROWS")
    for height, tiles in TILES.items():
        for tile in tiles:
            problem = ConvProblem.from_key(f"fwd|bf16|{next(k for k in PROBLEMS if f'|f{height}x' in k)}")
            consts = constants(problem, tile)
            signature = {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", **{k: "i32" for k in ints},
                         **{k: "constexpr" for k in consts}}
            compiled = triton.compile(ASTSource(_dwrun_data_unrolled_kernel, signature, consts),
                                      target=GPUTarget("cuda", 90, 32), options={"num_warps": tile[3]})
            mix = collections.Counter()
            with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
                handle.write(compiled.asm["cubin"])
                handle.flush()
                registers, stack, local = _resource_usage(Path(handle.name))
                sass = subprocess.run([_cuobjdump(), "-sass", handle.name], capture_output=True, text=True).stdout
            for op in re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)", sass):
                mix[op] += 1
            print(f"{tile_name(*tile)} f{height}: {registers} registers, {stack} stack, {local} local; FFMA "
                  f"{mix['FFMA']} of {sum(mix.values())} ({', '.join(f'{k} {v}' for k, v in mix.most_common(8))})",
                  flush=True)
    return 0


def _warm(job) -> str:
    """Compile one (problem, tile) into Triton's cache (a worker process; ``warmup``: nothing launched)."""
    import torch

    key, tile = job
    problem = ConvProblem.from_key(key)
    grid, args = launch_args(problem, *tile[:3])
    try:
        _dwrun_data_unrolled_kernel.warmup(torch.bfloat16, torch.bfloat16, torch.bfloat16, *args, grid=grid,
                                           num_warps=tile[3], **constants(problem, tile))
        return ""
    except Exception as exc:  # reported; the timing records it again
        return f"{tile_name(*tile)} on {key}: {type(exc).__name__}: {str(exc)[:200]}"


def run_probe(out: Path, workers: int) -> int:
    import multiprocessing

    from probe_rows import default_kernels, probe_kernels_and_cudnn

    from tiledispatch.native.configs import Family

    problems = [ConvProblem.from_key(f"{d.value}|{DType.BF16.value}|{key}") for key in PROBLEMS for d in DIRECTIONS]
    jobs = [(p.key, tile) for p in problems for tile in TILES[p.filter_size[-2]]]
    started = time.time()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        failures = [message for message in pool.imap_unordered(_warm, jobs) if message]
    print(f"compiled {len(jobs)} unrolled (problem, tile) pairs in {time.time() - started:.0f}s; "
          f"{len(failures)} failed", *failures, sep="\n", flush=True)

    def unrolled(problem, setup, rows):
        for tile in TILES[problem.filter_size[-2]]:
            grid, args = launch_args(problem, *tile[:3])
            consts = constants(problem, tile)

            def call(i, grid=grid, args=args, consts=consts, warps=tile[3]):
                _dwrun_data_unrolled_kernel[grid](setup.first[i], setup.second[i], setup.out[i], *args,
                                                  num_warps=warps, **consts)
                return setup.out[i]

            rows.record(problem, setup, tile_name(*tile), call, registers=0, stack_bytes=0)

    # cuDNN and default's dwrun kernels of the problem (compiled by the registry's build), then the unrolled tiles.
    plan = {p.key: ([], default_kernels(p, Family.DWRUN)) for p in problems}
    return probe_kernels_and_cudnn(problems, plan, Path("/tmp/dwrun_unroll_registry"), workers, out, "dwrun_unroll",
                                   extra=unrolled)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--compile-only", action="store_true")
    args = parser.parse_args(argv)
    if args.compile_only:
        return compile_only()
    if args.out is None:
        parser.error("--out: required unless --compile-only")
    started = time.time()
    code = run_probe(args.out, args.workers)
    print(f"dwrun_unroll probe done in {time.time() - started:.0f}s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
