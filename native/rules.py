"""Rule sets ``tiny ⊂ default ⊂ full``, generated from rules over the arch spec.

Nothing here is a hand-kept list of kernels: ``full`` is every config that the hard rules allow
on the target (tile sides, shared memory per pipeline stage against the arch's per-block limit,
accumulator registers per thread, warps), ``default`` is ``full`` filtered by the selection rules
below, and ``tiny`` is ``default`` filtered again, so the subset relations hold by construction
(and are tested).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator
from functools import cache

from tiledispatch.native.arch import ArchSpec, get_arch
from tiledispatch.native.configs import GROUP_PADDED_FAMILIES, PADDABLE_FAMILIES, Family, KernelConfig
from tiledispatch.native.problem import Direction, DType

RULE_SETS = ("tiny", "default", "full")
#: Families with kernels in ``default`` (and so in ``tiny``); the others are in ``full`` only.
DEFAULT_FAMILIES = tuple(f for f in Family if f is not Family.TMA)


# ---- hard rules (full) ----------------------------------------------------------------------
#: Per-thread fp32 accumulator registers above which ptxas spills on sm_80+ (255 regs/thread,
#: the rest go to addresses, indices and operand fragments).
MAX_ACCUMULATOR_REGISTERS = 128
#: Shared memory kept free for the epilogue's layout conversion and Triton's barriers.
EPILOGUE_SMEM_RESERVE = 8 * 1024

_TC_BLOCK_M = (32, 64, 128, 256)
_TC_BLOCK_N = (16, 32, 64, 128, 256)
_TC_BLOCK_K = (16, 32, 64, 128)
_TC_WARPS = (4, 8)
_TC_STAGES = (1, 2, 3, 4, 5)
_GROUP_M = (1, 8)
_MERGE = (2, 4, 8, 16, 32)
_SPLIT_K = (1, 2, 4, 8, 16, 32, 64)
#: split_k of forward / backward-data tensor-core kernels (igemm, gmerge, gemm1x1) in ``full``: their
#: reduction is prod(filter)·C/G (or K/G) long, far shorter than backward-weight's N·prod(out).
_DATA_SPLIT_K = (1, 2, 4, 8, 16)
_DIRECT_BLOCK_M = (16, 32, 64, 128, 256)
_DIRECT_BLOCK_N = (8, 16, 32, 64, 128)
_DIRECT_WARPS = (1, 2, 4, 8)
#: block_k of direct kernels: 1, or the filter columns the depthwise tap-row programs unroll (4 or 8).
_DIRECT_TAPS_W = (1, 4, 8)
#: Direct kernels keep block_m*block_n/threads values live per operand; past this they spill.
MAX_DIRECT_ELEMENTS_PER_THREAD = 64
#: Output channels per group a forward depthwise-multiplier program computes (direct ``group_m``).
_DIRECT_MULTIPLIER_J = (2, 4)
_DWROLL_BLOCK_W = (8, 16, 32, 64, 128)
_DWROLL_BLOCK_N = (16, 32, 64, 128)
#: dwroll backward-weight also splits 128 ways (small layers: a 3x3 c960 7x7 dW has 8,640 elements).
DWROLL_MAX_SPLIT_K = 128
#: Output rows a forward / backward-data dwroll program may hold (group_m; 1, the rolling walk, besides).
_DWROLL_HELD_ROWS = (2, 4, 8)
#: Filter heights dwroll kernels are generated for (the depthwise filters networks use).
_DWROLL_FILTER_HEIGHTS = (3, 5, 7)
#: fp32 values a dwroll thread keeps live (accumulators, the backward-weight dY window and the
#: current input tile, each ``elements`` per thread): past these ptxas spills (sm_90, triton 3.6,
#: checked for every tile of ``full`` with F = 3, 5, 7; at the limits 217-250 registers).
MAX_DWROLL_DATA_VALUES = 128
MAX_DWROLL_WEIGHT_VALUES = 160
#: dwrun: output columns a thread owns (block_m; 7 and 14 tile the 56-, 28-, 14- and 7-wide rows exactly; the short
#: runs 2, 3 and 5 for one-warp programs, session 40), runs a program walks side by side (group_m).
_DWRUN_RUN = (2, 3, 4, 5, 7, 8, 14, 16)
_DWRUN_RUNS = (1, 2, 4, 8, 16, 32)


def _tensor_core_ok(config: KernelConfig, arch: ArchSpec) -> bool:
    if config.smem_bytes_estimate > arch.smem_per_block_bytes - EPILOGUE_SMEM_RESERVE:
        return False
    if config.accumulator_registers > MAX_ACCUMULATOR_REGISTERS:
        return False
    if config.accumulator_registers < 4:  # fewer accumulators than one mma fragment per thread
        return False
    # Eight warps are two warpgroups: below 64x64 per warpgroup they idle.
    return not (config.num_warps == 8 and config.block_m * config.block_n < 64 * 64 * 2)


def _direct_ok(config: KernelConfig) -> bool:
    per_thread = config.block_m * config.block_n // (32 * config.num_warps)
    return 1 <= per_thread <= MAX_DIRECT_ELEMENTS_PER_THREAD


#: gwalk tiles: GEMM M (images × output columns), merged channel tiles, output rows walked per program.
_GWALK_BLOCK_M = (32, 64, 128, 256)
_GWALK_BLOCK_NK = (16, 32, 64, 128)
_GWALK_ROWS = (1, 2, 4)
_GWALK_MERGE = (1, 2, 4, 8, 16)


#: gwalk backward-weight: merged channel tiles (block_m = K, block_n = C), reduction lanes, splits.
_GWALK_WEIGHT_BLOCK_MN = (16, 32, 64)
_GWALK_WEIGHT_LANES = (32, 64, 128)
_GWALK_WEIGHT_SPLIT_K = (1, 4, 8, 16, 32, 64, 128)
#: gwalk backward-weight: 1 = pointer loads; 2, 3 = TMA boxes, software-pipelined that deep.
_GWALK_WEIGHT_STAGES = (1, 2, 3)


#: halo tiles: GEMM M (images × padded columns), merged output / reduction channel tiles, output rows a program
#: walks, merged groups.
_HALO_BLOCK_M = (64, 128)
_HALO_BLOCK_N = (16, 32, 64, 128)
_HALO_BLOCK_K = (16, 32, 64)
_HALO_ROWS = (4, 7, 8, 14, 16, 28, 32)
_HALO_MERGE = (1, 2, 4, 8, 16)


def gwalk_accumulator_registers(config: KernelConfig) -> int:
    """fp32 accumulator registers a gwalk thread holds: one tile per output row walked (forward /
    backward-data); backward-weight: three stacked tiles of 4·block_m × block_n (one per filter column)."""
    if config.direction is Direction.BACKWARD_WEIGHT:
        return 3 * 4 * config.accumulator_registers
    return config.group_m * config.accumulator_registers


def _with_padded_twin(config: KernelConfig) -> Iterator[KernelConfig]:
    """``config``, and its ``pad_channels`` twin where it is a 32-bit v8 tile of a paddable family."""
    yield config
    if config.vec == 8 and not config.index64 and config.family in PADDABLE_FAMILIES:
        yield dataclasses.replace(config, pad_channels=True)


def _candidates(direction: Direction, dtype: DType, ndim: int, narrow: bool) -> Iterator[KernelConfig]:
    """Every combination of field values ``full`` may hold; with ``narrow`` only the values that the
    default rule can accept (a pure speed-up: the rules below still decide membership)."""
    bwd_weight = direction is Direction.BACKWARD_WEIGHT
    for family in Family:
        if direction not in family.directions:
            continue
        if family is Family.TMA:
            if dtype is DType.FP32:
                continue
            domains = (_TC_BLOCK_M, _TC_BLOCK_N, _TC_BLOCK_K, _TC_WARPS, _TC_STAGES, _GROUP_M)
            if narrow:
                domains = ((64, 128, 256), (64, 128, 256), (16, 32, 64), (4, 8), (3, 4), (8,))
            for bm, bn, bk, warps, stages, gm in itertools.product(*domains):
                yield KernelConfig(direction, dtype, ndim, family, bm, bn, bk, warps, stages, gm, 1, 1, 8, False)
            continue
        if family is Family.GWALK:
            if dtype not in family.dtypes or ndim not in family.ndims:
                continue
            if bwd_weight:
                domains = (_GWALK_WEIGHT_BLOCK_MN, _GWALK_WEIGHT_BLOCK_MN, _GWALK_WEIGHT_LANES, _TC_WARPS, _GWALK_ROWS,
                           _GWALK_WEIGHT_SPLIT_K, _GWALK_MERGE)
            else:
                domains = (_GWALK_BLOCK_M, _GWALK_BLOCK_NK, _GWALK_BLOCK_NK, _TC_WARPS, _GWALK_ROWS, (1,), _GWALK_MERGE)
                if narrow:
                    domains = ((64, 128), (16, 32, 64), (16, 32, 64), (4, 8), (2, 4), (1,), _GWALK_MERGE)
            for bm, bn, bk, warps, rows, sk, mg in itertools.product(*domains):
                for stages in _GWALK_WEIGHT_STAGES if bwd_weight else (1,):
                    yield KernelConfig(direction, dtype, ndim, family, bm, bn, bk, warps, stages, rows, sk, mg, 8,
                                       False)
            continue
        if family is Family.HALO:
            if dtype not in family.dtypes or ndim not in family.ndims:
                continue
            domains = (_HALO_BLOCK_M, _HALO_BLOCK_N, _HALO_BLOCK_K, _HALO_ROWS, _HALO_MERGE)
            if narrow:
                domains = ((64,), (16, 32, 64), (16, 32, 64), _HALO_ROWS, (1, 2, 4, 8))
            for bm, bn, bk, rows, mg in itertools.product(*domains):
                yield KernelConfig(direction, dtype, ndim, family, bm, bn, bk, 4, 1, rows, 1, mg, 8, False)
            continue
        if family is Family.DWROLL:
            domains = (_DWROLL_BLOCK_W, _DWROLL_BLOCK_N, _DWROLL_FILTER_HEIGHTS, _DIRECT_WARPS, (1, 2),
                       (1, *_SPLIT_K[3:], DWROLL_MAX_SPLIT_K) if bwd_weight else (1,), (False, True))
            for bw, bn, fh, warps, stages, sk, i64 in itertools.product(*domains):
                yield KernelConfig(direction, dtype, ndim, family, bw, bn, fh, warps, stages, 1, sk, 1, 8, i64)
                if stages == 1 and not bwd_weight:  # the programs holding 2..8 output rows
                    for held in _DWROLL_HELD_ROWS:
                        yield KernelConfig(direction, dtype, ndim, family, bw, bn, fh, warps, 1, held, 1, 1, 8, i64)
            continue
        if family is Family.DWROW:  # backward-weight only (Family.directions); vec 1: the scalar binary
            domains = (_DWROLL_BLOCK_W, _DWROLL_BLOCK_N, _DWROLL_FILTER_HEIGHTS, _DIRECT_WARPS, (1, 2),
                       (1, *_SPLIT_K[3:], DWROLL_MAX_SPLIT_K), (False, True), (1, 8))
            for bw, bn, fw, warps, stages, sk, i64, vec in itertools.product(*domains):
                yield from _with_padded_twin(
                    KernelConfig(direction, dtype, ndim, family, bw, bn, fw, warps, stages, 1, sk, 1, vec, i64))
            continue
        if family is Family.DWRUN:  # forward / backward-data: 2D, unsplit
            if not bwd_weight and ndim != 2:
                continue
            if narrow:  # the default rule's own tables (34,560 combinations a slice otherwise, 12-76 kept)
                yield from _dwrun_default_candidates(direction, dtype, ndim)
                continue
            # forward / backward-data: rows through shared memory too (num_stages 3, 4), four channels a thread
            domains = (_DWRUN_RUN, _DWROLL_BLOCK_N, _DWROLL_FILTER_HEIGHTS, _DIRECT_WARPS,
                       (1, 2) if bwd_weight else (1, 2, 3, 4), _DWRUN_RUNS,
                       (1, *_SPLIT_K[3:], DWROLL_MAX_SPLIT_K) if bwd_weight else (1,), (False, True),
                       (1, 2) if bwd_weight else (1, 2, 4))
            for run, bn, fh, warps, stages, runs, sk, i64, vec in itertools.product(*domains):
                yield KernelConfig(direction, dtype, ndim, family, run, bn, fh, warps, stages, runs, sk, 1, vec, i64)
            continue
        if family is Family.DIRECT:
            domains = (_DIRECT_BLOCK_M, _DIRECT_BLOCK_N, _DIRECT_TAPS_W, _DIRECT_WARPS,
                       _SPLIT_K if bwd_weight else (1,), (1, 8), (False, True))
            if narrow:
                domains = ((32, 64, 128, 256), (16, 32, 64), _DIRECT_TAPS_W, (4,),
                           (1, 8, 32, 64) if bwd_weight else (1,), (1, 8), (False, True))
            for bm, bn, bk, warps, sk, vec, i64 in itertools.product(*domains):
                yield from _with_padded_twin(
                    KernelConfig(direction, dtype, ndim, family, bm, bn, bk, warps, 1, 1, sk, 1, vec, i64))
                if direction is Direction.FORWARD and bk == 1:  # the depthwise-multiplier binary
                    for gm in _DIRECT_MULTIPLIER_J:
                        yield KernelConfig(direction, dtype, ndim, family, bm, bn, bk, warps, 1, gm, sk, 1, vec, i64)
            continue
        merges = _MERGE if family is Family.GMERGE else (1,)
        domains = (_TC_BLOCK_M, _TC_BLOCK_N, _TC_BLOCK_K, _TC_WARPS, _TC_STAGES, _GROUP_M,
                   _SPLIT_K if bwd_weight else _DATA_SPLIT_K, merges, (1, 8), (False, True))
        if narrow:
            domains = ((32, 64, 128, 256), (16, 32, 64, 128, 256), (16, 32, 64), (4, 8), (1, 2, 3, 4), (8,),
                       (1, 4, 16, *WEIGHT_EXTRA_SPLITS) if bwd_weight else (1, *SPLIT_K_DATA_SPLITS),
                       tuple(m for m in merges if m <= 16), (1, 8), (False, True))
            if family is Family.GMERGE:  # default's merged tiles: 64/128 x 32/64 x 32/64, 32-bit indices
                domains = ((64, 128), (32, 64), (32, 64), *domains[3:9], (False,))
        for bm, bn, bk, warps, stages, gm, sk, mg, vec, i64 in itertools.product(*domains):
            yield from _with_padded_twin(
                KernelConfig(direction, dtype, ndim, family, bm, bn, bk, warps, stages, gm, sk, mg, vec, i64))


def _dwrun_default_candidates(direction: Direction, dtype: DType, ndim: int) -> Iterator[KernelConfig]:
    """The dwrun configs :func:`_default_rule` can accept, from its tables: forward / backward-data the
    :data:`DWRUN_DATA_TILES`; backward-weight the :func:`dwrun_default_tiles` at :data:`DWRUN_SPLITS` and the
    unsplit 3×3 path (both stage counts: the rule keeps the dtype's)."""
    family = Family.DWRUN
    if direction is not Direction.BACKWARD_WEIGHT:
        for height, tiles in DWRUN_DATA_TILES.items():
            for run, block_n, warps, stages, runs, vec in tiles:
                yield KernelConfig(direction, dtype, ndim, family, run, block_n, height, warps, stages, runs, 1, 1,
                                   vec, False)
        return
    for height in DWRUN_WEIGHT_TILES:
        for run, block_n, warps, stages, runs in dwrun_default_tiles(dtype, height):
            for split in DWRUN_SPLITS:
                yield KernelConfig(direction, dtype, ndim, family, run, block_n, height, warps, stages, runs, split,
                                   1, 1, False)
    run, block_n, warps, runs = DWRUN_WEIGHT_UNSPLIT_TILE
    for stages in (1, 2):
        yield KernelConfig(direction, dtype, ndim, family, run, block_n, 3, warps, stages, runs, 1, 1, 1, False)


def _dwroll_ok(config: KernelConfig) -> bool:
    """Every thread holds at least two elements of a tile (smaller tiles replicate threads), and its
    live fp32 values fit: F_H accumulators + the input tile (forward / backward-data), F_H² + F_H + 1
    tiles (backward-weight), plus the prefetched raw tiles with ``num_stages`` 2."""
    return dwroll_live_values(config) <= (MAX_DWROLL_WEIGHT_VALUES if config.direction is Direction.BACKWARD_WEIGHT
                                          else MAX_DWROLL_DATA_VALUES) and _dwroll_per_thread(config) >= 2


def dwrow_live_values(config: KernelConfig) -> float:
    """fp32-register equivalents a dwrow thread keeps live: ``block_k`` accumulator tiles and the row's raw
    16-bit dY and input tiles (``block_k`` + 1, half a register per element), twice with ``num_stages`` 2."""
    raw = (config.block_k + 1) / 2 * config.num_stages
    return (config.block_k + raw) * _dwroll_per_thread(config)


def dwrun_live_values(config: KernelConfig) -> int:
    """fp32 registers a dwrun thread keeps live (one element of each tile): ``F_H²`` accumulators (forward /
    backward-data: weights), the ``F_H × RUN`` dY window (output rows), the ``RUN + F_H − 1`` input columns of a
    step, plus (``num_stages`` 2) the next step's raw values, one register each (a channel pair's raw values share
    one; with ``num_stages`` 3 and 4 the rows in flight wait in shared memory); ``vec`` 2 and 4 multiply the fp32
    values."""
    height, run = config.block_k, config.block_m
    step = (run + height - 1) + (run if config.direction is Direction.BACKWARD_WEIGHT else 0)
    return (config.vec * (height * height + height * run + (run + height - 1))
            + (step if config.num_stages == 2 else 0))


def _dwroll_per_thread(config: KernelConfig) -> int:
    return config.block_m * config.block_n // (32 * config.num_warps)


def dwroll_live_values(config: KernelConfig) -> float:
    """fp32-register equivalents a dwroll thread keeps live: the tiles above × elements per thread,
    plus (``num_stages`` 2) the next step's raw 16-bit tiles, half a register per element."""
    height = config.block_k
    if config.direction is Direction.BACKWARD_WEIGHT:
        tiles, prefetched = height * height + height + 1, height + 1
    else:  # the rolling walk's F_H accumulators, or the held rows, and the input tile
        tiles, prefetched = (config.group_m if config.group_m > 1 else height) + 1, height
    if config.num_stages == 2:
        tiles += prefetched / 2
    return tiles * _dwroll_per_thread(config)


def _full_rule(config: KernelConfig, arch: ArchSpec) -> bool:
    if config.family is Family.DWROLL:
        return _dwroll_ok(config)
    if config.family is Family.DWROW:
        return dwrow_live_values(config) <= MAX_DWROLL_DATA_VALUES and _dwroll_per_thread(config) >= 2
    if config.family is Family.DWRUN:  # one element (v2: one channel pair) of each tile a thread: none replicated
        return (config.group_m * config.block_n == 32 * config.num_warps * config.vec
                and dwrun_live_values(config) <= MAX_DWROLL_WEIGHT_VALUES)
    if config.family is Family.GWALK and config.direction is Direction.BACKWARD_WEIGHT:
        # Triton gives a chain of dots into one accumulator warps along M only (16 rows each): more warps
        # than 4·block_m / 16 would hold copies of the same rows. Four warps walking two rows compile wrong
        # (Triton 3.6, sm_90; H100: relative error 0.38-0.52 on every problem, 1 and 4 rows and 2 or 8 warps
        # right; bench/results/2026-11-26_h100_s13/), so that pair is left out.
        pointer_walk = config.num_stages == 1
        return (4 * config.block_m >= 16 * config.num_warps
                and (not pointer_walk or (config.num_warps, config.group_m) != (4, 2))
                and gwalk_accumulator_registers(config) <= MAX_ACCUMULATOR_REGISTERS
                and config.smem_bytes_estimate <= arch.smem_per_block_bytes - EPILOGUE_SMEM_RESERVE)
    if config.family is Family.HALO:  # (the ring, taps and scratch: KernelConfig.smem_bytes_estimate)
        return (config.smem_bytes_estimate <= arch.smem_per_block_bytes - EPILOGUE_SMEM_RESERVE
                and config.accumulator_registers <= MAX_ACCUMULATOR_REGISTERS)
    if config.family is Family.GWALK:  # (8 warps on small tiles allowed: the walk holds ROWS accumulator tiles)
        return (config.smem_bytes_estimate <= arch.smem_per_block_bytes - EPILOGUE_SMEM_RESERVE
                and config.accumulator_registers >= 4
                and gwalk_accumulator_registers(config) <= MAX_ACCUMULATOR_REGISTERS)
    return _tensor_core_ok(config, arch) if config.family.uses_tensor_cores else _direct_ok(config)


# ---- selection rules (default) --------------------------------------------------------------
#: tma (block_m, block_n, block_k, warps, stages, group_m) measured on the H200 (861c2b3): 128-wide tiles
#: on two warpgroups, 64-wide on one; block_k 32/16 for groups whose channel count 64 does not divide;
#: stages fill ~100-150 KB. See ``_default_rule`` for why they are not in ``default``.
TMA_MEASURED_TILES = frozenset({
    (128, 128, 64, 8, 4, 8), (128, 256, 64, 8, 3, 8), (256, 128, 64, 8, 3, 8), (128, 64, 64, 4, 4, 8),
    (64, 128, 64, 4, 4, 8), (64, 64, 64, 4, 4, 8), (128, 128, 32, 8, 4, 8), (128, 64, 32, 4, 4, 8),
    (64, 64, 32, 4, 4, 8), (128, 64, 16, 4, 4, 8), (64, 64, 16, 4, 4, 8),
})


#: dwroll (block_w, block_n, warps) in ``default`` by filter height: forward / backward-data keep 8-16
#: elements per thread (72-245 registers, spill-free); backward-weight 8 (F = 3), 4 (F = 5), 2 (F = 7),
#: since it holds F_H² accumulator tiles (137 / 104-160 / 161 registers). sm_90 build of triton 3.6.
DWROLL_DATA_TILES = {3: ((8, 64, 2), (16, 64, 4), (32, 64, 4), (32, 32, 4), (64, 32, 4), (16, 128, 4)),
                     5: ((8, 64, 2), (16, 64, 4), (32, 64, 4), (32, 32, 4), (64, 32, 4), (16, 128, 4)),
                     7: ((8, 64, 2), (16, 64, 4), (32, 64, 4), (32, 32, 4), (64, 32, 4), (32, 64, 8))}
DWROLL_WEIGHT_TILES = {3: ((8, 64, 2), (16, 64, 4), (16, 32, 2), (32, 32, 4), (32, 64, 8)),
                       5: ((8, 16, 1), (16, 16, 2), (16, 32, 4), (32, 16, 4)),
                       7: ((8, 16, 2), (16, 16, 4), (32, 16, 8))}
#: 3x3 backward-weight tile of 4 elements per thread, prefetching only (num_stages 2 won on every layer
#: measured): fewer accumulator registers than DWROLL_WEIGHT_TILES' 8 elements (165 registers, 3 programs per
#: SM under Nsight Compute, session 9), so more programs hide the walk's load latency (101 registers). The
#: 2- and 4-warp tiles of 4 elements (16x16, 32x16, 16x32, 8x32, 8x64) were as fast or a little faster in the
#: probe (JIT-compiled) but their 2D registry binaries spill (ptxas, sm_90: 96 registers + 8 bytes of stack).
DWROLL_LEAN_WEIGHT_TILES = ((64, 16, 8),)
#: With loads one row ahead (num_stages 2), forward / backward-data: the raw next row costs F_H/2
#: registers per element, so 5x5 and 7x7 keep 8 elements per thread; 3x3 adds tall narrow strips
#: (H200 dev suite of 7707798: 64x32 was the best plain tile on every depthwise problem, 2.2-3.1x
#: faster than 16x64). 106-230 registers, spill-free. Backward-weight: the plain tiles (165-197).
#: 3x3 16x64 and 8x64 (8 elements per thread) are for 2D, where they hold the weights in registers
#: (dwroll_tiling.hoists_weights; H200: 16x64 prefetching 37.0 us on n128 c576 14x14, the best plain
#: tile 43.5, cuDNN 28.7 forward / 47.6 backward-data).
DWROLL_PREFETCH_DATA_TILES = {3: ((32, 32, 4), (32, 64, 4), (64, 32, 4), (64, 16, 2), (128, 16, 4), (64, 64, 8),
                                  (128, 32, 8), (16, 64, 4), (8, 64, 2)),
                              5: ((8, 64, 2), (16, 64, 4), (32, 32, 4)),
                              7: ((8, 64, 2), (16, 64, 4), (32, 32, 4), (32, 64, 8))}

#: Forward / backward-data dwroll programs holding their output rows (block_w, block_n, warps, rows held) in
#: ``default``, 2D 7x7 only. H200 probe (bench/gpu/held_probe.py, bench/results/2026-11-26_h200_s14/): the best
#: kernel of 7x7 backward-data (n32 c96 56x56: 107.2 -> 86.8 us, 64x32 holding 4; n32 c384 14x14: 44.2 -> 40.8,
#: 16x32 holding 4), a tie with the best forward kernel (c96: 87.4 vs direct's 86.3); at 3x3 (2D and 3D) slower
#: than the rolling walk on every layer measured (3D n8 c192: 136.5 vs 125.0 us), so not kept there.
DWROLL_HELD_DATA_TILES = {7: ((64, 32, 4, 4), (16, 32, 4, 4))}

#: dwrow (block_w, block_n, warps, num_stages, split_k) in ``default`` by ndim and filter width (block_k).
#: H200 probe (bench/gpu/dwrow_probe.py, bench/results/2026-11-27_h200_s17/dwrow_probe): on the stride-2 3x3
#: depthwise layers of MobileNetV2 (n32) one filter row per program beat every default kernel, 1.15-1.8x
#: (c96 112x112: 80.3 -> 46.3 us, cuDNN 56.7; c144 56x56: 41.4 -> 24.8; c192 28x28: 18.5 -> 13.4; c576 14x14:
#: 13.9 -> 12.1), where dwroll cannot run (stride-1 rows only) and direct reads a tap row at a time. On the
#: stride-1 layers it lost to dwroll by 1.0-1.6x except 7x7 over 7x7 and 28x28 (34.9 vs 38.3, 76.8 vs 78.1 us):
#: latency-bound row walks, more splits only slower. 3D: one 3x3x3 layer, 157 vs dwroll's 114 us; kept for
#: strided 3D layers, which dwroll cannot run. 5x5 untimed: the 7x7 tiles.
DWROW_WEIGHT_TILES = {
    2: {3: ((32, 32, 4, 2, 32), (32, 32, 4, 2, 64), (32, 16, 4, 2, 32), (16, 32, 4, 2, 16), (16, 32, 4, 2, 32),
            (8, 64, 4, 2, 16), (8, 64, 4, 2, 32), (8, 64, 4, 2, 64), (16, 64, 4, 2, 64), (64, 32, 4, 2, 128)),
        5: ((8, 64, 4, 2, 16), (16, 32, 4, 2, 16), (32, 32, 4, 1, 16)),
        7: ((8, 64, 4, 2, 16), (16, 32, 4, 2, 16), (32, 32, 4, 1, 16))},
    3: {3: ((32, 32, 4, 2, 64), (8, 64, 4, 2, 32))},
}
#: dwrow's scalar binary (vec 1: C/G = 1 with any K/G and channel count; session 35), same fields. Its channel runs
#: are unaligned, so Triton gives each thread one channel and several strip columns, whose per-column offsets and
#: masks are held per element: 8 elements a thread (32×32, 4 warps) compile to 202 registers at 3 taps (the v8
#: tile: 91), 2 elements to 62-78 (ptxas, sm_90). Hence tiles of 2 elements a thread (4 at 3 taps, 16×64 / 8 warps),
#: unsplit and at 16-128 splits.
DWROW_SCALAR_WEIGHT_TILES = {
    3: ((8, 64, 8, 1, 1), (8, 64, 8, 2, 16), (8, 64, 8, 2, 32), (8, 64, 8, 2, 128), (4, 64, 4, 2, 32),
        (8, 32, 4, 2, 64), (16, 64, 8, 2, 32)),
    5: ((8, 64, 8, 2, 16), (8, 64, 8, 2, 64), (4, 64, 4, 2, 32)),
    7: ((8, 64, 8, 2, 16), (8, 64, 8, 2, 64), (8, 32, 4, 1, 32)),
}

#: dwrun (run, block_n, warps, num_stages, runs) in ``default`` by filter height, each at 16, 32, 64 and 128 splits:
#: the tiles within 3-5 % of the best dwrun kernel on the 12 stride-1 depthwise layers of the H200 probe
#: (bench/results/2026-11-27_h200_s19/dwrun_probe: the dev suite's and the e2e models' layers), and their 5×5
#: siblings. 7×7 takes runs of 4 columns (150 registers, 3 programs per SM; runs of 7 need 251), 3×3 and 5×5 runs of
#: 7 (96-146 registers) and a 14-column run for 28-wide rows. 3D: the 3×3×3 tiles.
#: One-warp tiles (session 40, ``bench/results/2026-11-29_h200_s40/dwrun_w1_probe``): on the 14- and 7-wide MobileNetV2
#: and ConvNeXt layers at batch 32 they beat every earlier dwrun and dwrow tile by 7-11 % (c576 14×14 3×3 14.3 → 13.1
#: µs, c384 14×14 7×7 28.4 → 25.6); on the 56- and 28-wide layers they lose (0.42-0.93×) and the earlier tiles stay.
DWRUN_WEIGHT_TILES = {
    3: ((7, 128, 4, 2, 1), (7, 32, 4, 2, 4), (7, 16, 4, 2, 8), (7, 16, 8, 2, 16), (14, 32, 2, 1, 2), (7, 16, 1, 1, 2),
        (7, 32, 1, 2, 1)),
    5: ((7, 32, 2, 2, 2), (7, 16, 4, 2, 8), (4, 16, 4, 2, 8), (7, 128, 4, 2, 1)),
    7: ((4, 16, 2, 2, 4), (4, 16, 4, 2, 8), (4, 32, 2, 2, 2), (7, 32, 2, 2, 2), (7, 16, 1, 2, 2)),
}
DWRUN_SPLITS = (16, 32, 64, 128)
#: dwrun backward-weight's unsplit 3×3 path in ``default`` (for CI's compile check): (run, block_n, warps, runs);
#: two stages in bf16, one in fp16.
DWRUN_WEIGHT_UNSPLIT_TILE = (7, 32, 4, 4)
#: dwrun forward / backward-data (run, block_n, warps, num_stages, runs, vec) in ``default`` by filter height (2D,
#: unsplit): the cover of the best (within 3 %) on the 16 stride-1 depthwise layer-directions of the H200 probe
#: (bench/results/2026-11-27_h200_s19/dwrun_data_probe: the dev suite's and the e2e models' 3x3 and 7x7 layers); and
#: two 3x3 channel-pair tiles (vec 2; even channel counts): on the 8 3x3 layer-directions of the session-22 probe
#: 1.21-1.39x the best vec-1 tile, the 7x16 one within 1.1 % of the best pair tile on every one, the two together
#: the best (bench/results/2026-11-27_h200_s22/dwrun_pair_probe). 7x7 pairs lose (164-239 registers).
#: 3x3, rows through shared memory (num_stages 3, 4) and four channels a thread (vec 4): the cover of the best on the
#: 12 layer-directions of the session-27 probe (bench/results/2026-11-28_h200_s27/dwrun_stages_probe; dev suite,
#: MobileNetV2 at batch 32 and 128): 1.02-1.29x the earlier default's best (n128 c144 56x56: 104 -> 81 us), cuDNN's
#: 1.04-2.49x.
#: One-warp programs (session 40, H200, bench/results/2026-11-29_h200_s40/dwrun7_probe and dwrun_w1_probe; each tile
#: timed beside default's dwrun / dwrow kernels and cuDNN in one run): the greedy cover within 3 % of the best on 14
#: layer-directions (the dev suite's 3x3 and 7x7 layers, MobileNetV2 c192 28x28 / c576 14x14 / c960 7x7, ConvNeXt-T
#: c192 28x28 / c384 14x14 at batch 32): 3x3 1.12-1.65x the earlier best, 7x7 1.14-1.63x (n32 c96 56x56 forward
#: 60.0 -> 51.6 us, cuDNN 73.3).
DWRUN_DATA_TILES = {
    3: ((8, 16, 2, 2, 4, 1), (14, 16, 4, 1, 8, 1), (8, 64, 4, 1, 2, 1), (7, 16, 4, 2, 16, 2), (4, 32, 2, 2, 4, 2),
        (4, 32, 2, 4, 8, 4), (4, 32, 4, 4, 16, 4), (4, 32, 2, 3, 4, 2), (4, 32, 4, 2, 16, 4),
        (4, 64, 1, 3, 2, 4), (2, 32, 1, 4, 4, 4), (3, 64, 1, 4, 1, 2), (5, 32, 1, 3, 4, 4)),
    7: ((4, 16, 2, 2, 4, 1), (4, 16, 2, 1, 4, 1), (4, 128, 4, 1, 1, 1), (3, 32, 1, 2, 1, 1)),
}


def dwrun_default_tiles(dtype: DType, height: int) -> tuple[tuple[int, int, int, int, int], ...]:
    """:data:`DWRUN_WEIGHT_TILES` of ``height`` for ``dtype``: fp16's 3×3 four-warp runs of 7 load a step ahead
    only in bf16 (in fp16 ptxas spills 8 bytes of stack there, 96 registers; one stage: 86, none)."""
    tiles = DWRUN_WEIGHT_TILES.get(height, ())
    if dtype is DType.FP16 and height == 3:
        tiles = tuple((run, bn, warps, 1 if (run, warps) == (7, 4) else stages, runs)
                      for run, bn, warps, stages, runs in tiles)
    return tiles

#: Split-K forward / backward-data tiles in ``default`` (block_m, block_n, block_k; 4 warps, 3 stages, v8,
#: bf16/fp16, igemm in 2D and 3D, gemm1x1 in 2D) and their splits: for problems whose GEMM M is small
#: (batch-1 inference), where the (m, n) tiles alone leave most SMs idle and each CTA walks a long
#: reduction (H200, bench/results/2026-11-22_h200_s7: dense n1 c256 14x14 3x3 forward, M = 196, best
#: kernel igemm 64x32x64: 4 x 8 = 32 CTAs on 132 SMs, 36 steps each, 17.6 us against cuDNN's 8.2).
#: Not yet measured against the unsplit tiles.
SPLIT_K_DATA_TILES = ((32, 32, 64), (64, 32, 64), (64, 64, 64))
SPLIT_K_DATA_SPLITS = (4, 8, 16)


#: Backward-weight splits of ``default`` beyond (1, 4, 16), for these igemm (2D and 3D) and gemm1x1 (2D) tiles
#: (block_m, block_n, block_k; 4 warps, 3 stages, v8, bf16/fp16). 64 splits for small-M·N, long reductions: the
#: dense 1x1 dW of n32 c64 -> 256 56x56 is a 256 x 64 x 100,352 GEMM, 4 tiles of 64x64, so 16 splits fill 64 of
#: 132 SMs (H200, bench/results/2026-11-26_h200_s15 call 2: 40.6 us against cuDNN's 22.1); 8 splits between 4
#: and 16 for the dense 3x3 layers (n32 c256 28x28: 96.5 us at 4 splits, 87.5 at 16, whose fp32 partials are
#: 37.7 MB).
WEIGHT_EXTRA_SPLIT_TILES = ((64, 32, 64), (64, 64, 64), (64, 128, 64), (128, 64, 64))
WEIGHT_EXTRA_SPLITS = (8, 64)
#: gmerge backward-weight also at 64 splits, every default gmerge tile (merges 2-16, its default stages): on grouped
#: layers with few, narrow groups and long reductions a merged program at 16 splits still walks hundreds of steps in
#: series. H200, session 40 (bench/results/2026-11-29_h200_s40/loss_probe, each beside default's kernels and cuDNN in
#: one run): n143 g4 c64 64x64 1x3 150.9 -> 64.1 us (64x32x64, 4 stages, merge 4; cuDNN 49.9), 3D n3 g13 c78 -> 26
#: 30x37x37 1x3x3 286.9 -> 224.7 (64x64x32 v1, merge 8; cuDNN 244.1). 128 and 256 splits lost on every layer.
GMERGE_WEIGHT_LONG_SPLIT = 64

#: Pipeline stages of the v8 tensor-core tiles of ``default`` per BLOCK_K: keep enough bytes in flight.
PIPELINE_DEPTH = {16: 5, 32: 4, 64: 3, 128: 2}

#: A second pipeline depth for the v8 tensor-core tiles of ``default`` beside :data:`PIPELINE_DEPTH`, keyed
#: (family, direction, BLOCK_K). H200, every non-depthwise dev-suite problem's three best tensor-core kernels
#: rebuilt at 2-5 stages and timed in one run
#: (bench/results/2026-11-27_h200_s16/config_probe): forward at BLOCK_K 32 one stage fewer leaves the shared memory
#: of more programs per SM (gmerge 128x32x32 on G=32: 5 programs at 4 stages under Nsight Compute, 2.4 waves) and
#: won on 7 of 15 forward problems (up to 1.10x, G=32 c512 14x14); backward-weight gmerge with 4 stages won on 4 of
#: 15 (up to 1.13x, G=32 stride 2). Each is ranked by a shipped model trained on their rows (fwd/11,
#: bwd_weight/9). Backward-data gained too (gmerge 128x64x64 at 2 stages 1.18x on G=32 stride 2), but the model
#: trained with those rows ranked the dev suite worse (0.972 -> 0.935), so they are measured, not built.
STAGE_SIBLINGS = {
    **{(family, Direction.FORWARD, 32): 3 for family in (Family.IGEMM, Family.GMERGE, Family.GEMM1X1)},
    (Family.GMERGE, Direction.BACKWARD_WEIGHT, 64): 4,
}

#: gwalk backward-weight (block_m, block_n, block_k, warps) in ``default`` (see ``_default_rule``).
GWALK_WEIGHT_DEFAULT_TILES = frozenset({(16, 16, 64, 4), (32, 32, 64, 4), (32, 32, 128, 8)})
#: gwalk (block_m, block_n, block_k, warps) in ``default`` (see ``_default_rule``).
GWALK_DEFAULT_TILES = frozenset({(64, 16, 16, 4), (128, 16, 16, 4), (64, 32, 32, 4), (128, 32, 32, 4),
                                 (128, 32, 32, 8), (64, 64, 64, 4), (128, 64, 64, 8)})


#: Channel-padded (``pad_channels``) tiles of ``default``, (family, block_m, block_n, block_k, warps, stages,
#: split_k) by direction, bf16 / fp16, on v8 tiles ``default`` holds (igemm 2D and 3D, gemm1x1 2D): the v8 tiles
#: best most often on the dense and large-C/G problems of the H200 synthetic and dev-suite runs (sessions 33-34),
#: the widest of them for large GEMMs and a split or a narrow one for small M.
PADDED_TILES = {
    Direction.FORWARD: frozenset({(Family.IGEMM, 128, 128, 64, 8, 3, 1), (Family.IGEMM, 128, 256, 64, 8, 3, 1),
                                  (Family.IGEMM, 64, 32, 32, 4, 4, 1), (Family.IGEMM, 64, 64, 64, 4, 3, 4),
                                  (Family.GEMM1X1, 128, 32, 32, 4, 4, 1)}),
    Direction.BACKWARD_DATA: frozenset({(Family.IGEMM, 128, 256, 64, 8, 3, 1), (Family.IGEMM, 128, 128, 64, 8, 3, 1),
                                        (Family.IGEMM, 64, 64, 32, 4, 4, 1), (Family.IGEMM, 64, 64, 64, 4, 3, 8),
                                        (Family.GEMM1X1, 128, 32, 32, 4, 4, 1)}),
    Direction.BACKWARD_WEIGHT: frozenset({(Family.IGEMM, 64, 128, 64, 4, 3, 1), (Family.IGEMM, 64, 128, 64, 4, 3, 8),
                                          (Family.IGEMM, 64, 32, 64, 4, 3, 16), (Family.IGEMM, 128, 128, 64, 8, 3, 1),
                                          (Family.GEMM1X1, 64, 64, 64, 4, 3, 64)}),
}


#: Group-padded (``pad_channels`` on C/G = 1 problems) depthwise tiles of ``default``, (family, ndim, block_m,
#: block_n, block_k, warps, split_k) by direction, bf16 / fp16: the v8 direct and dwrow tiles that, greedily added,
#: came closest to the best kernel of every aligned depthwise training problem (H200 training folders of
#: bench/gpu/refresh_sets.json, session 38): what a depthwise layer whose channel count is not a multiple of 8
#: runs on once its groups are padded.
PADDED_DEPTHWISE_TILES = {
    Direction.FORWARD: frozenset({(Family.DIRECT, 2, 128, 16, 1, 4, 1), (Family.DIRECT, 2, 128, 32, 8, 4, 1),
                                  (Family.DIRECT, 2, 32, 32, 1, 4, 1), (Family.DIRECT, 2, 64, 32, 4, 4, 1),
                                  (Family.DIRECT, 3, 64, 32, 1, 4, 1), (Family.DIRECT, 3, 64, 32, 8, 4, 1),
                                  (Family.DIRECT, 3, 128, 16, 1, 4, 1)}),
    Direction.BACKWARD_DATA: frozenset({(Family.DIRECT, 2, 128, 16, 1, 4, 1), (Family.DIRECT, 2, 64, 32, 8, 4, 1),
                                        (Family.DIRECT, 2, 128, 16, 4, 4, 1), (Family.DIRECT, 2, 64, 16, 8, 4, 1),
                                        (Family.DIRECT, 3, 128, 16, 1, 4, 1), (Family.DIRECT, 3, 64, 32, 8, 4, 1)}),
    Direction.BACKWARD_WEIGHT: frozenset({(Family.DWROW, 2, 16, 32, 7, 4, 16), (Family.DWROW, 2, 32, 32, 3, 4, 64),
                                          (Family.DWROW, 2, 8, 64, 3, 4, 16), (Family.DIRECT, 2, 128, 32, 1, 4, 1),
                                          (Family.DWROW, 3, 32, 32, 3, 4, 64), (Family.DIRECT, 3, 128, 32, 1, 4, 8),
                                          (Family.DIRECT, 3, 128, 16, 1, 4, 32)}),
}


def _default_padded_rule(c: KernelConfig) -> bool:
    """The ``pad_channels`` kernels of ``default``: :data:`PADDED_TILES` and :data:`PADDED_DEPTHWISE_TILES` whose v8
    tile ``default`` holds."""
    if c.dtype is DType.FP32 or not _default_rule(c.unpadded):
        return False
    if c.family in GROUP_PADDED_FAMILIES:
        return (c.group_m == 1 and (c.family, c.ndim, c.block_m, c.block_n, c.block_k, c.num_warps, c.split_k)
                in PADDED_DEPTHWISE_TILES[c.direction])
    return ((c.family is Family.IGEMM or c.ndim == 2)
            and (c.family, c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages, c.split_k)
            in PADDED_TILES[c.direction])


def _default_split_data_rule(c: KernelConfig) -> bool:
    """The split-K forward / backward-data kernels of ``default`` (see :data:`SPLIT_K_DATA_TILES`)."""
    return (c.family in (Family.IGEMM, Family.GEMM1X1) and (c.family is Family.IGEMM or c.ndim == 2)
            and c.vec == 8 and not c.index64 and c.dtype is not DType.FP32 and c.group_m == 8
            and c.num_warps == 4 and c.num_stages == 3 and c.split_k in SPLIT_K_DATA_SPLITS
            and (c.block_m, c.block_n, c.block_k) in SPLIT_K_DATA_TILES)


def _default_rule(config: KernelConfig) -> bool:
    """The registry shipped and measured by default: a few hundred kernels per (direction, dtype)."""
    c = config
    if c.pad_channels:
        return _default_padded_rule(c)
    if c.family is Family.DWRUN:
        if c.index64 or c.dtype is DType.FP32 or (c.ndim == 3 and c.block_k != 3):
            return False  # 3D: the 3x3x3 filters video networks use
        tile = (c.block_m, c.block_n, c.num_warps, c.num_stages, c.group_m)
        if c.direction is not Direction.BACKWARD_WEIGHT:
            return (*tile, c.vec) in DWRUN_DATA_TILES.get(c.block_k, ())
        if c.vec != 1:  # backward-weight pairs: 0.34-1.06x the vec-1 tiles (session-22 probe)
            return False
        if c.split_k == 1:  # the unsplit path, for CI's compile check
            run, block_n, warps, runs = DWRUN_WEIGHT_UNSPLIT_TILE
            return tile == (run, block_n, warps, 2 if c.dtype is DType.BF16 else 1, runs) and c.block_k == 3
        return tile in dwrun_default_tiles(c.dtype, c.block_k) and c.split_k in DWRUN_SPLITS
    if c.family is Family.DWROW:
        if c.index64 or c.dtype is DType.FP32:
            return False
        tile = (c.block_m, c.block_n, c.num_warps, c.num_stages, c.split_k)
        if c.vec == 1:  # 2D and 3D alike
            return tile in DWROW_SCALAR_WEIGHT_TILES.get(c.block_k, ())
        if tile == (64, 16, 4, 1, 1):  # the unsplit path, for CI's compile check
            return c.block_k == 3
        return tile in DWROW_WEIGHT_TILES[c.ndim].get(c.block_k, ())
    if c.family is Family.DWROLL:
        if c.index64 or c.dtype is DType.FP32 or (c.ndim == 3 and c.block_k != 3):
            return False  # 3D: the 3x3x3 filters video networks use
        tile = (c.block_m, c.block_n, c.num_warps)
        if c.direction is Direction.BACKWARD_WEIGHT:
            if c.split_k == 1:  # one program per channel block and depth tap: the unsplit path, for CI's compile check
                return tile == (16, 64, 4) and c.block_k == 3 and c.num_stages == 1
            # Tried and not kept (H200, bench/results/2026-11-22_h200_s8/): loading two rows ahead
            # (num_stages 3, 3db1141) was slower on 3x3 (n32 c144 56x56: 84.2 vs 60.5 us) and equal on 7x7;
            # a column walk (7d6be21: each thread owns whole channels and every strip column, one-warp
            # programs, 64-512 splits) was faster on 1 of 11 depthwise shapes (n128 c576 14x14: 57.9 vs
            # 67.3 us) and 1.1-1.6x slower on the others.
            if tile in DWROLL_WEIGHT_TILES[c.block_k] and c.split_k in (16, 64):
                return True
            # 3x3, loads a row ahead: lean tiles and 32 / 128 splits (H200, bench/results/2026-11-26_h200_s10/
            # dw_weight_lean: the best on every stride-1 3x3 layer of the PyTorch e2e models, e.g. n32 c32
            # 112x112 38.8 us with 64x16 on 8 warps at 128 splits against 114.8 for default's best, cuDNN 53.0).
            return (c.block_k == 3 and c.num_stages == 2 and tile in DWROLL_WEIGHT_TILES[3] + DWROLL_LEAN_WEIGHT_TILES
                    and c.split_k in (16, 32, 64, 128))
        if c.group_m > 1:
            return c.ndim == 2 and (*tile, c.group_m) in DWROLL_HELD_DATA_TILES.get(c.block_k, ())
        if c.num_stages == 2:
            return tile in DWROLL_PREFETCH_DATA_TILES[c.block_k]
        return tile in DWROLL_DATA_TILES[c.block_k]
    if c.family is Family.DIRECT and c.block_k > 1:
        # Depthwise tap rows, 16-byte channel vectors; tiles spill-free on sm_90 (ptxas of triton 3.6).
        if c.num_warps != 4 or c.vec != 8 or c.index64 or c.dtype is DType.FP32:
            return False
        tile = (c.block_m, c.block_n)
        if c.ndim == 3:
            # 3D: the one tile measured (H200, dev suite of bb28fff, same run): n8 c192 16x28x28 3x3x3
            # bwd_data 175.3 us vs 213.1 for the best general binary, fwd 125.7 vs 126.3 (72-80
            # registers). 3D backward-weight keeps the general binaries (289.6 us, the tap rows untimed).
            return c.direction is not Direction.BACKWARD_WEIGHT and (*tile, c.block_k) == (64, 32, 8)
        if c.direction is Direction.BACKWARD_WEIGHT:
            # One channel vector per thread and tap (76-119 registers); up to 64 splits, since a
            # program owns one filter row of a channel block and a 3x3 filter over 144 channels
            # leaves only 15-27 such pairs for 132 SMs.
            return tile in ((32, 32), (64, 16)) and c.split_k in (8, 32, 64)
        # 256x16 (forward): four rows per thread share each weight load (3.2 instead of 3.6
        # instructions per FMA in the SASS) at 118-126 registers; in backward_data 128x32 with
        # 8 columns and 256x16 spill.
        if c.direction is Direction.BACKWARD_DATA:
            return tile in ((64, 16), (64, 32), (128, 16))
        return tile in ((64, 16), (64, 32), (128, 16), (128, 32), (256, 16))
    if c.family is Family.DIRECT:
        # Four warps; tiles whose compiled loops are spill-free (ptxas report) and whose
        # instructions per FMA are lowest, plus 32x32 for small problems; 128x64 spills in the
        # backward-weight inner loop and 32x16 / 32x64 spread the weight loads too thin.
        if c.num_warps != 4 or c.split_k not in (1, 8, 32):
            return False
        tile = (c.block_m, c.block_n)
        if c.group_m > 1:
            # The forward multiplier binary (H200, session 24, synthetic multiplier problems: 3.2-3.9x the general
            # binary on odd channel counts with 3x3(x3) filters, 0.73-0.86x on small 1x1 ones). Its loads are
            # scalar whatever the alignment (kernels/direct_multiplier.py), so only v1 instances, which run every
            # channel count: J = 4 on the general binary's forward tiles (96-128 registers, spill-free), J = 2
            # (twice the rows per pass) on 64x32; fp32 and 64-bit indices on the tiles the general binary has.
            if c.vec != 1:
                return False
            if c.index64:
                return tile == (64, 16) and c.group_m == 4
            if c.dtype is DType.FP32:
                return tile == (64, 32)
            if c.group_m == 2 and c.dtype is DType.FP16:  # 64x32 J = 2 spills in fp16 (H200 build of c987343)
                return False
            return tile == (64, 32) or (c.group_m == 4 and tile in ((32, 32), (64, 16), (64, 64), (128, 16),
                                                                     (128, 32)))
        if c.index64:
            return tile == (64, 16) and c.vec == 1 and c.split_k in (1, 8)
        if c.vec == 1 or c.dtype is DType.FP32:
            return tile == (64, 32) and c.vec == 1 and (c.dtype is not DType.FP32 or c.split_k in (1, 8))
        if c.direction is Direction.BACKWARD_DATA:  # the other tiles spill (H200 build of 735ad29)
            return tile in ((64, 32), (128, 16))
        return tile in ((64, 16), (64, 32), (128, 16), (128, 32), (64, 64), (32, 32))
    if c.family is Family.GWALK and c.direction is Direction.BACKWARD_WEIGHT:
        # H100 probe (bench/results/2026-11-26_h100_s13/walk_probe_weight/run2_e041a5c): on ResNeXt-50's stride-1
        # grouped 3x3 layers the 4-row walks were best or within 3-20 % of the best walk on every layer; splits
        # 16-64 (128 was never best). 16x16 and 32x32 merged tiles on 4 warps (64 lanes) and 32x32 on 8 (128
        # lanes); spill-free on sm_90 (80-255 registers); the 128-lane 4-warp and the 2-warp tiles spill in the
        # registry's build. Dev suite, H100 (.../dev_suite_h100_call8): best kernel on 4 of the 5 problems it runs
        # (c128 56x56 80.3 -> 48.0 us, c512 14x14 27.6 -> 17.2, c1024 7x7 16.7 -> 14.4 at 8 splits; batch 1:
        # gmerge 5.8 us against 6.5).
        # One-row walks (any stride and dilation) on the 4-warp tiles, for the grouped layers the 4-row walks
        # cannot run. H100 dev suite (.../dev_suite_h100_call11): dilation 2 (n8 g8 c256 64x64) 59.7 -> 56.8 us
        # (cuDNN 37.6); stride 2 (n32 g32 c256 56x56) 83.4 us against gmerge's 42.1: half the stacked gradient
        # lanes are zeros there and the input is 4x the output.
        tile = (c.block_m, c.block_n, c.block_k, c.num_warps)
        # The TMA walks: default's 4-warp tiles at 64 lanes, 2 and 4 rows, two stages. H200 dev suite (session 34,
        # bench/results/2026-11-29_h200_s34): 16x16 at 2 rows best on g32 c128 56x56 (48.5 -> 38.9 us) and c256
        # 28x28 (29.9 -> 24.6); the 32x32 tiles (246 registers) were best on one synthetic problem (C/G 6, 95x95).
        if c.num_stages > 1:
            return (tile in GWALK_WEIGHT_DEFAULT_TILES and c.block_k == 64 and c.num_warps == 4
                    and c.group_m in (2, 4) and c.num_stages == 2 and c.merge * 4 <= c.block_n
                    and (c.split_k in (16, 32, 64) or (c.split_k == 8 and c.block_m == 32)))
        rows_ok = c.group_m == 4 or (c.group_m == 1 and c.num_warps == 4)
        if not rows_ok or tile not in GWALK_WEIGHT_DEFAULT_TILES or c.merge * 4 > c.block_n:
            return False
        if c.split_k == 1:  # the unsplit path, for CI's compile check
            return tile == (16, 16, 64, 4) and c.group_m == 4
        # 8 splits on the 32x32 tiles: wide groups (C/G 16-32) write 8-9x MERGE·C/G·K/G partials per split
        return c.split_k in (16, 32, 64) or (c.split_k == 8 and c.block_m == 32)
    if c.family is Family.GWALK:
        # Square merged tiles (C/G = K/G in the networks' grouped layers), merges leaving at least 4 channels
        # per group in the tile, 2 or 4 output rows. H200 probe (bench/results/2026-11-26_h200_s12/walk_probe):
        # on ResNeXt-50's stride-1 grouped 3x3 layers the best walk was 64 or 128 rows x 32x32 on every layer,
        # 10-46 % faster than default's best kernel; 16x16 and 64x64 serve narrower and wider groups.
        # Spill-free on sm_90 (ptxas of triton 3.6: 42-153 registers for the 4-warp tiles).
        tile = (c.block_m, c.block_n, c.block_k, c.num_warps)
        return tile in GWALK_DEFAULT_TILES and c.group_m in (2, 4) and c.merge * 4 <= c.block_k
    if c.family is Family.HALO:
        # Square merged tiles of 16, 32 or 64 channels on one warpgroup over 64 rows, merges leaving at least 4
        # channels per group in the tile, every walk length. H200 probe (bench/results/2026-11-28_h200_s28/,
        # calls 3-5): 64 rows beat 128 on one or two warpgroups on every layer; the best walk was 7-8 rows on
        # 14-wide and batch-1 layers, 14-16 on 28-wide, 28-32 on 56-wide and on C/G 56. The walks of 7, 14 and 28
        # rows divide the 14-, 28- and 56-row images of the classification networks (a 32-row walk computes
        # 64 rows of a 56-row image, 14 % wasted; session 28's default had only the powers of two).
        return (c.block_m == 64 and c.block_n == c.block_k and c.block_k in (16, 32, 64) and c.merge <= 8
                and c.merge * 4 <= c.block_k)
    if c.family is Family.TMA:
        # Not in default yet (H200, dev suite of 861c2b3, every kernel of default + these tiles in one run):
        # correct everywhere, but best on 2 of 20 stride-1 problem-directions and only by 2-8 % (dense fwd
        # 28x28: 77.6 vs 84.0 us), 1.1-2.7x slower elsewhere; and no trained model has seen the family
        # (ranking it cost the shipped fwd/4 0.953 -> 0.916 mean efficiency on the dev suite). `full`
        # keeps every tile; these are the ones measured.
        return False
    if c.split_k > 1 and c.direction is not Direction.BACKWARD_WEIGHT:
        return _default_split_data_rule(c)
    # Splits every tile of the rest of this rule may take (gmerge backward-weight: also its long split).
    splits = ((1, 4, 16, GMERGE_WEIGHT_LONG_SPLIT)
              if c.family is Family.GMERGE and c.direction is Direction.BACKWARD_WEIGHT else (1, 4, 16))
    if c.split_k not in splits and c.split_k in WEIGHT_EXTRA_SPLITS and c.direction is Direction.BACKWARD_WEIGHT:
        return ((c.family is Family.IGEMM or (c.family is Family.GEMM1X1 and c.ndim == 2))
                and (c.block_m, c.block_n, c.block_k) in WEIGHT_EXTRA_SPLIT_TILES and c.num_warps == 4
                and c.num_stages == 3 and c.group_m == 8 and c.vec == 8 and not c.index64 and c.dtype is not DType.FP32)
    if c.group_m != 8 or c.split_k not in splits:
        return False
    if c.num_stages == 1:
        # Not pipelined: plain loads, cached in L1, where the filter taps' overlapping activation rows
        # hit (the pipelined 16-byte cp.async copies are L2-only: cp.async.cg whatever the cache
        # modifier, Triton 3.6). H200, ResNeXt 3x3 layers, gmerge forward 128x32x32: 8-13 % faster than
        # the same tile pipelined (bench/results/2026-11-22_h200_s7/probe/). Forward and backward-data:
        # in backward-weight, unpipelined gmerge 64x32x64 / 64x64x64 and igemm 64x64x64 / 128x64x64 were
        # 1.1-2.2x slower than the best pipelined tile on every 2D dev-suite problem (H200, f1a9cec,
        # bench/results/2026-11-22_h200_s8/), and compiling the depth sizes in gained nothing there.
        if c.vec != 8 or c.index64 or c.dtype is DType.FP32 or c.direction is Direction.BACKWARD_WEIGHT:
            return False
        tile = (c.block_m, c.block_n, c.block_k, c.num_warps)
        if c.family is Family.GMERGE:
            return c.merge in (2, 4, 8, 16) and tile in ((128, 32, 32, 4), (128, 64, 64, 4))
        return c.family is Family.IGEMM and tile in ((128, 32, 32, 4), (128, 64, 32, 4), (128, 128, 64, 8))
    tile = (c.block_m, c.block_n, c.block_k)
    if c.vec == 1:
        # Unaligned channel runs cannot use 16-byte cp.async, so nothing is pipelined and deeper
        # stages only hold more loads in registers; elements are gathered one 64-bit address each,
        # so these tiles need twice the threads of aligned ones (measured: ptxas spills otherwise).
        if c.num_stages != 2 or c.num_warps != (8 if c.block_m * c.block_n >= 128 * 64 else 4):
            return False
    elif (c.num_stages not in (PIPELINE_DEPTH[c.block_k], STAGE_SIBLINGS.get((c.family, c.direction, c.block_k)))
          or c.num_warps != (8 if c.block_m * c.block_n >= 128 * 128 else 4)):
        return False
    if c.index64:  # one generic 64-bit-indexed kernel per direction: correctness for huge tensors
        fallback = (32, 16, 16) if c.dtype is DType.FP32 else (64, 32, 16)
        return c.family is Family.IGEMM and tile == fallback and c.vec == 1 and c.split_k in (1, 4)
    v1_tiles = ((64, 32, 32), (64, 64, 32), (128, 64, 32))
    if c.dtype is DType.FP32:  # fp32 runs on exact (non-tf32) dots: correctness, not speed
        # (64x64x32 spills in the backward-weight loop: 8 bytes of stack, ptxas of CUDA 13.0)
        fp32_tiles = v1_tiles[:1] if c.direction is Direction.BACKWARD_WEIGHT else v1_tiles[:2]
        return c.family is Family.IGEMM and tile in fp32_tiles and c.vec == 1 and c.split_k in (1, 4)
    if c.family is Family.GMERGE:
        if c.merge not in (2, 4, 8, 16):
            return False
        if c.vec == 1:
            return tile in v1_tiles
        # v8: the merged runs (MERGE·C/G = 32 or 64 for the usual 4–16 channels per group) are
        # 16-byte aligned, so cp.async pipelines them; tiles match those run lengths.
        if c.direction is Direction.BACKWARD_WEIGHT:
            return tile in ((64, 32, 64), (64, 64, 64))
        return tile in ((64, 32, 32), (128, 32, 32), (64, 64, 64), (128, 64, 64))
    if c.family is Family.GEMM1X1 and c.ndim == 3:
        # + one unaligned tile: on unaligned 3D 1x1 problems it beat every default kernel measured with
        # it (H200, h200_s3 rows: bwd_data n4 c1312 g82 20x28x28 284 vs 813 us, n121 g4 c24 514 vs 677).
        return (tile == (128, 64, 64) and c.vec == 8) or (
            tile == (64, 32, 32) and c.vec == 1 and c.direction is not Direction.BACKWARD_WEIGHT)
    if c.vec == 1:
        return tile in v1_tiles
    if tile in ((128, 256, 64), (256, 128, 64)):
        # Dense and large-C/G problems: a 64x256 / 128x128 wgmma per warpgroup halves the operand
        # traffic per FLOP of 128x128 (fwd/bwd_data: 205-255 registers, spill-free; backward-weight
        # spills 368-432 bytes at these tiles).
        return c.direction is not Direction.BACKWARD_WEIGHT
    return c.block_m in (64, 128) and c.block_n in (32, 64, 128) and c.block_k in (32, 64)


def _tiny_rule(config: KernelConfig) -> bool:
    """One bf16 kernel per family and direction (and both split-K paths of backward-weight and of the
    forward / backward-data igemm): CI's compile check."""
    c = config
    if c.dtype is not DType.BF16 or c.index64:
        return False
    if c.pad_channels:  # 2D: one per direction (their v8 tiles are the compile check of the aligned igemm too)
        return c.ndim == 2 and c.family is Family.IGEMM and (c.block_m, c.block_n, c.split_k) in (
            (64, 32, 1), (64, 64, 1), (64, 32, 16))
    if c.family is Family.GWALK and c.direction is Direction.BACKWARD_WEIGHT:
        return (c.block_m, c.block_n, c.merge, c.group_m) == (16, 16, 2, 4) and c.split_k in (1, 16)
    if c.family is Family.GWALK:  # one 4-warp and one 8-warp tile
        return (c.block_m, c.block_n, c.num_warps, c.group_m) in ((64, 32, 4, 4), (128, 32, 8, 2)) and c.merge == 2
    if c.family is Family.HALO:
        return (c.block_m, c.block_n, c.block_k, c.group_m, c.merge) == (64, 32, 32, 8, 4)
    if c.family is Family.DWROLL:  # plain and prefetching; the lean backward-weight tile at 128 splits
        lean = (c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages, c.split_k) == (64, 16, 3, 8, 2, 128)
        if c.direction is Direction.BACKWARD_WEIGHT and lean:
            return True
        return (c.block_m, c.block_n, c.block_k) in ((16, 64, 3), (32, 32, 3)) and c.split_k in (1, 16) \
            and (c.num_stages, c.block_m) in ((1, 16), (2, 32))
    if c.family is Family.DWROW:  # the unsplit path and one split tile; one scalar (vec 1) tile
        if c.vec == 1:
            return (c.block_m, c.block_n, c.block_k, c.num_warps, c.split_k) == (8, 64, 3, 8, 32)
        return (c.block_m, c.block_n, c.block_k, c.split_k) in ((64, 16, 3, 1), (32, 32, 3, 64))
    if c.family is Family.DWRUN:  # the unsplit path and one split tile; forward / backward-data: one tile of
        if c.direction is not Direction.BACKWARD_WEIGHT:  # one channel a thread, channel pairs, and 4 through smem
            return (c.block_m, c.block_n, c.block_k, c.num_stages, c.group_m) in ((8, 16, 3, 2, 4), (4, 32, 3, 2, 4),
                                                                                 (4, 32, 3, 4, 8))
        return (c.block_m, c.block_n, c.block_k, c.group_m) == (7, 32, 3, 4) and c.split_k in (1, 64)
    if c.family is Family.DIRECT:  # (+ one depthwise tap-row instance per direction: cheap binaries)
        if c.block_k > 1:
            tap_rows = (32, 32) if c.direction is Direction.BACKWARD_WEIGHT else (64, 32)
            return (c.block_m, c.block_n, c.block_k) == (*tap_rows, 4) and c.split_k in (1, 8)
        return (c.block_m, c.block_n, c.vec) == (64, 32, 1) and c.split_k in (1, 8) and c.group_m in (1, 4)
    if c.split_k > 1 and c.direction is not Direction.BACKWARD_WEIGHT:  # split-K forward / backward-data
        return c.family is Family.IGEMM and (c.block_m, c.block_n, c.block_k, c.split_k) == (64, 32, 64, 8)
    if c.family is Family.GMERGE:
        return (c.block_m, c.block_n, c.block_k, c.merge) == (64, 32, 32, 4) and c.split_k in (1, 4)
    if c.family is Family.GEMM1X1 and c.ndim == 3:  # default keeps a single 3D 1x1 tile
        return (c.block_m, c.block_n, c.block_k) == (128, 64, 64) and c.split_k in (1, 4)
    return (c.block_m, c.block_n, c.block_k) == (64, 64, 32) and c.vec == 1 and c.split_k in (1, 4)


@cache
def _generate(rule_set: str, direction: Direction, dtype: DType, ndim: int, arch_name: str) -> tuple[KernelConfig, ...]:
    arch = get_arch(arch_name)
    candidates = _candidates(direction, dtype, ndim, narrow=rule_set != "full")
    configs: Iterable[KernelConfig] = (c for c in candidates if _full_rule(c, arch))
    if rule_set in ("default", "tiny"):
        configs = filter(_default_rule, configs)
    if rule_set == "tiny":
        configs = filter(_tiny_rule, configs)
    return tuple(sorted(configs, key=lambda c: c.name))


def rule_set_configs(rule_set: str, arch: str = "sm_90", *, directions: Iterable[Direction | str] | None = None,
                     dtypes: Iterable[DType | str] | None = None, ndims: Iterable[int] = (2, 3)) -> list[KernelConfig]:
    """Every config of ``rule_set`` for ``arch``, optionally narrowed, sorted by name."""
    if rule_set not in RULE_SETS:
        raise ValueError(f"rule_set: must be one of {RULE_SETS}, got {rule_set!r}")
    spec = get_arch(arch)
    chosen_directions = [Direction.parse(d) for d in (list(Direction) if directions is None else directions)]
    chosen_dtypes = [DType.parse(t) for t in (list(DType) if dtypes is None else dtypes)]
    out: list[KernelConfig] = []
    for direction, dtype, ndim in itertools.product(chosen_directions, chosen_dtypes, ndims):
        out.extend(_generate(rule_set, direction, dtype, ndim, spec.name))
    return out


def rule_set_names(rule_set: str, arch: str = "sm_90") -> frozenset[str]:
    """Names of every kernel of ``rule_set`` for ``arch`` (computed once per rule set and arch): what a
    benchmark measures and what data read as that rule set keeps."""
    return _names(rule_set, get_arch(arch).name)


@cache
def _names(rule_set: str, arch_name: str) -> frozenset[str]:
    return frozenset(c.name for c in rule_set_configs(rule_set, arch_name))
