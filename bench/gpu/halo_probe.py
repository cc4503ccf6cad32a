"""Probe: grouped forward convolution from a shared-memory halo tile (Gluon, wgmma), beside the registry's best
kernel of the dev suite and cuDNN, in one run on one GPU.

Why: the registry's grouped kernels for C/G 4-64 (``gmerge``, ``igemm``, ``gwalk``) re-load the A operand from
global memory for every filter tap, with a bounds check and mask per row and tap; session 16's SASS counted 173
instructions per reduction step for 4 HGMMA on the G = 32 c256 28x28 layer, and no unit was saturated. Here each
program loads its input halo once (masked: padding becomes zeros) into shared memory, and every tap's A operand is
the same buffer read at a constant row offset, so the tap loop has no address or mask work at all.

GEMM mapping (stride 1): a program owns ``R = BLOCK_M / WP`` output rows of one image, ``OC = WP - (F_W-1)*DIL``
output columns, and ``GM`` merged groups. The halo (``R + (F_H-1)*DIL`` input rows x ``WP`` columns x
``CB >= GM*C/G`` channels) is stored row-major and flattened, so output position ``m = r*WP + c`` and tap
``(ky, kx)`` read halo row ``m + ky*DIL*WP + kx*DIL``: ``A_tap = halo[off_tap : off_tap + BLOCK_M, :]``.
``Y[m, :NB] = sum_tap A_tap @ B_tap`` with ``B_tap[ci, co] = W[g0 + co // K/G, co % K/G, tap, ci % C/G]`` where
``ci // C/G == co // K/G`` (block diagonal over the merged groups; zero padding up to ``CB x NB``). Positions with
``c >= OC`` read past their row and are discarded at the store. The halo rows are padded by 16 bytes in shared
memory (``PaddedSharedLayout``) so the ldmatrix reads of a slice at any row offset are conflict-free.

Timing and check as ``variant_probe.py`` (rotated inputs over 2x L2, CUDA-graph replay, median of 5; float64
reference, NaN-poisoned output). Usage (GPU machine): ``python bench/gpu/halo_probe.py --out DIR``; on a machine
without a GPU, ``--compile-only`` compiles every probed config for sm_90 and prints its resources.
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

_INTS = ("BATCH", "H", "W", "C_TOTAL", "K_TOTAL", "OH", "OW", "PAD_H", "PAD_W", "ROW_CHUNKS", "COL_BLOCKS")
# Channel totals stay specialised: the 16-byte cp.async and stores need them divisible by 8 (16 here).
_VARYING = tuple(name for name in _INTS if name not in ("C_TOTAL", "K_TOTAL"))


@gluon.jit
def _issue_row(bufs, x_ptr, pixel_base, image_ok, iw, chan_ok, q, ih0, H, W, C_TOTAL, ROW_LIMIT,
               F_W: gl.constexpr, DIL: gl.constexpr, RING: gl.constexpr):
    """cp.async input row ``ih0 + q`` of every stream, once per column shift ``kx``, into ring slot ``q % RING``
    (zeros where the row, column or channel is outside the tensor, or the row is past the chunk's halo)."""
    ih = ih0 + q
    row_ok = (ih >= 0) & (ih < H) & (q < ROW_LIMIT)
    row_offset = ih.to(gl.int64) * W * C_TOTAL
    for kx in gl.static_range(F_W):
        col_ok = image_ok & (iw + kx * DIL >= 0) & (iw + kx * DIL < W)
        async_copy.async_copy_global_to_shared(bufs.index(kx * RING + q % RING),
                                               x_ptr + (pixel_base + kx * DIL * C_TOTAL + row_offset),
                                               col_ok[:, None] & chan_ok & row_ok)


@gluon.jit(do_not_specialize=_VARYING)
def _halo_fwd_kernel(
    x_ptr, w_ptr, y_ptr,
    BATCH, H, W, C_TOTAL, K_TOTAL, OH, OW, PAD_H, PAD_W, ROW_CHUNKS, COL_BLOCKS,
    CG: gl.constexpr, KG: gl.constexpr, GM: gl.constexpr, CB: gl.constexpr, NB: gl.constexpr,
    WP: gl.constexpr, BLOCK_M: gl.constexpr, ROWS: gl.constexpr, F_H: gl.constexpr, F_W: gl.constexpr,
    DIL: gl.constexpr, RING: gl.constexpr, PIPELINE_STORE: gl.constexpr, SPLIT_ACC: gl.constexpr,
    BACKWARD_DATA: gl.constexpr, num_warps: gl.constexpr,
):
    """``Y[n, oh, ow, g*KG + k] = sum_{ky,kx,c} X[n, oh + ky*DIL - PAD_H, ow + kx*DIL - PAD_W, g*CG + c] *
    W[g*KG + k, ky, kx, c]`` for ``GM`` merged groups, ``BLOCK_M / WP`` images (streams) and one chunk of
    ``ROWS`` output rows by ``WP - (F_W-1)*DIL`` columns (module docstring: GEMM mapping). BACKWARD_DATA (stride 1):
    the same walk over dY (``CG`` = K/G, ``KG`` = C/G, ``PAD`` = ``(F-1)*DIL - pad_begin``) with tap ``t`` reading the
    forward's tap ``taps-1-t`` transposed: ``dX[n, ih, iw, g*KG + c] = sum dY[n, ih + ky*DIL - PAD, ...] *
    W[g*CG + k, F_H-1-ky, F_W-1-kx, c]``."""
    STREAMS: gl.constexpr = BLOCK_M // WP
    OC: gl.constexpr = WP - (F_W - 1) * DIL
    TAPS: gl.constexpr = F_H * F_W
    HALO: gl.constexpr = (F_H - 1) * DIL
    dtype: gl.constexpr = x_ptr.dtype.element_ty

    pid = gl.program_id(0)
    col_block = pid % COL_BLOCKS
    rest = pid // COL_BLOCKS
    row_chunk = rest % ROW_CHUNKS
    image0 = (rest // ROW_CHUNKS) * STREAMS
    oh0 = row_chunk * ROWS
    ow0 = col_block * OC
    c0 = gl.program_id(1) * (GM * CG)
    k0 = gl.program_id(1) * (GM * KG)

    # Row m of every A tile is stream m // WP (image image0 + m // WP), column m % WP.
    load_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (CB // 8), CB // 8], [num_warps, 1], [1, 0])
    m_in = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, load_layout))
    chans = gl.arange(0, CB, layout=gl.SliceLayout(0, load_layout))
    image_in = image0 + m_in // WP
    iw = ow0 - PAD_W + m_in % WP
    pixel_base = ((image_in.to(gl.int64) * H * W + iw) * C_TOTAL)[:, None] + (c0 + chans)[None, :]
    chan_ok = (chans < GM * CG)[None, :]
    image_ok = image_in < BATCH
    ih0 = oh0 - PAD_H
    row_limit = ROWS + HALO

    # Input rows: F_W column-shifted copies x RING slots, each a [BLOCK_M, CB] wgmma A operand.
    a_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, CB], dtype)
    bufs = gl.allocate_shared_memory(dtype, [F_W * RING, BLOCK_M, CB], a_layout)
    for q in gl.static_range(HALO + 1):
        _issue_row(bufs, x_ptr, pixel_base, image_ok, iw, chan_ok, q, ih0, H, W, C_TOTAL, row_limit, F_W, DIL, RING)
    async_copy.commit_group()

    # B for every tap, block diagonal over the merged groups (zero padded to CB x NB).
    b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([CB, NB], dtype)
    b_smem = gl.allocate_shared_memory(dtype, [TAPS, CB, NB], b_layout)
    w_layout: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [num_warps, 1], [1, 0])
    ci = gl.arange(0, CB, layout=gl.SliceLayout(1, w_layout))
    co = gl.arange(0, NB, layout=gl.SliceLayout(0, w_layout))
    w_ok = ((ci[:, None] // CG) == (co[None, :] // KG)) & (ci[:, None] < GM * CG) & (co[None, :] < GM * KG)
    if BACKWARD_DATA:
        # W is [G*CG, taps, KG] here (the reduction runs over the forward's output channels): tap t of the
        # walk reads the forward's tap taps-1-t, transposed.
        w_offsets = (c0 + ci[:, None]) * (TAPS * KG) + (co[None, :] % KG)
        for tap in gl.static_range(TAPS):
            b_smem.index(tap).store(gl.load(w_ptr + w_offsets + (TAPS - 1 - tap) * KG, mask=w_ok, other=0.0))
    else:
        w_offsets = (k0 + co[None, :]) * (TAPS * CG) + (ci[:, None] % CG)
        for tap in gl.static_range(TAPS):
            b_smem.index(tap).store(gl.load(w_ptr + w_offsets + tap * CG, mask=w_ok, other=0.0))

    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                          instr_shape=[16, NB, 16])
    out_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (NB // 8), NB // 8], [num_warps, 1], [1, 0])
    m_out = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, out_layout))
    k_out = gl.arange(0, NB, layout=gl.SliceLayout(0, out_layout))
    image_out = image0 + m_out // WP
    ow = ow0 + m_out % WP
    out_base = ((image_out.to(gl.int64) * OH * OW + ow) * K_TOTAL)[:, None] + (k0 + k_out)[None, :]
    out_ok = ((image_out < BATCH) & (m_out % WP < OC) & (ow < OW))[:, None] & (k_out < GM * KG)[None, :]

    # Row j's wgmma chain runs while row j - 1's result is stored (PIPELINE_STORE), else after its wait.
    previous = gl.zeros([BLOCK_M, NB], dtype, layout=out_layout)
    for j in range(ROWS):
        # Prefetch the row step j + 1 adds to its window; its slot held the row step j - 1 finished with.
        _issue_row(bufs, x_ptr, pixel_base, image_ok, iw, chan_ok, j + HALO + 1, ih0, H, W, C_TOTAL, row_limit,
                   F_W, DIL, RING)
        async_copy.commit_group()
        async_copy.wait_group(1)
        gl.thread_barrier()
        fence_async_shared()
        if SPLIT_ACC:
            # One accumulator per filter row: three independent wgmma chains the tensor cores overlap.
            gl.static_assert(F_H == 3, "SPLIT_ACC holds one accumulator per filter row of a 3-row filter")
            acc0 = gl.zeros([BLOCK_M, NB], gl.float32, layout=mma_layout)
            acc1 = gl.zeros([BLOCK_M, NB], gl.float32, layout=mma_layout)
            acc2 = gl.zeros([BLOCK_M, NB], gl.float32, layout=mma_layout)
            for kx in gl.static_range(F_W):
                acc0 = warpgroup_mma(bufs.index(kx * RING + j % RING), b_smem.index(kx), acc0, is_async=True)
                acc1 = warpgroup_mma(bufs.index(kx * RING + (j + DIL) % RING), b_smem.index(F_W + kx), acc1,
                                     is_async=True)
                acc2 = warpgroup_mma(bufs.index(kx * RING + (j + 2 * DIL) % RING), b_smem.index(2 * F_W + kx),
                                     acc2, is_async=True)
        else:
            acc = gl.zeros([BLOCK_M, NB], gl.float32, layout=mma_layout)
            for tap in gl.static_range(TAPS):
                a = bufs.index((tap % F_W) * RING + (j + (tap // F_W) * DIL) % RING)
                acc = warpgroup_mma(a, b_smem.index(tap), acc, is_async=True)
        if PIPELINE_STORE:
            oh_prev = oh0 + j - 1
            gl.store(y_ptr + (out_base + oh_prev.to(gl.int64) * OW * K_TOTAL), previous,
                     mask=out_ok & (oh_prev < OH) & (j > 0))
        if SPLIT_ACC:
            acc0, acc1, acc2 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1, acc2))
            acc = acc0 + acc1 + acc2
        else:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        previous = gl.convert_layout(acc.to(dtype), out_layout)
        if not PIPELINE_STORE:
            oh = oh0 + j
            gl.store(y_ptr + (out_base + oh.to(gl.int64) * OW * K_TOTAL), previous, mask=out_ok & (oh < OH))
    if PIPELINE_STORE:
        oh_last = oh0 + ROWS - 1
        gl.store(y_ptr + (out_base + oh_last.to(gl.int64) * OW * K_TOTAL), previous, mask=out_ok & (oh_last < OH))
    async_copy.wait_group(0)


@dataclass(frozen=True)
class HaloTile:
    """One compiled variant: ``GM`` merged groups padded to a ``CB x NB`` block, ``WP``-wide input rows,
    ``BLOCK_M / WP`` images per program, ``ROWS`` output rows per program."""

    merged_groups: int
    padded_width: int
    block_m: int
    rows: int
    pipeline_store: bool = False
    split_acc: bool = False
    num_warps: int = 4

    def name(self) -> str:
        return (f"halo_mg{self.merged_groups}_wp{self.padded_width}_m{self.block_m}_r{self.rows}"
                f"{'_ps' if self.pipeline_store else ''}{'_sa' if self.split_acc else ''}_w{self.num_warps}")


def _pow2_at_least(value: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(value, 1))))


def _constants(cg: int, kg: int, fh: int, fw: int, dil: int, tile: HaloTile, backward_data: bool = False) -> dict:
    return dict(CG=cg, KG=kg, GM=tile.merged_groups, CB=max(16, _pow2_at_least(tile.merged_groups * cg)),
                NB=max(16, _pow2_at_least(tile.merged_groups * kg)), WP=tile.padded_width, BLOCK_M=tile.block_m,
                ROWS=tile.rows, F_H=fh, F_W=fw, DIL=dil, RING=_pow2_at_least((fh - 1) * dil + 2),
                PIPELINE_STORE=tile.pipeline_store, SPLIT_ACC=tile.split_acc, BACKWARD_DATA=backward_data)


def _shared_bytes(consts: dict) -> int:
    """Input ring + B taps + the epilogue's layout-conversion scratch (bf16)."""
    return 2 * (consts["F_W"] * consts["RING"] * consts["BLOCK_M"] * consts["CB"]
                + consts["F_H"] * consts["F_W"] * consts["CB"] * consts["NB"] + consts["BLOCK_M"] * consts["NB"])


def _walk_sizes(problem) -> tuple[int, int, tuple[int, int], tuple[int, int]]:
    """(reduction channels per group, result channels per group, walked input size, result size)."""
    from tiledispatch.native.problem import Direction

    if problem.direction is Direction.BACKWARD_DATA:
        return (problem.k_per_group, problem.c_per_group, tuple(problem.output_size[-2:]),
                tuple(problem.input_size[-2:]))
    return problem.c_per_group, problem.k_per_group, tuple(problem.input_size[-2:]), tuple(problem.output_size[-2:])


def _tiles_for(problem) -> list[HaloTile]:
    cg, kg, _, (out_h, out_w) = _walk_sizes(problem)
    fh, fw, dil = problem.filter_size[-2], problem.filter_size[-1], problem.dilation[-1]
    widest = _pow2_at_least(out_w + (fw - 1) * dil)
    tiles = []
    for mg in (1, 2, 4, 8):
        if problem.groups % mg or not 16 <= mg * cg <= 64 or mg * kg > 128:
            continue
        for wp in (widest, widest // 2) if widest >= 64 else (widest,):
            for block_m, warps in ((64, 4), (128, 8)):
                if wp <= (fw - 1) * dil or block_m % wp or block_m // wp > 2 * problem.batch:
                    continue
                for rows in sorted({math.ceil(out_h / 2), math.ceil(out_h / 4)}):
                    for split_acc in (False, True) if fh == 3 else (False,):
                        tile = HaloTile(mg, wp, block_m, rows, True, split_acc, warps)
                        if _shared_bytes(_constants(cg, kg, fh, fw, dil, tile)) <= 200 * 1024:
                            tiles.append(tile)
    return tiles


# direction, problem key, the registry's best kernel on session 28's dev-suite run (H200)
PROBLEMS = (
    ("fwd", "2d|n32|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gmerge_128x32x32_w4_s3_gm8_sk1_mg4_v8_i32"),
    ("fwd", "2d|n32|g32|c128|k128|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gmerge_128x32x32_w4_s3_gm8_sk1_mg8_v8_i32"),
    ("fwd", "2d|n32|g32|c512|k512|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gmerge_128x32x32_w4_s3_gm8_sk1_mg2_v8_i32"),
    ("fwd", "2d|n32|g8|c448|k448|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gwalk_64x64x64_w4_s1_gm2_sk1_mg1_v8_i32"),
    ("bwd_data", "2d|n32|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "gwalk_64x32x32_w4_s1_gm2_sk1_mg4_v8_i32"),
    ("bwd_data", "2d|n32|g32|c128|k128|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "gwalk_64x32x32_w4_s1_gm4_sk1_mg8_v8_i32"),
    ("bwd_data", "2d|n32|g32|c512|k512|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "gwalk_64x32x32_w4_s1_gm2_sk1_mg2_v8_i32"),
    ("bwd_data", "2d|n32|g8|c448|k448|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gwalk_64x64x64_w4_s1_gm2_sk1_mg1_v8_i32"),
    ("bwd_data", "2d|n1|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1", "gmerge_64x32x32_w4_s4_gm8_sk1_mg4_v8_i32"),
)


def _launch_args(problem, tile: HaloTile) -> tuple[tuple[int, int], dict]:
    """Grid and keyword arguments of ``_halo_fwd_kernel`` for ``problem`` (forward or backward-data, 2D, stride 1)."""
    from tiledispatch.native.problem import Direction

    backward = problem.direction is Direction.BACKWARD_DATA
    cg, kg, (height, width), (out_h, out_w) = _walk_sizes(problem)
    fh, fw = problem.filter_size[-2:]
    dil_h, dil_w = problem.dilation[-2:]
    pad_h, pad_w = problem.pad_begin[-2:]
    if backward:
        pad_h, pad_w = (fh - 1) * dil_h - pad_h, (fw - 1) * dil_w - pad_w
    consts = _constants(cg, kg, fh, fw, dil_w, tile, backward)
    streams = tile.block_m // tile.padded_width
    out_cols = tile.padded_width - (fw - 1) * dil_w
    row_chunks, col_blocks = math.ceil(out_h / tile.rows), math.ceil(out_w / out_cols)
    grid = (math.ceil(problem.batch / streams) * row_chunks * col_blocks, problem.groups // tile.merged_groups)
    ints = dict(BATCH=problem.batch, H=height, W=width, C_TOTAL=cg * problem.groups, K_TOTAL=kg * problem.groups,
                OH=out_h, OW=out_w, PAD_H=pad_h, PAD_W=pad_w, ROW_CHUNKS=row_chunks, COL_BLOCKS=col_blocks)
    return grid, {**ints, **consts}


def compile_only() -> int:
    """Compile every probed variant for sm_90 without a GPU; print shared memory, registers and spills."""
    from gluon_probe import compile_for_sm90

    from tiledispatch.native.problem import ConvProblem

    pointers = {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16"}
    seen = set()
    failures = 0
    for direction, key, _ in PROBLEMS:
        problem = ConvProblem.from_key(f"{direction}|bf16|{key}")
        for tile in _tiles_for(problem):
            _, args = _launch_args(problem, tile)
            constants = {name: value for name, value in args.items() if name not in _INTS}
            constants["num_warps"] = tile.num_warps
            ident = tuple(sorted(constants.items()))
            if ident in seen:
                continue
            seen.add(ident)
            try:
                got = compile_for_sm90(_halo_fwd_kernel, pointers, _INTS, constants,
                                       ("x_ptr", "w_ptr", "y_ptr", "C_TOTAL", "K_TOTAL"))
                print(f"{tile.name():34s} cg{problem.c_per_group} {constants['CB']}x{constants['NB']}: "
                      f"smem {got['shared']} B, regs {got['registers']}, stack {got['stack']}, local {got['local']}, "
                      f"{got['seconds']:.1f}s", flush=True)
            except Exception as exc:  # report and go on: the probe shows which variants build
                failures += 1
                print(f"{tile.name():34s} cg{problem.c_per_group}: FAILED {type(exc).__name__}: {str(exc)[:3000]}",
                      flush=True)
    return 1 if failures else 0


def halo_section(probe, problems) -> None:
    import torch
    from gluon_probe import baselines

    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.problem import ConvProblem

    probe.compile(sorted({parse_kernel_name(f"gconv_{direction}_bf16_2d_{best}") for direction, _, best in problems},
                         key=lambda c: c.name))
    for direction, key, best in problems:
        problem = ConvProblem.from_key(f"{direction}|bf16|{key}")
        setup = baselines(probe, "halo", problem, f"gconv_{direction}_bf16_2d_{best}")
        for tile in _tiles_for(problem):
            grid, args = _launch_args(problem, tile)

            def call(i, grid=grid, args=args, tile=tile, setup=setup):
                _halo_fwd_kernel[grid](setup.first[i], setup.second[i], setup.out[i], **args,
                                       num_warps=tile.num_warps)
                return setup.out[i]
            probe.measure("halo", problem, setup, tile.name(), call)
        del setup
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    from gluon_probe import probe_main

    return probe_main(__doc__, "halo", lambda probe: halo_section(probe, PROBLEMS), compile_only, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
