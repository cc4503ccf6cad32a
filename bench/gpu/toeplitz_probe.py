"""Probe: depthwise convolution on tensor cores through a per-channel Toeplitz (banded) matrix.

Why: the CUDA-core depthwise kernels (dwrun) are instruction-issue bound (7x7 forward: 424 SASS instructions for 196
FFMA a step, bench/results/2026-11-28_h200_s30); their fp32 FMA bound alone is 14 us on the dev suite's n32 c96 56x56
7x7 layer. A depthwise layer restricted to one channel g and one output tile of OH_T x OW_T pixels is a linear map
from the input tile (IH_T x IW_T pixels, IH_T = (OH_T - 1) s_h + (F_H - 1) d_h + 1) to the output tile:

    Y[g, m, p] = sum_q X[g, m, q] * T[g, q, p],   T[g, q, p] = W[g, t_h, t_w] where q = p*s + t*d (per axis), else 0

with m ranging over any set of output tiles (images and tile positions) that share the geometry, so one batched
tensor-core GEMM per channel block (batch = GB channels, M = BM tiles, K = the input tile's pixels padded to a power
of 2, N = OH_T*OW_T) computes GB*BM output tiles. T is built once per program from the 49 (7x7) weights a channel.
Useful MACs are F_H*F_W / K of those issued (7x7, tile 2x8: 49/128).

Run on the GPU machine: python bench/gpu/toeplitz_probe.py --out DIR. Writes probe.csv (every config and cuDNN, one
run) and prints the best config a problem.
"""

from __future__ import annotations

import argparse
import csv
import functools
import itertools
import json
import os
import time

import torch
import triton
import triton.language as tl


@triton.jit
def _toeplitz_fwd(x_ptr, w_ptr, y_ptr, H, W, G, OH, OW, tiles_h, tiles_w, num_tiles, pad_h, pad_w,
                  blocks_per_program,
                  FH: tl.constexpr, FW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                  DH: tl.constexpr, DW: tl.constexpr, OH_T: tl.constexpr, OW_T: tl.constexpr,
                  IH_T: tl.constexpr, IW_T: tl.constexpr, KP: tl.constexpr, GB: tl.constexpr, BM: tl.constexpr):
    NP: tl.constexpr = OH_T * OW_T
    pid_m = tl.program_id(0)
    g = tl.program_id(1) * GB + tl.arange(0, GB)
    q = tl.arange(0, KP)
    q_row = q // IW_T
    q_col = q % IW_T
    p = tl.arange(0, NP)
    p_row = p // OW_T
    p_col = p % OW_T
    dy = q_row[:, None] - p_row[None, :] * SH
    dx = q_col[:, None] - p_col[None, :] * SW
    valid = (dy >= 0) & (dx >= 0) & (dy % DH == 0) & (dx % DW == 0) & (dy < FH * DH) & (dx < FW * DW)
    valid = valid & (q < IH_T * IW_T)[:, None]
    tap = tl.where(valid, (dy // DH) * FW + dx // DW, 0)
    toeplitz = tl.load(w_ptr + g[:, None, None] * (FH * FW) + tap[None, :, :], mask=valid[None, :, :], other=0.0)

    for block in range(blocks_per_program):
        t = (pid_m * blocks_per_program + block) * BM + tl.arange(0, BM)
        t_ok = t < num_tiles
        tile_w = t % tiles_w
        rest = t // tiles_w
        tile_h = rest % tiles_h
        image = rest // tiles_h
        ih = (tile_h * (OH_T * SH) - pad_h)[:, None] + q_row[None, :]
        iw = (tile_w * (OW_T * SW) - pad_w)[:, None] + q_col[None, :]
        a_ok = t_ok[:, None] & (q < IH_T * IW_T)[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        pixel = (image[:, None] * H + ih) * W + iw
        a = tl.load(x_ptr + pixel[None, :, :] * G + g[:, None, None], mask=a_ok[None, :, :], other=0.0)
        acc = tl.dot(a, toeplitz)
        oh = (tile_h * OH_T)[:, None] + p_row[None, :]
        ow = (tile_w * OW_T)[:, None] + p_col[None, :]
        o_ok = t_ok[:, None] & (oh < OH) & (ow < OW)
        out_pixel = (image[:, None] * OH + oh) * OW + ow
        tl.store(y_ptr + out_pixel[None, :, :] * G + g[:, None, None], acc.to(y_ptr.dtype.element_ty),
                 mask=o_ok[None, :, :])


def toeplitz_forward(x, w, pad, stride, dilation, tile, gb, bm, blocks_per_program, num_warps, y=None):
    """x: NHWC (C = G), w: [G, FH, FW]; depthwise forward."""
    n, h, wd, g = x.shape
    fh, fw = w.shape[1], w.shape[2]
    oh = (h + 2 * pad[0] - dilation[0] * (fh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - dilation[1] * (fw - 1) - 1) // stride[1] + 1
    oh_t, ow_t = tile
    ih_t = (oh_t - 1) * stride[0] + (fh - 1) * dilation[0] + 1
    iw_t = (ow_t - 1) * stride[1] + (fw - 1) * dilation[1] + 1
    kp = max(16, triton.next_power_of_2(ih_t * iw_t))
    tiles_h, tiles_w = triton.cdiv(oh, oh_t), triton.cdiv(ow, ow_t)
    num_tiles = n * tiles_h * tiles_w
    if y is None:
        y = torch.empty((n, oh, ow, g), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(num_tiles, bm * blocks_per_program), g // gb)
    _toeplitz_fwd[grid](x, w, y, h, wd, g, oh, ow, tiles_h, tiles_w, num_tiles, pad[0], pad[1], blocks_per_program,
                        FH=fh, FW=fw, SH=stride[0], SW=stride[1], DH=dilation[0], DW=dilation[1], OH_T=oh_t, OW_T=ow_t,
                        IH_T=ih_t, IW_T=iw_t, KP=kp, GB=gb, BM=bm, num_warps=num_warps)
    return y


PROBLEMS = [
    # name, n, c, h, w, f, stride, pad
    ("dw7x7_c96_56", 32, 96, 56, 56, 7, 1, 3),
    ("dw3x3_c144_56", 32, 144, 56, 56, 3, 1, 1),
    ("dw5x5_c240_14", 32, 240, 14, 14, 5, 1, 2),
    ("dw3x3_c192_28_s2", 32, 192, 56, 56, 3, 2, 1),
    ("dw7x7_c384_14", 32, 384, 14, 14, 7, 1, 3),
]


def reference(x, w, pad, stride):
    xr = x.permute(0, 3, 1, 2).double()
    wr = w.double()[:, None]
    return torch.nn.functional.conv2d(xr, wr, stride=stride, padding=pad, groups=x.shape[3]).permute(0, 2, 3, 1)


def bench_us(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=float("inf"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cudnn.benchmark = True
    rows = []
    configs = list(itertools.product([(2, 8), (4, 4), (4, 8), (2, 16)], [8, 16], [16, 32], [4], [4, 8]))
    for name, n, c, h, wd, f, s, pad in PROBLEMS:
        x = torch.randn(n, h, wd, c, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(c, f, f, device="cuda", dtype=torch.bfloat16)
        ref = reference(x, w, (pad, pad), (s, s))
        x_cl = x.permute(0, 3, 1, 2)
        w4 = w[:, None]
        cudnn = bench_us(functools.partial(torch.nn.functional.conv2d, x_cl, w4, stride=s, padding=pad, groups=c))
        bytes_moved = (x.numel() + ref.numel()) * 2
        bound = bytes_moved / 4.8e12 * 1e6
        rows.append(dict(problem=name, kernel="cudnn", us=cudnn, err=0.0, bound_us=bound))
        best = None
        for tile, gb, bm, bpp, nw in configs:
            if time.time() > args.deadline:
                break
            if ((tile[0] - 1) * s + f) * ((tile[1] - 1) * s + f) > 256 or c % gb:
                continue
            try:
                y = torch.full_like(ref, float("nan"), dtype=torch.bfloat16)
                toeplitz_forward(x, w, (pad, pad), (s, s), (1, 1), tile, gb, bm, bpp, nw, y=y)
                err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
                run = functools.partial(toeplitz_forward, x, w, (pad, pad), (s, s), (1, 1), tile, gb, bm, bpp, nw, y=y)
                us = bench_us(run)
            except Exception as exc:  # noqa: BLE001 - a probe records the failure and goes on
                rows.append(dict(problem=name, kernel=f"t{tile[0]}x{tile[1]}_g{gb}_m{bm}_b{bpp}_w{nw}", us=-1,
                                 err=str(exc)[:200], bound_us=bound))
                continue
            label = f"t{tile[0]}x{tile[1]}_g{gb}_m{bm}_b{bpp}_w{nw}"
            rows.append(dict(problem=name, kernel=label, us=us, err=err, bound_us=bound))
            if err < 1e-2 and (best is None or us < best[1]):
                best = (label, us)
        print(f"{name}: cudnn {cudnn:.1f} us, bound {bound:.1f}, best {best}", flush=True)
    with open(os.path.join(args.out, "probe.csv"), "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with open(os.path.join(args.out, "env.json"), "w") as fh:
        json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                       cudnn=torch.backends.cudnn.version()), fh)


if __name__ == "__main__":
    main()
