"""Kernel variants measured beside the registry's kernels and cuDNN, in one run on one GPU.

A probe for deciding what to build next, not a report of the shipped registry: each section times
candidate programs (written here, or configs outside the ``default`` rule set compiled on the spot with
the registry's own build) against the registry's kernels and cuDNN on the same problems, with the tile
engine's timing (``native.bench``: rotated input sets over twice the L2, CUDA-graph replay, median of 5)
and its correctness check (float64 reference, NaN-poisoned output, DESIGN §4 limits).

Sections:

* ``dw_data``: 2D depthwise forward / backward-data, every dwroll data tile of ``default`` (plain and
  prefetching; 2D 3×3 tiles of ≤ 8 elements per thread hold their weights).
* ``dw_weight``: dwroll backward-weight at more splits than ``default`` has.
* ``dw_weight_lean``: 3×3 backward-weight dwroll tiles of 2 and 4 elements per thread beside ``default``'s
  (8), plain and prefetching, 16–128 splits, on the PyTorch e2e models' depthwise layers.
* ``dw_data_lean``: 3×3 forward / backward-data dwroll tiles of 4–8 elements per thread on 8 warps beside
  ``default``'s, plain and prefetching, on the same layers.
* ``grouped_fwd``: gmerge forward tiles outside ``default``, and ``_gmerge_fwd_persistent_kernel``: the
  gmerge program as a persistent loop over output tiles flattened into one software pipeline
  (``tl.range(flatten=True)``, ± warp specialisation).
* ``specialize``: the registry's gmerge forward and dwroll walk compiled as Triton's launcher specialises
  them per call (integer arguments equal to 1 become constants, multiples of 16 carry a divisibility
  hint), with only the depth sizes constant (what a 2D config compiles in), with unit height/width
  strides and dilations too, and with nothing constant.

Session 7 (``bench/results/2026-11-22_h200_s7/``) ran this probe at ``afbafac``, which also held the
held-weight walk and the unpipelined gmerge forward as probe kernels; both are in the package now.

Usage (GPU machine): ``python bench/gpu/variant_probe.py --out DIR [--sections a,b] [--workers N]``;
writes ``DIR/probe.csv`` (one row per problem × variant) and ``DIR/probe.json`` (environment).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

from tiledispatch.native import launch
from tiledispatch.native.accuracy import RELATIVE_ERROR_LIMIT
from tiledispatch.native.bench import (
    BenchSettings,
    _cudnn_call,
    _time_callable,
    environment_manifest,
    measure_ceilings,
    new_setup,
)
from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels import gmerge_pack
from tiledispatch.native.kernels.base import cdiv, tensor_core_constexprs
from tiledispatch.native.kernels.dwroll import _data_args
from tiledispatch.native.kernels.dwroll_tiling import data_geometry, data_rows
from tiledispatch.native.kernels.igemm_fwd import aligned_channels, spatial_args
from tiledispatch.native.kernels.tiles import grouped_tile
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.registry import Registry, build
from tiledispatch.native.rules import DWROLL_DATA_TILES, DWROLL_PREFETCH_DATA_TILES, DWROLL_WEIGHT_TILES
from tiledispatch.native.support import is_supported

DW_PROBLEMS = (
    # dev suite
    "{d}|bf16|2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g96|c96|k96|in56x56|f7x7|s1x1|d1x1|pb3x3|pe3x3",
    # MobileNetV2 / ConvNeXt stride-1 depthwise layers at their training batches
    "{d}|bf16|2d|n128|g192|c192|k192|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n128|g576|c576|k576|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n128|g960|c960|k960|in7x7|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g192|c192|k192|in28x28|f7x7|s1x1|d1x1|pb3x3|pe3x3",
)


def _dw_data_configs(problem: ConvProblem):
    """Every dwroll forward / backward-data tile of ``default`` for the problem's filter height."""
    f_h = problem.filter_size[0]
    for stages, tiles in ((1, DWROLL_DATA_TILES[f_h]), (2, DWROLL_PREFETCH_DATA_TILES[f_h])):
        for bw, bn, warps in tiles:
            yield KernelConfig(problem.direction, problem.dtype, 2, Family.DWROLL, bw, bn, f_h, warps, stages, 1, 1, 1,
                               8, False)


def _dw_weight_configs(problem: ConvProblem):
    f_h = problem.filter_size[0]
    splits = (32, 64, 128, 256) if f_h == 3 else (16, 32, 64, 128)
    for bw, bn, warps in DWROLL_WEIGHT_TILES[f_h]:
        for sk in splits:
            yield KernelConfig(problem.direction, problem.dtype, 2, Family.DWROLL, bw, bn, f_h, warps, 2, 1, sk, 1, 8,
                               False)


#: The PyTorch e2e models' 3x3 depthwise layers at batch 32 (session 9's table) and the dev suite's.
E2E_DW3_PROBLEMS = (
    "{d}|bf16|2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g144|c144|k144|in56x56|f3x3|s2x2|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g192|c192|k192|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g192|c192|k192|in28x28|f3x3|s2x2|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g32|c32|k32|in112x112|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g384|c384|k384|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g576|c576|k576|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g576|c576|k576|in14x14|f3x3|s2x2|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g960|c960|k960|in7x7|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "{d}|bf16|2d|n32|g96|c96|k96|in112x112|f3x3|s2x2|d1x1|pb1x1|pe1x1",
)
#: 3x3 backward-weight tiles (block_w, block_n, warps) of 2 and 4 elements per thread: ``default``'s
#: hold 8 (165 registers, 3 programs per SM on the H200 under Nsight Compute, session 9).
LEAN_WEIGHT_TILES = ((32, 32, 8), (16, 32, 4), (16, 64, 8), (32, 16, 4), (8, 64, 4), (16, 16, 2), (64, 16, 8),
                     (8, 32, 2), (16, 32, 8), (8, 64, 8), (32, 16, 8))


def _dw_weight_lean_configs(problem: ConvProblem):
    """default's 3x3 backward-weight tiles and the lean ones, plain and prefetching, 16-128 splits."""
    for bw, bn, warps in DWROLL_WEIGHT_TILES[3] + LEAN_WEIGHT_TILES:
        for stages in (1, 2):
            for sk in (16, 32, 64, 128):
                yield KernelConfig(problem.direction, problem.dtype, 2, Family.DWROLL, bw, bn, 3, warps, stages, 1,
                                   sk, 1, 8, False)

#: 3x3 forward / backward-data tiles (block_w, block_n, warps) of 4-8 elements per thread on 8 warps (the 2D
#: walk holds its nine weights in registers at <= 8), beside ``default``'s.
LEAN_DATA_TILES = ((64, 16, 8), (32, 32, 8), (16, 64, 8), (64, 32, 8), (32, 64, 8), (128, 16, 8), (16, 32, 4),
                   (32, 16, 4))


def _dw_data_lean_configs(problem: ConvProblem):
    """default's 3x3 forward / backward-data tiles (plain and prefetching) and the lean ones, both ways."""
    tiles = set(DWROLL_DATA_TILES[3]) | set(DWROLL_PREFETCH_DATA_TILES[3]) | set(LEAN_DATA_TILES)
    for bw, bn, warps in sorted(tiles):
        for stages in (1, 2):
            yield KernelConfig(problem.direction, problem.dtype, 2, Family.DWROLL, bw, bn, 3, warps, stages, 1, 1, 1, 8,
                               False)


# ---------------------------------------------------------------------------------------- grouped_fwd
@triton.jit
def _gmerge_fwd_persistent_kernel(
    x_ptr, p_ptr, y_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    MERGE: tl.constexpr, PROGRAMS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
):
    """igemm_fwd's gmerge program (v8, packed weights) as a persistent loop over (group block, tile):
    ``PROGRAMS`` programs take tiles ``pid, pid + PROGRAMS, …``; the tile loop and the (tap, channel
    block) loop are flattened into one pipeline."""
    C_TOTAL, K_TOTAL, CG, KG, GC, GK = aligned_channels(GROUPS, CG, KG, MERGE, 8)
    M = BATCH * OUT_D * OUT_H * OUT_W
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(GK, BLOCK_N)
    tiles_per_block = num_pid_m * num_pid_n
    num_tiles = tiles_per_block * tl.cdiv(GROUPS, MERGE)
    taps = F_D * F_H * F_W
    k_blocks = tl.cdiv(GC, BLOCK_K)
    red = tl.arange(0, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_tiles, PROGRAMS, flatten=True, warp_specialize=WARP_SPECIALIZE):
        group_block = tile // tiles_per_block
        pid_m, pid_n = grouped_tile(tile % tiles_per_block, num_pid_m, num_pid_n, GROUP_M)
        c0 = group_block * GC
        k0 = group_block * GK
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < M
        col_ok = (cols < GK) & (k0 + cols < K_TOTAL)
        ow = rows % OUT_W
        t = rows // OUT_W
        oh = t % OUT_H
        t = t // OUT_H
        od = t % OUT_D
        nb = t // OUT_D
        base_d = od * STR_D - PAD_D
        base_h = oh * STR_H - PAD_H
        base_w = ow * STR_W - PAD_W
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for it in tl.range(0, taps * k_blocks):
            tap = it // k_blocks
            r = (it % k_blocks) * BLOCK_K + red
            r_ok = (r < GC) & (c0 + r < C_TOTAL)
            tw = tap % F_W
            th = (tap // F_W) % F_H
            td = tap // (F_W * F_H)
            i_d = base_d + td * DIL_D
            i_h = base_h + th * DIL_H
            i_w = base_w + tw * DIL_W
            in_ok = row_ok & (i_d >= 0) & (i_d < IN_D) & (i_h >= 0) & (i_h < IN_H) & (i_w >= 0) & (i_w < IN_W)
            x_row = (((nb * IN_D + i_d) * IN_H + i_h) * IN_W + i_w) * C_TOTAL
            a = tl.load(x_ptr + (x_row[:, None] + (c0 + r)[None, :]), mask=in_ok[:, None] & r_ok[None, :], other=0.0)
            b_ptrs = p_ptr + (((group_block * taps + tap) * GC + r) * GK)[:, None] + cols[None, :]
            b = tl.load(b_ptrs, mask=(r < GC)[:, None] & (cols < GK)[None, :], other=0.0)
            acc = tl.dot(a, b, acc)
        y_ptrs = y_ptr + (rows * K_TOTAL)[:, None] + (k0 + cols)[None, :]
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


GROUPED_FWD_PROBLEMS = (  # ResNeXt-50 32x4d's grouped 3x3 layers (dev suite)
    "fwd|bf16|2d|n32|g32|c128|k128|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "fwd|bf16|2d|n32|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "fwd|bf16|2d|n32|g32|c512|k512|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
)
_STAGES = {16: 5, 32: 4, 64: 3, 128: 2}


def _gmerge_configs():
    """gmerge forward v8 tiles beyond default's four: every (M, N, K) tile, 4 warps (8 from 128×64), the
    pipeline depth default uses for the K tile."""
    for bm in (64, 128, 256):
        for bn in (16, 32, 64, 128):
            for bk in (16, 32, 64):
                warps = 8 if bm * bn >= 128 * 64 else 4
                for stages in (_STAGES[bk],):
                    for merge in (2, 4, 8, 16):
                            yield KernelConfig(Direction.FORWARD, DType.BF16, 2, Family.GMERGE, bm, bn, bk, warps,
                                               stages, 8, 1, merge, 8, False)


PERSISTENT_TILES = ((128, 64, 64, 4, 3), (128, 32, 32, 4, 4), (64, 32, 32, 4, 4), (64, 64, 64, 4, 3))


def _packed_weights(problem: ConvProblem, setup, config: KernelConfig) -> list:
    """gmerge's packed block-diagonal operand of each input set's weights (gmerge_pack.py), made once, untimed."""
    workspace = torch.empty(gmerge_pack.workspace_elements(problem, config), dtype=torch.float32, device="cuda")
    program = gmerge_pack.programs(config, backward_data=False)["pack"]
    packs = []
    for w in setup.second:
        launch_pack, packed = gmerge_pack.pack_launch(problem, config, w, workspace.clone())
        program.fn[launch_pack.grid](*launch_pack.args, **program.constexprs, num_warps=program.num_warps)
        packs.append(packed)
    return packs


def _persistent_call(problem: ConvProblem, setup, tile, merge: int, programs: int, warp_specialize: bool):
    bm, bn, bk, warps, stages = tile
    config = KernelConfig(Direction.FORWARD, DType.BF16, 2, Family.GMERGE, bm, bn, bk, warps, stages, 8, 1, merge, 8,
                          False)
    packs = _packed_weights(problem, setup, config)
    sizes = (problem.batch, problem.groups, problem.c_per_group, problem.k_per_group, *spatial_args(problem))

    def call(i):
        _gmerge_fwd_persistent_kernel[(programs,)](
            setup.first[i], packs[i], setup.out[i], *sizes, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
            MERGE=merge, PROGRAMS=programs, WARP_SPECIALIZE=warp_specialize, num_warps=warps, num_stages=stages)
    return call, config


def _specialised(fn, mode: str):
    """``fn`` as Triton's launcher specialises it (``full``: integer arguments equal to 1 become constants,
    multiples of 16 carry a divisibility hint), with only the 1s (``ones``), or not at all (``none``: the
    registry's binaries, one per config for every problem size)."""
    if mode == "full":
        return fn
    constexprs = {fn.arg_names[i] for i in fn.constexprs}
    ints = [n for n in fn.arg_names if n not in constexprs and not n.endswith("_ptr")]
    if mode == "ones":
        return triton.jit(fn.fn, do_not_specialize_on_alignment=ints)
    if mode in _KEEP:  # only the named arguments specialised (each is 1 or 0 on the probe's problems)
        return triton.jit(fn.fn, do_not_specialize=[n for n in ints if n not in _KEEP[mode]])
    return triton.jit(fn.fn, do_not_specialize=ints)


_DEPTH = ("IN_D", "OUT_D", "F_D", "STR_D", "DIL_D", "PAD_D")
#: ``depth``: what a 2D config knows; ``unit``: that and unit height/width strides and dilations.
_KEEP = {"depth": _DEPTH, "unit": _DEPTH + ("STR_H", "STR_W", "DIL_H", "DIL_W")}


def _dwroll_jit_call(problem: ConvProblem, setup, block_w: int, block_n: int, warps: int, kernel):
    """The registry's plain dwroll walk (tap-major weights prepared once per input set, untimed)."""
    from tiledispatch.native.kernels.direct import _weights_tap_major_kernel

    geo = data_geometry(problem)
    f_h = geo["filter"][1]
    probe = KernelConfig(problem.direction, problem.dtype, 2, Family.DWROLL, block_w, block_n, f_h, warps, 1, 1, 1,
                         1, 8, False)
    rows = data_rows(problem, probe, geo)
    out_d, out_h, out_w = geo["out"]
    grid = (cdiv(problem.in_channels, block_n) * cdiv(out_w, block_w) * cdiv(out_h, rows) * problem.batch * out_d,)
    args = (*_data_args(problem, geo), rows)
    wts = []
    for w in setup.second:
        wt = torch.empty(problem.weight_elements + block_n, dtype=torch.float32, device="cuda")
        _weights_tap_major_kernel[(cdiv(problem.weight_elements, 1024),)](
            w, wt, problem.out_channels, problem.filter_taps, BLOCK=1024,
            FLIP=problem.direction is Direction.BACKWARD_DATA)
        wts.append(wt)

    def call(i):
        kernel[grid](setup.first[i], wts[i], setup.out[i], *args, BLOCK_W=block_w, BLOCK_N=block_n, F_H=f_h,
                     INDEX64=False, num_warps=warps)
    return call


def _gmerge_call(problem: ConvProblem, setup, config: KernelConfig, kernel):
    """igemm_fwd's program for a gmerge config, compiled as ``kernel`` (a :func:`_specialised` copy), on
    weights packed once per input set (the pack launch untimed)."""
    packs = _packed_weights(problem, setup, config)
    sizes = (problem.batch, problem.groups, problem.c_per_group, problem.k_per_group, *spatial_args(problem))
    m = problem.batch * math.prod(problem.output_size)
    grid = (cdiv(m, config.block_m) * cdiv(config.merge * problem.k_per_group, config.block_n),
            cdiv(problem.groups, config.merge))

    def call(i):
        kernel[grid](setup.first[i], packs[i], setup.out[i], *sizes, **tensor_core_constexprs(config),
                     num_warps=config.num_warps, num_stages=config.num_stages)
    return call


# ---------------------------------------------------------------------------------------------- driver
class Probe:
    def __init__(self, out: Path, workers: int, cache_dir: Path):
        self.out = out
        self.workers = workers
        self.cache_dir = cache_dir
        self.settings = BenchSettings(cache_dir=str(cache_dir), event_timing=False)
        self.ceilings = measure_ceilings()
        self.rows: list[dict] = []
        out.mkdir(parents=True, exist_ok=True)
        self.registry: Registry | None = None

    def compile(self, configs: list[KernelConfig]) -> None:
        started = time.time()
        results = build(configs, arch="sm_90", cache_dir=self.cache_dir, workers=self.workers, rule_set="probe")
        failed = [r.kernel for r in results if not r.usable]
        print(f"compiled {len(results)} kernels in {time.time() - started:.1f}s, {len(failed)} unusable", flush=True)
        self.registry = Registry.load(self.cache_dir, "sm_90")

    def measure(self, section: str, problem: ConvProblem, setup, variant: str, call) -> dict:
        limit = RELATIVE_ERROR_LIMIT[problem.dtype]
        row = {"section": section, "problem": problem.key, "variant": variant, "status": "ok", "error": math.nan,
               "us": math.nan, "bound_us": self.ceilings.bound_us(problem), "message": ""}
        try:
            setup.out[0].fill_(float("nan"))
            result = call(0)
            torch.cuda.synchronize()
            if variant.startswith("cudnn"):
                from tiledispatch.native.bench import _grouped_result

                check = _grouped_result(problem, result)
            else:
                check = setup.out[0]
            row["error"] = setup.relative_error(check)
            if not row["error"] <= limit:
                row["status"] = "wrong"
            else:
                row["us"] = _time_callable(call, setup.sets, self.settings, 50.0)[2]
        except Exception as exc:  # a failing variant is recorded; the probe goes on
            row["status"] = "error"
            row["message"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        self.rows.append(row)
        print(f"  {variant:70s} {row['status']:6s} {row['us']:9.2f} us  err {row['error']:.2e} {row['message'][:80]}",
              flush=True)
        self.flush()
        return row

    def config_call(self, problem, setup, config):
        loader = self.registry.loader() if self.registry and config.name in self.registry.entries else None
        backend = "compiled" if loader else "jit"

        def call(i):
            return launch.run(problem, config, setup.first[i], setup.second[i], setup.out[i], backend=backend,
                              loader=loader, check_support=False)
        return call

    def cudnn(self, section, problem, setup):
        torch.backends.cudnn.benchmark = True
        self.measure(section, problem, setup, "cudnn", _cudnn_call(problem, setup))

    def flush(self) -> None:
        path = self.out / "probe.csv"
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(self.rows[0]))
            writer.writeheader()
            writer.writerows(self.rows)
        tmp.replace(path)

    def sweep(self, section: str, problems: list[ConvProblem], configs_of) -> None:
        """cuDNN and every config ``configs_of(problem)`` yields (compiled first, in parallel) on each problem."""
        self.compile(sorted({c for p in problems for c in configs_of(p)}, key=lambda c: c.name))
        for problem in problems:
            print(problem.key, flush=True)
            setup = new_setup(problem, self.settings)
            self.cudnn(section, problem, setup)
            for config in configs_of(problem):
                if is_supported(problem, config):
                    self.measure(section, problem, setup, config.name, self.config_call(problem, setup, config))
            del setup

    # sections
    def dw_data(self) -> None:
        problems = [ConvProblem.from_key(k.format(d=d)) for d in ("fwd", "bwd_data") for k in DW_PROBLEMS]
        self.sweep("dw_data", problems, _dw_data_configs)

    def dw_weight(self) -> None:
        self.sweep("dw_weight", [ConvProblem.from_key(k.format(d="bwd_weight")) for k in DW_PROBLEMS],
                   _dw_weight_configs)

    def dw_weight_lean(self) -> None:
        self.sweep("dw_weight_lean", [ConvProblem.from_key(k.format(d="bwd_weight")) for k in E2E_DW3_PROBLEMS],
                   _dw_weight_lean_configs)

    def dw_data_lean(self) -> None:
        problems = [ConvProblem.from_key(k.format(d=d)) for d in ("fwd", "bwd_data") for k in E2E_DW3_PROBLEMS]
        self.sweep("dw_data_lean", problems, _dw_data_lean_configs)

    def grouped_fwd(self) -> None:
        problems = [ConvProblem.from_key(k) for k in GROUPED_FWD_PROBLEMS]
        configs = sorted(set(_gmerge_configs()), key=lambda c: c.name)
        self.compile(configs)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        for problem in problems:
            print(problem.key, flush=True)
            setup = new_setup(problem, self.settings)
            self.cudnn("grouped_fwd", problem, setup)
            for config in configs:
                if is_supported(problem, config) and config.name in self.registry.entries:
                    self.measure("grouped_fwd", problem, setup, config.name, self.config_call(problem, setup, config))
            for tile in PERSISTENT_TILES:
                for merge in (4, 8, 16):
                    for per_sm in (1, 2):
                        for ws in ((False, True) if tile == PERSISTENT_TILES[0] and merge == 8 else (False,)):
                            name = (f"persistent_{tile[0]}x{tile[1]}x{tile[2]}_w{tile[3]}_s{tile[4]}_mg{merge}"
                                    f"_p{per_sm}{'_ws' if ws else ''}")
                            try:
                                call, config = _persistent_call(problem, setup, tile, merge, sms * per_sm, ws)
                            except Exception as exc:
                                print(f"  {name}: {exc}", flush=True)
                                continue
                            if is_supported(problem, config):
                                self.measure("grouped_fwd", problem, setup, name, call)
            del setup

    def specialize(self) -> None:
        from tiledispatch.native.kernels.dwroll import _dwroll_data_kernel
        from tiledispatch.native.kernels.igemm_fwd import _igemm_fwd_kernel

        modes = ("full", "depth", "unit", "none")
        gmerge = {m: _specialised(_igemm_fwd_kernel, m) for m in modes}
        rolling = {m: _specialised(_dwroll_data_kernel, m) for m in modes}
        for key in GROUPED_FWD_PROBLEMS:
            problem = ConvProblem.from_key(key)
            print(problem.key, flush=True)
            setup = new_setup(problem, self.settings)
            self.cudnn("specialize", problem, setup)
            for (bm, bn, bk, warps, stages), merge in (((128, 32, 32, 4, 1), 8), ((128, 32, 32, 4, 1), 4),
                                                        ((128, 32, 32, 4, 1), 2), ((128, 64, 64, 4, 3), 8)):
                config = KernelConfig(Direction.FORWARD, DType.BF16, 2, Family.GMERGE, bm, bn, bk, warps, stages, 8,
                                      1, merge, 8, False)
                if is_supported(problem, config):
                    for mode in modes:
                        self.measure("specialize", problem, setup, f"{config.name}_{mode}",
                                     _gmerge_call(problem, setup, config, gmerge[mode]))
            del setup
        for key in (DW_PROBLEMS[0], DW_PROBLEMS[3]):
            for direction in ("fwd", "bwd_data"):
                problem = ConvProblem.from_key(key.format(d=direction))
                print(problem.key, flush=True)
                setup = new_setup(problem, self.settings)
                self.cudnn("specialize", problem, setup)
                for mode in modes:
                    for bw, bn, warps in ((64, 32, 4), (32, 32, 4), (16, 128, 4)):
                        self.measure("specialize", problem, setup, f"dwroll_{bw}x{bn}_w{warps}_{mode}",
                                     _dwroll_jit_call(problem, setup, bw, bn, warps, rolling[mode]))
                del setup


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--sections", default="dw_weight,dw_data,grouped_fwd,specialize")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/probe_registry"))
    args = parser.parse_args(argv)
    probe = Probe(args.out, args.workers, args.cache_dir)
    env = environment_manifest(probe.settings, probe.ceilings)
    (args.out / "probe.json").write_text(json.dumps(env, indent=2, default=str))
    for section in args.sections.split(","):
        started = time.time()
        print(f"== {section}", flush=True)
        getattr(probe, section)()
        print(f"== {section} done in {time.time() - started:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
