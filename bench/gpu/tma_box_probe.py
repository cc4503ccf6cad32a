"""Probe: stride-1 tensor-core convolution fed by 5D TMA boxes with out-of-bounds zero fill, beside the
registry's best kernel of session 7's dev suite and cuDNN, in one run on one GPU.

The kernel here (``_box_conv_kernel``) tiles GEMM M as a ``BOX_H × BOX_W`` box of output positions of
one ``(n, o_d)`` plane and reads, for every (filter tap, channel block), the input box shifted by the
tap straight from the unpadded NDHWGC tensor: the TMA unit fills coordinates outside the tensor
(negative ones included) with zeros, so there is no padded copy (the ``tma`` family's first design),
no per-element address or mask, and backward-data is the same loop over dY with the offsets negated
and W read transposed (no flipped copy). Program = one tile, or persistent programs that walk tiles
``pid, pid + programs, …`` with the tile and reduction loops flattened into one pipeline.

Timing and check as ``variant_probe.py`` (rotated inputs over 2× L2, CUDA-graph replay, median of 5;
float64 reference, NaN-poisoned output). Usage (GPU machine):
``python bench/gpu/tma_box_probe.py --out DIR``; writes ``DIR/probe.csv`` and ``DIR/probe.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from variant_probe import Probe  # noqa: E402

from tiledispatch.native.bench import environment_manifest, new_setup  # noqa: E402
from tiledispatch.native.configs import parse_kernel_name  # noqa: E402
from tiledispatch.native.kernels.base import as3d  # noqa: E402
from tiledispatch.native.problem import ConvProblem, Direction  # noqa: E402

_INTS = ("BATCH", "GROUPS", "RG", "OG", "A_D", "A_H", "A_W", "OUT_D", "OUT_H", "OUT_W", "F_D", "F_H", "F_W",
         "DIL_D", "DIL_H", "DIL_W", "OFF_D", "OFF_H", "OFF_W")


@triton.jit(do_not_specialize=_INTS)
def _box_conv_kernel(
    a_ptr, b_ptr, out_ptr,
    BATCH, GROUPS, RG, OG, A_D, A_H, A_W, OUT_D, OUT_H, OUT_W, F_D, F_H, F_W,
    DIL_D, DIL_H, DIL_W, OFF_D, OFF_H, OFF_W,
    BOX_H: tl.constexpr, BOX_W: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BACKWARD_DATA: tl.constexpr,
):
    """``OUT[n,o,g·OG+j] = Σ_tap Σ_r A[n, o ± tap·dil + OFF, g·RG + r] · B`` (forward: +, B = W[g·OG+j, tap, r];
    backward-data: −, B = W[g·RG+r, tap, j])."""
    BLOCK_M: tl.constexpr = BOX_H * BOX_W
    R_TOTAL = GROUPS * RG
    O_TOTAL = GROUPS * OG
    taps = F_D * F_H * F_W
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[BATCH, A_D, A_H, A_W, R_TOTAL],
        strides=[A_D * A_H * A_W * R_TOTAL, A_H * A_W * R_TOTAL, A_W * R_TOTAL, R_TOTAL, 1],
        block_shape=[1, 1, BOX_H, BOX_W, BLOCK_K])
    if BACKWARD_DATA:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[R_TOTAL, taps * OG], strides=[taps * OG, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[O_TOTAL, taps * RG], strides=[taps * RG, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    tiles_n = tl.cdiv(OG, BLOCK_N)
    tiles_w = tl.cdiv(OUT_W, BOX_W)
    tiles_h = tl.cdiv(OUT_H, BOX_H)
    tiles = BATCH * OUT_D * tiles_h * tiles_w * GROUPS * tiles_n
    k_blocks = RG // BLOCK_K
    steps = taps * k_blocks
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_n = tile % tiles_n
        t = tile // tiles_n
        g = t % GROUPS
        t = t // GROUPS
        pw = t % tiles_w
        t = t // tiles_w
        ph = t % tiles_h
        t = t // tiles_h
        od = t % OUT_D
        n = t // OUT_D
        oh0 = ph * BOX_H
        ow0 = pw * BOX_W
        n0 = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for it in range(0, steps):
            tap = it // k_blocks
            r0 = (it - tap * k_blocks) * BLOCK_K
            tw = tap % F_W
            th = (tap // F_W) % F_H
            td = tap // (F_W * F_H)
            if BACKWARD_DATA:
                a = a_desc.load([n, od + OFF_D - td * DIL_D, oh0 + OFF_H - th * DIL_H, ow0 + OFF_W - tw * DIL_W,
                                 g * RG + r0])
                b = b_desc.load([g * RG + r0, tap * OG + n0])
                acc = tl.dot(tl.reshape(a, (BLOCK_M, BLOCK_K)), b, acc)
            else:
                a = a_desc.load([n, od + OFF_D + td * DIL_D, oh0 + OFF_H + th * DIL_H, ow0 + OFF_W + tw * DIL_W,
                                 g * RG + r0])
                b = b_desc.load([g * OG + n0, tap * RG + r0])
                acc = tl.dot(tl.reshape(a, (BLOCK_M, BLOCK_K)), b.T, acc)
        rows = tl.arange(0, BLOCK_M)
        oh = oh0 + rows // BOX_W
        ow = ow0 + rows % BOX_W
        cols = n0 + tl.arange(0, BLOCK_N)
        out_row = ((n * OUT_D + od) * OUT_H + oh) * OUT_W + ow
        mask = ((oh < OUT_H) & (ow < OUT_W))[:, None] & (cols < OG)[None, :]
        tl.store(out_ptr + (out_row * O_TOTAL)[:, None] + (g * OG + cols)[None, :],
                 acc.to(out_ptr.dtype.element_ty), mask=mask)


#: (box_h, box_w, block_n, block_k, warps, stages)
TILES = (
    (8, 16, 128, 64, 8, 3), (4, 32, 128, 64, 8, 3), (16, 8, 128, 64, 8, 3),
    (8, 16, 128, 64, 4, 3), (4, 32, 128, 64, 4, 3),
    (8, 16, 256, 64, 8, 3), (4, 32, 256, 64, 8, 3),
    (8, 8, 128, 64, 4, 4), (4, 16, 128, 64, 4, 4), (2, 32, 128, 64, 4, 4),
    (8, 16, 64, 64, 4, 4), (4, 32, 64, 64, 4, 4),
    (8, 16, 128, 32, 8, 4), (4, 32, 128, 32, 8, 4), (8, 8, 64, 32, 4, 4), (4, 16, 64, 32, 4, 4),
    (8, 16, 64, 32, 4, 4),
)

PROBLEMS = (
    # dev suite, stride 1, C/G and K/G multiples of 32, with session 7's best registry kernel
    ("2d|n32|g1|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "igemm_128x128x64_w8_s3_gm8_sk1_mg1_v8_i32", "igemm_128x256x64_w8_s3_gm8_sk1_mg1_v8_i32"),
    ("2d|n1|g1|c256|k256|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "igemm_64x32x64_w4_s3_gm8_sk1_mg1_v8_i32", "igemm_64x32x64_w4_s3_gm8_sk1_mg1_v8_i32"),
    ("2d|n32|g2|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "igemm_128x128x64_w8_s3_gm8_sk1_mg1_v8_i32", "igemm_64x128x64_w4_s3_gm8_sk1_mg1_v8_i32"),
    ("2d|n32|g32|c1024|k1024|in7x7|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "igemm_128x32x32_w4_s4_gm8_sk1_mg1_v8_i32", "igemm_128x32x32_w4_s4_gm8_sk1_mg1_v8_i32"),
    ("2d|n8|g8|c256|k256|in64x64|f3x3|s1x1|d2x2|pb2x2|pe2x2",
     "igemm_128x32x32_w4_s1_gm8_sk1_mg1_v8_i32", "igemm_128x32x32_w4_s4_gm8_sk1_mg1_v8_i32"),
    ("3d|n8|g1|c64|k64|in16x56x56|f3x3x3|s1x1x1|d1x1x1|pb1x1x1|pe1x1x1",
     "igemm_128x64x64_w4_s3_gm8_sk1_mg1_v8_i32", "igemm_128x64x32_w4_s4_gm8_sk1_mg1_v8_i32"),
    ("3d|n8|g4|c128|k128|in8x28x28|f3x3x3|s1x1x1|d1x1x1|pb1x1x1|pe1x1x1",
     "igemm_128x32x32_w4_s4_gm8_sk1_mg1_v8_i32", "igemm_128x32x32_w4_s4_gm8_sk1_mg1_v8_i32"),
    # ResNet-50 3x3 layers at batch 32 (no registry reference: cuDNN only)
    ("2d|n32|g1|c64|k64|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1", "", ""),
    ("2d|n32|g1|c512|k512|in7x7|f3x3|s1x1|d1x1|pb1x1|pe1x1", "", ""),
)


def _geometry(problem: ConvProblem) -> dict:
    """The kernel's integer arguments (3D view) for forward or backward-data."""
    forward = problem.direction is Direction.FORWARD
    dil = as3d(problem.dilation, 1)
    pad = as3d(problem.pad_begin, 0)
    if forward:
        a_size, out_size, rg, og, off = problem.input_size, problem.output_size, problem.c_per_group, \
            problem.k_per_group, tuple(-p for p in pad)
    else:
        a_size, out_size, rg, og, off = problem.output_size, problem.input_size, problem.k_per_group, \
            problem.c_per_group, pad
    return dict(BATCH=problem.batch, GROUPS=problem.groups, RG=rg, OG=og, **dict(zip(("A_D", "A_H", "A_W"),
                as3d(a_size, 1))), **dict(zip(("OUT_D", "OUT_H", "OUT_W"), as3d(out_size, 1))),
                **dict(zip(("F_D", "F_H", "F_W"), as3d(problem.filter_size, 1))),
                **dict(zip(("DIL_D", "DIL_H", "DIL_W"), dil)), **dict(zip(("OFF_D", "OFF_H", "OFF_W"), off)))


def _tiles(problem: ConvProblem, geo: dict, tile) -> int:
    box_h, box_w, block_n = tile[:3]
    return (geo["BATCH"] * geo["OUT_D"] * math.ceil(geo["OUT_H"] / box_h) * math.ceil(geo["OUT_W"] / box_w)
            * geo["GROUPS"] * math.ceil(geo["OG"] / block_n))


def _box_call(setup, geo: dict, tile, programs: int, backward: bool):
    box_h, box_w, block_n, block_k, warps, stages = tile

    def call(i):
        _box_conv_kernel[(programs,)](
            setup.first[i], setup.second[i], setup.out[i], *geo.values(), BOX_H=box_h, BOX_W=box_w,
            BLOCK_N=block_n, BLOCK_K=block_k, BACKWARD_DATA=backward, num_warps=warps, num_stages=stages)
        return setup.out[i]
    return call


def box_section(probe: Probe, problems) -> None:
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    registry = []
    for key, fwd_best, bwd_best in problems:
        for direction, best in (("fwd", fwd_best), ("bwd_data", bwd_best)):
            if best:
                ndim = 3 if key.startswith("3d") else 2
                registry.append(parse_kernel_name(f"gconv_{direction}_bf16_{ndim}d_{best}"))
    probe.compile(sorted(set(registry), key=lambda c: c.name))
    for key, fwd_best, bwd_best in problems:
        for direction, best in (("fwd", fwd_best), ("bwd_data", bwd_best)):
            problem = ConvProblem.from_key(f"{direction}|bf16|{key}")
            print(problem.key, flush=True)
            setup = new_setup(problem, probe.settings)
            probe.cudnn("tma_box", problem, setup)
            if best:
                ndim = problem.ndim
                config = parse_kernel_name(f"gconv_{direction}_bf16_{ndim}d_{best}")
                probe.measure("tma_box", problem, setup, config.name, probe.config_call(problem, setup, config))
            geo = _geometry(problem)
            backward = problem.direction is Direction.BACKWARD_DATA
            for tile in TILES:
                box_h, box_w, block_n, block_k, warps, stages = tile
                if geo["RG"] % block_k or block_n > 2 * max(geo["OG"], 64) or box_w > 2 * max(geo["OUT_W"], 8):
                    continue
                tiles = _tiles(problem, geo, tile)
                for programs in sorted({tiles, min(tiles, sms), min(tiles, 2 * sms)}):
                    variant = (f"box{box_h}x{box_w}_n{block_n}_k{block_k}_w{warps}_s{stages}"
                               f"_p{'all' if programs == tiles else programs}")
                    probe.measure("tma_box", problem, setup, variant, _box_call(setup, geo, tile, programs, backward))
            del setup
            torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/probe_registry"))
    parser.add_argument("--problems", type=int, default=len(PROBLEMS), help="only the first N problems")
    args = parser.parse_args(argv)
    probe = Probe(args.out, args.workers, args.cache_dir)
    (args.out / "probe.json").write_text(json.dumps(environment_manifest(probe.settings, probe.ceilings), indent=2,
                                                    default=str))
    started = time.time()
    box_section(probe, PROBLEMS[: args.problems])
    print(f"== tma_box done in {time.time() - started:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
