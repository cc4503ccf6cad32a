"""Probe: grouped 3×3 stride-1 backward-weight from shared-memory rows (Gluon, wgmma), beside the registry's best
kernel of the dev suite and cuDNN, in one run on one GPU.

Why: backward-weight is the direction furthest from the 1.5× target (session 29's dev suite: 1.13); on the
grouped 3×3 stride-1 layers the registry's tensor-core kernels (``gwalk``, ``gmerge``, ``igemm``) run at 0.12–0.25
of the roofline and re-read X for every filter tap, as the forward kernels did before ``halo``.

GEMM mapping (stride 1, dilation 1): a program owns one filter row ``ky`` (grid axis 2), one block of ``MERGE``
groups (axis 1: ``MERGE·K/G`` output channels ≤ 64 as wgmma M, ``MERGE·C/G`` input channels ≤ 64 as N) and one
split (axis 0) of the reduction units (``BLOCK_M / WP`` images × a chunk of ``ROWS`` output rows × a block of ``WP``
output columns). For each output row ``oh`` of its units it copies (``cp.async``, zeros outside the tensors) the
dY row ``[BLOCK_M pixels, MERGE·K/G]`` and, once per column shift ``kx``, the X row ``oh + ky − pad_h`` shifted by
``kx − pad_w`` ``[BLOCK_M pixels, MERGE·C/G]`` into ``STAGES``-deep rings, and accumulates three wgmma with both
operands in shared memory::

    acc[kx][k, c] += Σ_pixels dY[pixel, k0 + k] · X_kx[pixel, c0 + c]        (A = dY tileᵀ, MN-major)

Only the block-diagonal parts (``k // (K/G) == c // (C/G)``) are dW; each split writes them in fp32 to its slice of a
workspace ``[SPLITS, G, K/G, 3, 3, C/G]``, and the probe sums the slices (deterministic, ``torch.sum``) into dW.
Three accumulators of 64×64 fp32 on one warpgroup: 96 registers a thread.

Measured (H200, session 30, ``bench/results/2026-11-28_h200_s30/probe_halo_weight_call2``): not built into a family.
1.10× the registry's best on the one layer whose groups fill the tile (g8 C/G 56: 73.5 vs 80.5 µs), 0.72–0.77× on
the ResNeXt layers (C/G 4–32: up to 15/16 of each merged 64×64 wgmma is off the block diagonal), 0.25× at batch 1.

Usage (GPU machine): ``python bench/gpu/halo_weight_probe.py --out DIR``; on a machine without a GPU,
``--compile-only`` compiles every probed variant for sm_90 and prints its resources, and ``--emulate`` replays the
walk in NumPy (float64) against the reference on small problems (the index arithmetic, not the kernel).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

sys.path.insert(0, str(Path(__file__).resolve().parent))

_INTS = ("BATCH", "H", "W", "C_TOTAL", "K_TOTAL", "OH", "OW", "PAD_H", "PAD_W", "CG", "KG", "WP", "ROW_CHUNKS",
         "COL_BLOCKS", "UNITS", "UNITS_PER_SPLIT")


@gluon.jit
def _issue_step(dy_ring, x_ring, x_ptr, dy_ptr, t, steps, u_begin, slot, m_x, chans_x, m_y, chans_y, ky,
                BATCH, H, W, C_TOTAL, K_TOTAL, OH, OW, PAD_H, PAD_W, WP, ROW_CHUNKS, COL_BLOCKS, c0, k0,
                BLOCK_CG, BLOCK_KG, BLOCK_M: gl.constexpr, ROWS: gl.constexpr):
    """cp.async step ``t``'s dY row and its three shifted X rows into ring slot ``slot`` (zeros where a pixel, row,
    column or channel is outside its tensor, or ``t`` is past the split's steps)."""
    unit = u_begin + t // ROWS
    col_block = unit % COL_BLOCKS
    rest = unit // COL_BLOCKS
    oh = (rest % ROW_CHUNKS) * ROWS + t % ROWS
    image0 = (rest // ROW_CHUNKS) * (BLOCK_M // WP)
    step_ok = (t < steps) & (oh < OH)
    # dY rows: stream m // WP, output column col_block·WP + m % WP
    image_y = image0 + m_y // WP
    ow_y = col_block * WP + m_y % WP
    ok_y = (image_y < BATCH) & (ow_y < OW) & step_ok
    dy_off = ((image_y.to(gl.int64) * OH + oh) * OW + ow_y) * K_TOTAL
    async_copy.async_copy_global_to_shared(dy_ring.index(slot), dy_ptr + (dy_off[:, None] + (k0 + chans_y)[None, :]),
                                           ok_y[:, None] & (chans_y < BLOCK_KG)[None, :])
    image_x = image0 + m_x // WP
    ih = oh + ky - PAD_H
    row_ok = (image_x < BATCH) & (ih >= 0) & (ih < H) & step_ok
    row_off = (image_x.to(gl.int64) * H + ih) * W
    for kx in gl.static_range(3):
        iw = col_block * WP + m_x % WP + kx - PAD_W
        ok_x = row_ok & (iw >= 0) & (iw < W)
        async_copy.async_copy_global_to_shared(x_ring.index(slot * 3 + kx),
                                               x_ptr + (((row_off + iw) * C_TOTAL)[:, None] + (c0 + chans_x)[None, :]),
                                               ok_x[:, None] & (chans_x < BLOCK_CG)[None, :])


@gluon.jit
def _store_tap(ws_ptr, acc, split, ky, kx: gl.constexpr, GROUPS, CG, KG, gblock, MERGE: gl.constexpr,
               BLOCK_KK: gl.constexpr, BLOCK_C: gl.constexpr, out_layout: gl.constexpr):
    """The block-diagonal part of one tap's accumulator into the split's workspace slice (fp32, GKYXC)."""
    vals = gl.convert_layout(acc, out_layout)
    rows = gl.arange(0, BLOCK_KK, layout=gl.SliceLayout(1, out_layout))
    cols = gl.arange(0, BLOCK_C, layout=gl.SliceLayout(0, out_layout))
    ok = (((rows // KG)[:, None] == (cols // CG)[None, :]) & (rows < MERGE * KG)[:, None]
          & (cols < MERGE * CG)[None, :])
    per_split = GROUPS * KG * 9 * CG
    offs = ((gblock * MERGE * KG + rows).to(gl.int64)[:, None] * 9 + ky * 3 + kx) * CG + (cols % CG)[None, :]
    gl.store(ws_ptr + (split.to(gl.int64) * per_split + offs), vals, mask=ok)


@gluon.jit
def _halo_weight_kernel(
    x_ptr, dy_ptr, ws_ptr,
    BATCH, H, W, C_TOTAL, K_TOTAL, OH, OW, PAD_H, PAD_W, CG, KG, WP, ROW_CHUNKS, COL_BLOCKS, UNITS, UNITS_PER_SPLIT,
    BLOCK_M: gl.constexpr, BLOCK_KK: gl.constexpr, BLOCK_C: gl.constexpr, MERGE: gl.constexpr, ROWS: gl.constexpr,
    STAGES: gl.constexpr, num_warps: gl.constexpr,
):
    """X [BATCH, H, W, C_TOTAL], dY [BATCH, OH, OW, K_TOTAL] → workspace [splits, G, K/G, 3, 3, C/G] (fp32)."""
    C_TOTAL = (C_TOTAL // 8) * 8
    K_TOTAL = (K_TOTAL // 8) * 8
    BLOCK_CG = (MERGE * CG // 8) * 8
    BLOCK_KG = (MERGE * KG // 8) * 8
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    split = gl.program_id(0)
    gblock = gl.program_id(1)
    ky = gl.program_id(2)
    groups = gl.num_programs(1) * MERGE
    c0 = gblock * BLOCK_CG
    k0 = gblock * BLOCK_KG
    u_begin = split * UNITS_PER_SPLIT
    steps = gl.maximum(gl.minimum(UNITS - u_begin, UNITS_PER_SPLIT), 0) * ROWS

    x_load: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (BLOCK_C // 8), BLOCK_C // 8], [num_warps, 1], [1, 0])
    y_load: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (BLOCK_KK // 8), BLOCK_KK // 8], [num_warps, 1], [1, 0])
    m_x = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, x_load))
    chans_x = gl.arange(0, BLOCK_C, layout=gl.SliceLayout(0, x_load))
    m_y = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, y_load))
    chans_y = gl.arange(0, BLOCK_KK, layout=gl.SliceLayout(0, y_load))

    y_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_KK], dtype)
    x_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_C], dtype)
    dy_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_KK], y_smem)
    x_ring = gl.allocate_shared_memory(dtype, [STAGES * 3, BLOCK_M, BLOCK_C], x_smem)

    for s in gl.static_range(STAGES - 1):
        _issue_step(dy_ring, x_ring, x_ptr, dy_ptr, s, steps, u_begin, s, m_x, chans_x, m_y, chans_y, ky,
                    BATCH, H, W, C_TOTAL, K_TOTAL, OH, OW, PAD_H, PAD_W, WP, ROW_CHUNKS, COL_BLOCKS, c0, k0,
                    BLOCK_CG, BLOCK_KG, BLOCK_M, ROWS)
        async_copy.commit_group()

    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                          instr_shape=[16, BLOCK_C, 16])
    acc0 = gl.zeros([BLOCK_KK, BLOCK_C], gl.float32, layout=mma_layout)
    acc1 = gl.zeros([BLOCK_KK, BLOCK_C], gl.float32, layout=mma_layout)
    acc2 = gl.zeros([BLOCK_KK, BLOCK_C], gl.float32, layout=mma_layout)
    for t in range(steps):
        # The slot of step t + STAGES - 1 held step t - 1, whose wgmma finished last iteration.
        _issue_step(dy_ring, x_ring, x_ptr, dy_ptr, t + STAGES - 1, steps, u_begin, (t + STAGES - 1) % STAGES,
                    m_x, chans_x, m_y, chans_y, ky, BATCH, H, W, C_TOTAL, K_TOTAL, OH, OW, PAD_H, PAD_W, WP,
                    ROW_CHUNKS, COL_BLOCKS, c0, k0, BLOCK_CG, BLOCK_KG, BLOCK_M, ROWS)
        async_copy.commit_group()
        async_copy.wait_group(STAGES - 1)
        gl.thread_barrier()
        fence_async_shared()
        slot = t % STAGES
        a = dy_ring.index(slot).permute((1, 0))
        acc0 = warpgroup_mma(a, x_ring.index(slot * 3 + 0), acc0, is_async=True)
        acc1 = warpgroup_mma(a, x_ring.index(slot * 3 + 1), acc1, is_async=True)
        acc2 = warpgroup_mma(a, x_ring.index(slot * 3 + 2), acc2, is_async=True)
        acc0, acc1, acc2 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1, acc2))
    async_copy.wait_group(0)

    out_layout: gl.constexpr = gl.BlockedLayout([1, 4], [32 // (BLOCK_C // 4), BLOCK_C // 4], [num_warps, 1], [1, 0])
    _store_tap(ws_ptr, acc0, split, ky, 0, groups, CG, KG, gblock, MERGE, BLOCK_KK, BLOCK_C, out_layout)
    _store_tap(ws_ptr, acc1, split, ky, 1, groups, CG, KG, gblock, MERGE, BLOCK_KK, BLOCK_C, out_layout)
    _store_tap(ws_ptr, acc2, split, ky, 2, groups, CG, KG, gblock, MERGE, BLOCK_KK, BLOCK_C, out_layout)


@dataclass(frozen=True)
class WeightTile:
    """One variant: ``BLOCK_M`` pixels a step (``BLOCK_M / WP`` streams), ``ROWS`` output rows a unit, ``STAGES``-deep
    rings, ``splits`` reduction splits; ``max_registers``: ptxas's budget (``maxnreg``), None: its own choice."""

    block_m: int
    rows: int
    stages: int
    splits: int
    max_registers: int | None = None

    def name(self) -> str:
        budget = f"_reg{self.max_registers}" if self.max_registers else ""
        return f"halo_wgrad_m{self.block_m}_r{self.rows}_st{self.stages}_sk{self.splits}{budget}"


def _pow2_at_least(value: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(value, 1))))


def _merge(problem) -> int:
    """Groups a program merges: as many as fill 64 channels, halved until they divide the groups."""
    merge = max(1, 64 // max(problem.c_per_group, problem.k_per_group))
    while problem.groups % merge:
        merge //= 2
    return merge


def geometry(problem, tile: WeightTile) -> dict:
    """The launch's sizes (the same for the kernel and :func:`emulate`)."""
    out_h, out_w = problem.output_size[-2:]
    cg, kg = problem.c_per_group, problem.k_per_group
    merge = _merge(problem)
    wp = min(_pow2_at_least(out_w), tile.block_m)
    row_chunks = -(-out_h // tile.rows)
    col_blocks = -(-out_w // wp)
    units = -(-problem.batch // (tile.block_m // wp)) * row_chunks * col_blocks
    per_split = -(-units // tile.splits)
    return dict(BATCH=problem.batch, H=problem.input_size[-2], W=problem.input_size[-1], C_TOTAL=problem.in_channels,
                K_TOTAL=problem.out_channels, OH=out_h, OW=out_w, PAD_H=problem.pad_begin[-2],
                PAD_W=problem.pad_begin[-1], CG=cg, KG=kg, WP=wp, ROW_CHUNKS=row_chunks, COL_BLOCKS=col_blocks,
                UNITS=units, UNITS_PER_SPLIT=per_split, MERGE=merge, splits=-(-units // per_split),
                grid=(-(-units // per_split), problem.groups // merge, 3))


def supported(problem) -> bool:
    cg, kg = problem.c_per_group, problem.k_per_group
    merge = _merge(problem)
    return (problem.ndim == 2 and tuple(problem.filter_size) == (3, 3) and tuple(problem.stride) == (1, 1)
            and tuple(problem.dilation) == (1, 1) and max(cg, kg) <= 64 and problem.groups % merge == 0
            and (merge * cg) % 8 == 0 and (merge * kg) % 8 == 0 and problem.in_channels % 8 == 0
            and problem.out_channels % 8 == 0)


def emulate(problem, tile: WeightTile, x, dy):
    """The kernel's walk in NumPy (float64): the same splits, units, streams, shifted rows and block-diagonal
    stores; returns dW (the workspace summed over splits)."""
    import numpy as np

    g = geometry(problem, tile)
    groups, cg, kg, merge, wp = problem.groups, g["CG"], g["KG"], g["MERGE"], g["WP"]
    ws = np.full((g["splits"], groups, kg, 3, 3, cg), np.nan)
    m = np.arange(tile.block_m)
    for split in range(g["splits"]):
        u_begin = split * g["UNITS_PER_SPLIT"]
        steps = max(min(g["UNITS"] - u_begin, g["UNITS_PER_SPLIT"]), 0) * tile.rows
        for gblock in range(groups // merge):
            c0, k0 = gblock * merge * cg, gblock * merge * kg
            for ky in range(3):
                acc = np.zeros((3, 64, 64))
                for t in range(steps):
                    unit = u_begin + t // tile.rows
                    col_block, rest = unit % g["COL_BLOCKS"], unit // g["COL_BLOCKS"]
                    oh = (rest % g["ROW_CHUNKS"]) * tile.rows + t % tile.rows
                    image = (rest // g["ROW_CHUNKS"]) * (tile.block_m // wp) + m // wp
                    ow = col_block * wp + m % wp
                    ih = oh + ky - g["PAD_H"]
                    if oh >= g["OH"] or not 0 <= ih < g["H"]:  # (the kernel's copies are masked off: zeros)
                        continue
                    dy_tile = np.zeros((tile.block_m, 64))
                    ok = (image < g["BATCH"]) & (ow < g["OW"])
                    dy_tile[ok, :merge * kg] = dy[image[ok], oh, ow[ok], k0:k0 + merge * kg]
                    for kx in range(3):
                        iw = ow + kx - g["PAD_W"]
                        okx = (image < g["BATCH"]) & (iw >= 0) & (iw < g["W"])
                        x_tile = np.zeros((tile.block_m, 64))
                        x_tile[okx, :merge * cg] = x[image[okx], ih, iw[okx], c0:c0 + merge * cg]
                        acc[kx] += dy_tile.T @ x_tile
                for kx in range(3):
                    for j in range(merge):
                        ws[split, gblock * merge + j, :, ky, kx, :] = acc[kx][j * kg:(j + 1) * kg, j * cg:(j + 1) * cg]
    return ws.sum(axis=0)


def _tiles_for(problem) -> list[WeightTile]:
    """64- and 128-pixel steps, walks of the image's height or a divisor near it, 2- and 3-deep rings, the splits
    that give about 2 and 4 waves of 3-program-an-SM occupancy; the 64-pixel 2-stage tiles also under a register
    budget."""
    out_h, out_w = problem.output_size[-2:]
    rows_options = sorted({r for r in (7, 14, 28, 56) if r <= out_h and out_h % r == 0} or {min(out_h, 32)})
    tiles = []
    for block_m in (64, 128):
        if _pow2_at_least(out_w) > block_m:
            continue
        for rows in rows_options[-2:]:
            for stages in (2, 3):
                probe = WeightTile(block_m, rows, stages, 1)
                g = geometry(problem, probe)
                per_split_programs = g["grid"][1] * 3
                for waves in (2, 4):
                    splits = max(1, min(g["UNITS"], round(waves * 132 * 3 / per_split_programs)))
                    tiles.append(WeightTile(block_m, rows, stages, splits))
                    if block_m == 64 and stages == 2:
                        # 64 KB of shared memory fits three programs an SM, ptxas's ~206 registers two: the
                        # budget that lets the third in (65,536 / (3 x 128) = 170)
                        tiles.append(WeightTile(block_m, rows, stages, splits, 168))
    return sorted(set(tiles), key=lambda t: t.name())


#: The dev suite's grouped 3x3 stride-1 backward-weight layers and the registry's best kernel on each (session 29,
#: call 3).
PROBLEMS = (
    ("2d|n32|g32|c128|k128|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gwalk_16x16x64_w4_s1_gm4_sk64_mg4_v8_i32"),
    ("2d|n32|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gwalk_16x16x64_w4_s1_gm4_sk32_mg2_v8_i32"),
    ("2d|n32|g32|c512|k512|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gwalk_16x16x64_w4_s1_gm4_sk16_mg1_v8_i32"),
    ("2d|n32|g32|c1024|k1024|in7x7|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gwalk_32x32x64_w4_s1_gm4_sk8_mg1_v8_i32"),
    ("2d|n32|g8|c448|k448|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1", "igemm_64x64x32_w4_s4_gm8_sk16_mg1_v8_i32"),
    ("2d|n1|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gmerge_64x32x64_w4_s4_gm8_sk1_mg8_v8_i32"),
)


def _problem(key: str):
    from tiledispatch.native.problem import ConvProblem

    return ConvProblem.from_key(f"bwd_weight|bf16|{key}")


def compile_only() -> int:
    """Compile every probed variant for sm_90 without a GPU; print shared memory, registers and spills."""
    from gluon_probe import compile_for_sm90

    pointers = {"x_ptr": "*bf16", "dy_ptr": "*bf16", "ws_ptr": "*fp32"}
    seen, failures = set(), 0
    for key, _ in PROBLEMS:
        problem = _problem(key)
        for tile in _tiles_for(problem):
            constants = dict(BLOCK_M=tile.block_m, BLOCK_KK=64, BLOCK_C=64, MERGE=geometry(problem, tile)["MERGE"],
                             ROWS=tile.rows, STAGES=tile.stages, num_warps=4)
            ident = (tuple(sorted(constants.items())), tile.max_registers)
            if ident in seen:
                continue
            seen.add(ident)
            try:
                got = compile_for_sm90(_halo_weight_kernel, pointers, _INTS, constants, ("x_ptr", "dy_ptr", "ws_ptr"),
                                       max_registers=tile.max_registers)
                print(f"{tile.name():36s} mg{constants['MERGE']}: smem {got['shared']} B, regs {got['registers']}, "
                      f"stack {got['stack']}, local {got['local']}, {got['seconds']:.1f}s", flush=True)
            except Exception as exc:  # report and go on: the probe shows which variants build
                failures += 1
                print(f"{tile.name():36s}: FAILED {type(exc).__name__}: {str(exc)[:3000]}", flush=True)
    return 1 if failures else 0


def emulate_check() -> int:
    """:func:`emulate` against the float64 reference on small problems (odd batch, partial streams and row chunks,
    merged groups, C/G ≠ K/G, asymmetric pads)."""
    import numpy as np

    from tiledispatch.native import reference
    from tiledispatch.native.problem import ConvProblem

    rng = np.random.default_rng(29)
    cases = [(3, 8, 8, 8, (9, 11), (1, 1), (1, 1), WeightTile(64, 4, 2, 5)),
             (2, 4, 16, 8, (7, 5), (0, 2), (2, 0), WeightTile(64, 7, 3, 2)),
             (1, 2, 32, 32, (6, 13), (1, 1), (1, 1), WeightTile(128, 4, 2, 3))]
    worst = 0.0
    for batch, groups, cg, kg, size, pad_begin, pad_end, tile in cases:
        problem = ConvProblem("bwd_weight", "bf16", batch, groups, groups * cg, groups * kg, size, (3, 3), (1, 1),
                              (1, 1), pad_begin, pad_end)
        assert supported(problem), problem.key
        x = rng.standard_normal((batch, *size, groups * cg))
        dy = rng.standard_normal((batch, *problem.output_size, groups * kg))
        got = emulate(problem, tile, x, dy)
        expected = reference.backward_weight(problem, x.reshape(problem.input_shape),
                                             dy.reshape(problem.output_shape)).reshape(got.shape)
        error = reference.relative_error(got, expected)
        worst = max(worst, error)
        print(f"{problem.key} {tile.name()}: max error {error:.2e}", flush=True)
    return 0 if worst < 1e-12 else 1


def halo_weight_section(probe) -> None:
    import torch
    from gluon_probe import baselines

    from tiledispatch.native.configs import parse_kernel_name

    probe.compile(sorted({parse_kernel_name(f"gconv_bwd_weight_bf16_2d_{best}") for _, best in PROBLEMS},
                         key=lambda c: c.name))
    for key, best in PROBLEMS:
        problem = _problem(key)
        setup = baselines(probe, "halo_weight", problem, f"gconv_bwd_weight_bf16_2d_{best}")
        for tile in _tiles_for(problem):
            g = geometry(problem, tile)
            ints = {name: g[name] for name in _INTS}
            workspace = torch.empty((g["splits"], *setup.out[0].shape), device="cuda", dtype=torch.float32)

            def call(i, g=g, ints=ints, tile=tile, setup=setup, workspace=workspace):
                _halo_weight_kernel[g["grid"]](setup.first[i], setup.second[i], workspace, **ints,
                                               BLOCK_M=tile.block_m, BLOCK_KK=64, BLOCK_C=64, MERGE=g["MERGE"],
                                               ROWS=tile.rows, STAGES=tile.stages, num_warps=4,
                                               **({"maxnreg": tile.max_registers} if tile.max_registers else {}))
                setup.out[i].copy_(workspace.sum(0))
                return setup.out[i]
            probe.measure("halo_weight", problem, setup, tile.name(), call)
            del workspace
        del setup
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    from gluon_probe import probe_main

    return probe_main(__doc__, "halo_weight", halo_weight_section, compile_only, emulate_check, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
