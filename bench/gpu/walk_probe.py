"""Row-walk tensor-core kernel for grouped 2D convolutions of small C/G, timed beside the registry's best
kernels and cuDNN in one run on one GPU: a probe for deciding whether to build it as a family.

Why: the registry's gmerge / igemm programs (``native/kernels/igemm_fwd.py``) load one activation tile per
(filter tap, output tile): every activation row is read 9 times for a 3×3 filter (L1 hits only when the
program is unpipelined), with the row's (n, h, w) decoded per pixel by division. On ResNeXt's grouped 3×3
layers they run at 0.15–0.25 of the roofline, as cuDNN does.

The walk (``_gwalk_kernel``): a program owns ``ROWS`` output rows × ``TILE_W`` output columns of ``IMAGES``
images (GEMM M = IMAGES·TILE_W rows: (image, column)), one block of ``MERGE`` groups (GEMM N = MERGE·K/G
output channels, reduction MERGE·C/G input channels per tap, block-diagonal packed weights as gmerge's
``P[gb, tap, r, j]``). It walks the ``(ROWS − 1)·stride + (F_H − 1)·dilation + 1`` input rows once, top to
bottom; for each input row and horizontal tap ``s`` it loads the activation tile ``A[m, r] = X[n, ih,
ow·stride − pad + s·dil, g0·C/G + r]`` once and adds ``A · P[tap(rr, s)]`` to the accumulator of every
output row ``i`` the row feeds (``ih = oh0·stride − pad + i·stride + rr·dil``). All loops are static, so
each load's address is a per-program base plus a per-column vector hoisted out of the walk: no division,
one load per (input row, s) instead of one per (output row, tap).

Backward-data (stride 1) is the same walk over dY with the packed operand transposed and flipped
(``FLIP``, pad ``dil·(F − 1) − pad``).

Usage (GPU machine): ``python bench/gpu/walk_probe.py --out DIR``; writes ``DIR/walk.csv`` and
``DIR/walk.json`` (environment). Locally, ``TRITON_INTERPRET=1 python bench/gpu/walk_probe.py --check``
compares the walk with PyTorch's convolution on small CPU problems.
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

from tiledispatch.native.kernels.gmerge_pack import _pack_kernel


@triton.jit
def _gwalk_kernel(
    x_ptr, p_ptr, y_ptr,
    BATCH, C_TOTAL, K_TOTAL, GC, GK, IN_H, IN_W, OUT_H, OUT_W, PAD_H, PAD_W,
    F_H: tl.constexpr, F_W: tl.constexpr, STR_H: tl.constexpr, STR_W: tl.constexpr, DIL_H: tl.constexpr,
    DIL_W: tl.constexpr, FLIP: tl.constexpr,
    TILE_W: tl.constexpr, IMAGES: tl.constexpr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
    HOLD_W: tl.constexpr,
):
    """Y[n, oh, ow, k0 + j] = Σ_{rr, s} Σ_r X[n, oh·S − P + rr·D, ow·S − P + s·D, c0 + r] · P[gb, tap, r, j];
    C_TOTAL / K_TOTAL: the input / output tensors' channel counts; GC / GK: merged reduction / output
    channels of a group block (c0 = gb·GC, k0 = gb·GK)."""
    pid = tl.program_id(0)
    group_block = tl.program_id(1)
    w_tiles = tl.cdiv(OUT_W, TILE_W)
    h_tiles = tl.cdiv(OUT_H, ROWS)
    tile_w = pid % w_tiles
    t = pid // w_tiles
    tile_h = t % h_tiles
    tile_n = t // h_tiles

    m = tl.arange(0, IMAGES * TILE_W)
    image = tile_n * IMAGES + m // TILE_W
    ow = tile_w * TILE_W + m % TILE_W
    pix_ok = (image < BATCH) & (ow < OUT_W)
    red = tl.arange(0, BLOCK_K)
    cols = tl.arange(0, BLOCK_N)
    red_ok = red < GC
    col_ok = cols < GK
    c0 = group_block * GC
    k0 = group_block * GK
    taps = F_H * F_W
    p_base = p_ptr + group_block * taps * GC * GK + red[:, None] * GK + cols[None, :]
    p_mask = red_ok[:, None] & col_ok[None, :]
    if HOLD_W:  # the (at most 9) packed tap tiles loaded once, before the walk
        w0 = tl.load(p_base, mask=p_mask, other=0.0)
        w1 = tl.load(p_base + 1 * GC * GK, mask=p_mask & (taps > 1), other=0.0)
        w2 = tl.load(p_base + 2 * GC * GK, mask=p_mask & (taps > 2), other=0.0)
        w3 = tl.load(p_base + 3 * GC * GK, mask=p_mask & (taps > 3), other=0.0)
        w4 = tl.load(p_base + 4 * GC * GK, mask=p_mask & (taps > 4), other=0.0)
        w5 = tl.load(p_base + 5 * GC * GK, mask=p_mask & (taps > 5), other=0.0)
        w6 = tl.load(p_base + 6 * GC * GK, mask=p_mask & (taps > 6), other=0.0)
        w7 = tl.load(p_base + 7 * GC * GK, mask=p_mask & (taps > 7), other=0.0)
        w8 = tl.load(p_base + 8 * GC * GK, mask=p_mask & (taps > 8), other=0.0)

    oh0 = tile_h * ROWS
    ih0 = oh0 * STR_H - PAD_H
    x_pix = x_ptr + (image * IN_H * IN_W) * C_TOTAL + c0  # per GEMM row: the image's first pixel
    iw0 = ow * STR_W - PAD_W

    acc0 = tl.zeros((IMAGES * TILE_W, BLOCK_N), dtype=tl.float32)
    acc1 = tl.zeros((IMAGES * TILE_W, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((IMAGES * TILE_W, BLOCK_N), dtype=tl.float32)
    acc3 = tl.zeros((IMAGES * TILE_W, BLOCK_N), dtype=tl.float32)
    for j in tl.static_range((ROWS - 1) * STR_H + (F_H - 1) * DIL_H + 1):
        ih = ih0 + j
        row_ok = (ih >= 0) & (ih < IN_H)
        for s in tl.static_range(F_W):
            iw = iw0 + s * DIL_W
            ok = pix_ok & (iw >= 0) & (iw < IN_W) & row_ok
            a = tl.load(x_pix[:, None] + ((ih * IN_W + iw) * C_TOTAL)[:, None] + red[None, :],
                        mask=ok[:, None] & red_ok[None, :], other=0.0)
            for i in tl.static_range(ROWS):
                rr = j - i * STR_H  # the vertical tap offset this input row is for output row i
                if rr >= 0 and rr % DIL_H == 0 and rr // DIL_H < F_H:
                    if FLIP:
                        tap = (F_H - 1 - rr // DIL_H) * F_W + (F_W - 1 - s)
                    else:
                        tap = (rr // DIL_H) * F_W + s
                    if not HOLD_W:
                        b = tl.load(p_base + tap * GC * GK, mask=p_mask, other=0.0)
                    elif tap == 0:
                        b = w0
                    elif tap == 1:
                        b = w1
                    elif tap == 2:
                        b = w2
                    elif tap == 3:
                        b = w3
                    elif tap == 4:
                        b = w4
                    elif tap == 5:
                        b = w5
                    elif tap == 6:
                        b = w6
                    elif tap == 7:
                        b = w7
                    else:
                        b = w8
                    if i == 0:
                        acc0 = tl.dot(a, b, acc0)
                    elif i == 1:
                        acc1 = tl.dot(a, b, acc1)
                    elif i == 2:
                        acc2 = tl.dot(a, b, acc2)
                    else:
                        acc3 = tl.dot(a, b, acc3)

    y_pix = y_ptr + (image * OUT_H * OUT_W + ow) * K_TOTAL + k0
    for i in tl.static_range(ROWS):
        oh = oh0 + i
        ok = pix_ok & (oh < OUT_H)
        if i == 0:
            acc = acc0
        elif i == 1:
            acc = acc1
        elif i == 2:
            acc = acc2
        else:
            acc = acc3
        tl.store(y_pix[:, None] + (oh * OUT_W * K_TOTAL) + cols[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=ok[:, None] & col_ok[None, :])


class Walk:
    """One walk configuration on one problem: ``call(x, w, y)`` packs the weights (once per weight
    tensor, cached by identity) and launches the walk."""

    def __init__(self, direction: str, n: int, groups: int, cg: int, kg: int, size: tuple[int, int],
                 filt: tuple[int, int], stride: tuple[int, int], pad: tuple[int, int], dil: tuple[int, int],
                 tile_w: int, images: int, rows: int, merge: int, warps: int, hold: bool = False):
        if rows > 4:
            raise ValueError("rows: at most 4 output rows per program")
        if direction == "bwd_data" and (stride != (1, 1)):
            raise ValueError("bwd_data walk: stride 1 only")
        self.direction, self.n, self.groups, self.cg, self.kg = direction, n, groups, cg, kg
        self.filt, self.stride, self.dil, self.merge, self.warps = filt, stride, dil, merge, warps
        self.tile_w, self.images, self.rows = tile_w, images, rows
        if hold and filt[0] * filt[1] > 9:
            raise ValueError("hold: at most 9 filter taps")
        self.hold = hold
        out = tuple((s + 2 * p - d * (f - 1) - 1) // st + 1 for s, p, d, f, st in zip(size, pad, dil, filt, stride))
        self.in_size, self.out_size = size, out
        if direction == "fwd":
            self.src_size, self.dst_size, self.pad = size, out, pad
            self.src_c, self.dst_c, self.gc, self.gk = groups * cg, groups * kg, merge * cg, merge * kg
        else:  # walk over dY (K channels) into dX (C channels)
            self.src_size, self.dst_size = out, size
            self.pad = tuple(d * (f - 1) - p for d, f, p in zip(dil, filt, pad))
            self.src_c, self.dst_c, self.gc, self.gk = groups * kg, groups * cg, merge * kg, merge * cg
        self.block_k = max(16, triton.next_power_of_2(self.gc))
        self.block_n = max(16, triton.next_power_of_2(self.gk))
        self.taps = filt[0] * filt[1]
        self.packed_elements = -(-groups // merge) * self.taps * self.gc * self.gk
        self._packs: dict[int, torch.Tensor] = {}

    @property
    def name(self) -> str:
        hold = "_hold" if self.hold else ""
        return f"gwalk_{self.images}x{self.tile_w}_r{self.rows}_mg{self.merge}_w{self.warps}{hold}"

    def pack(self, w: torch.Tensor) -> torch.Tensor:
        packed = torch.empty(self.packed_elements, dtype=w.dtype, device=w.device)
        _pack_kernel[(triton.cdiv(self.packed_elements, 1024),)](
            w, packed, self.groups, self.cg, self.kg, self.taps, self.packed_elements,
            MERGE=self.merge, BACKWARD_DATA=self.direction == "bwd_data", BLOCK=1024, num_warps=4)
        return packed

    def grid(self) -> tuple[int, int]:
        h, w = self.dst_size
        return (triton.cdiv(self.n, self.images) * triton.cdiv(h, self.rows) * triton.cdiv(w, self.tile_w),
                triton.cdiv(self.groups, self.merge))

    def launch(self, x: torch.Tensor, packed: torch.Tensor, y: torch.Tensor) -> None:
        _gwalk_kernel[self.grid()](
            x, packed, y, self.n, self.src_c, self.dst_c, self.gc, self.gk, *self.src_size, *self.dst_size,
            *self.pad, F_H=self.filt[0], F_W=self.filt[1], STR_H=self.stride[0], STR_W=self.stride[1],
            DIL_H=self.dil[0], DIL_W=self.dil[1], FLIP=self.direction == "bwd_data", TILE_W=self.tile_w,
            IMAGES=self.images, ROWS=self.rows, BLOCK_K=self.block_k, BLOCK_N=self.block_n, HOLD_W=self.hold,
            num_warps=self.warps, num_stages=1)

    def call(self, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, *, include_pack: bool = True) -> torch.Tensor:
        packed = self.pack(w) if include_pack else self._packs.setdefault(id(w), self.pack(w))
        self.launch(x, packed, y)
        return y


def check_local() -> int:
    """Interpreter check (TRITON_INTERPRET=1) on small odd problems, float32 on the CPU."""
    cases = [
        ("fwd", 3, 8, 4, 4, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1), 8, 2, 3, 4),
        ("fwd", 2, 6, 8, 8, (10, 7), (3, 3), (2, 2), (1, 1), (1, 1), 8, 1, 2, 2),
        ("fwd", 2, 4, 16, 16, (6, 6), (3, 3), (1, 1), (1, 1), (1, 1), 4, 2, 4, 1),
        ("fwd", 1, 4, 4, 8, (8, 9), (3, 3), (1, 1), (2, 2), (2, 2), 8, 1, 2, 4),
        ("bwd_data", 3, 8, 4, 4, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1), 8, 2, 3, 4),
        ("bwd_data", 2, 4, 8, 4, (7, 6), (3, 3), (1, 1), (1, 1), (1, 1), 4, 2, 4, 2),
    ]
    import torch.nn.functional as F

    failures = 0
    for d, n, g, cg, kg, size, filt, stride, pad, dil, tile_w, images, rows, merge in cases:
        walk = Walk(d, n, g, cg, kg, size, filt, stride, pad, dil, tile_w, images, rows, merge, 4, hold=n % 2 == 1)
        gen = torch.Generator().manual_seed(1)
        w = torch.randn(g * kg, cg, *filt, generator=gen)
        x = torch.randn(n, g * cg, *size, generator=gen)
        if d == "fwd":
            ref = F.conv2d(x, w, None, stride, pad, dil, g)
            src = x
        else:
            dy = torch.randn(n, g * kg, *walk.out_size, generator=gen)
            ref = torch.nn.grad.conv2d_input(x.shape, w, dy, stride, pad, dil, g)
            src = dy
        src_nhwc = src.permute(0, 2, 3, 1).contiguous()
        w_gkyxc = w.permute(0, 2, 3, 1).contiguous()
        y = torch.full((n, *walk.dst_size, walk.dst_c), float("nan"))
        walk.call(src_nhwc, w_gkyxc, y)
        err = (y.permute(0, 3, 1, 2) - ref).abs().max().item() / max(ref.abs().max().item(), 1e-9)
        status = "ok" if err < 1e-5 else "WRONG"
        failures += status != "ok"
        print(f"{d:8s} n{n} g{g} cg{cg} kg{kg} {size} s{stride} d{dil} {walk.name}: rel err {err:.2e} {status}")
    return 1 if failures else 0


# ------------------------------------------------------------------------------------------------ GPU
#: ResNeXt-50 32x4d's grouped 3×3 layers (dev suite) at batch 32 and the stride-2 one, and batch 128.
PROBLEMS = (
    "2d|n32|g32|c128|k128|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g32|c512|k512|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g32|c1024|k1024|in7x7|f3x3|s1x1|d1x1|pb1x1|pe1x1",
    "2d|n32|g32|c256|k256|in56x56|f3x3|s2x2|d1x1|pb1x1|pe1x1",
    "2d|n128|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1",
)

#: The dev suite's best registry kernel of each (problem, direction) (session 10, 93f200e) and gmerge's
#: unpipelined tiles, measured again here through the registry.
REGISTRY_CANDIDATES = {
    "fwd": ("gconv_fwd_bf16_2d_gmerge_128x32x32_w4_s1_gm8_sk1_mg8_v8_i32",
            "gconv_fwd_bf16_2d_gmerge_128x32x32_w4_s1_gm8_sk1_mg4_v8_i32",
            "gconv_fwd_bf16_2d_gmerge_128x32x32_w4_s1_gm8_sk1_mg2_v8_i32",
            "gconv_fwd_bf16_2d_gmerge_128x64x64_w4_s3_gm8_sk1_mg8_v8_i32",
            "gconv_fwd_bf16_2d_igemm_128x32x32_w4_s4_gm8_sk1_mg1_v8_i32"),
    "bwd_data": ("gconv_bwd_data_bf16_2d_gmerge_128x32x32_w4_s4_gm8_sk1_mg8_v8_i32",
                 "gconv_bwd_data_bf16_2d_gmerge_128x32x32_w4_s4_gm8_sk1_mg4_v8_i32",
                 "gconv_bwd_data_bf16_2d_gmerge_128x32x32_w4_s4_gm8_sk1_mg2_v8_i32",
                 "gconv_bwd_data_bf16_2d_gmerge_128x32x32_w4_s1_gm8_sk1_mg4_v8_i32",
                 "gconv_bwd_data_bf16_2d_igemm_128x32x32_w4_s4_gm8_sk1_mg1_v8_i32"),
}


def _walk_configs(direction: str, problem):
    """(tile_w, images, rows, merge, warps, hold) candidates: M = images·tile_w of 64 or 128 rows with tile_w
    the smallest power of two ≥ the output width (capped at 64), merges giving 16–64 reduction channels,
    4 warps (8 warps was never the best in the first run); weights held for reductions of ≤ 32 channels."""
    out_w = problem.output_size[1] if direction == "fwd" else problem.input_size[1]
    tile_w = min(64, triton.next_power_of_2(out_w))
    cg = problem.c_per_group
    for m in (64, 128):
        images = max(1, m // tile_w)
        for rows in (2, 4):
            for merge in (1, 2, 4, 8, 16):
                if not 16 <= merge * cg <= 64 or problem.groups % merge:
                    continue
                for hold in ((False, True) if merge * cg <= 32 else (False,)):
                    yield tile_w, images, rows, merge, 4, hold


def run_gpu(out: Path, workers: int) -> int:
    from tiledispatch.native import launch
    from tiledispatch.native.accuracy import RELATIVE_ERROR_LIMIT
    from tiledispatch.native.bench import (
        BenchSettings,
        _cudnn_call,
        _grouped_result,
        _time_callable,
        environment_manifest,
        measure_ceilings,
        new_setup,
    )
    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.problem import ConvProblem
    from tiledispatch.native.registry import Registry, build
    from tiledispatch.native.support import is_supported

    out.mkdir(parents=True, exist_ok=True)
    cache = Path("/tmp/walk_registry")
    names = sorted({n for names in REGISTRY_CANDIDATES.values() for n in names})
    configs = [parse_kernel_name(n) for n in names]
    build(configs, arch="sm_90", cache_dir=cache, workers=workers, rule_set="probe")
    registry = Registry.load(cache, "sm_90")
    settings = BenchSettings(cache_dir=str(cache), event_timing=False)
    ceilings = measure_ceilings()
    (out / "walk.json").write_text(json.dumps(environment_manifest(settings, ceilings), indent=2, default=str))
    rows: list[dict] = []

    def record(problem, variant, call, grouped_result=False):
        setup = record.setup
        limit = RELATIVE_ERROR_LIMIT[problem.dtype]
        row = {"problem": problem.key, "variant": variant, "status": "ok", "error": math.nan, "us": math.nan,
               "bound_us": ceilings.bound_us(problem), "message": ""}
        try:
            setup.out[0].fill_(float("nan"))
            result = call(0)
            torch.cuda.synchronize()
            row["error"] = setup.relative_error(_grouped_result(problem, result) if grouped_result else setup.out[0])
            if not row["error"] <= limit:
                row["status"] = "wrong"
            else:
                row["us"] = _time_callable(call, setup.sets, settings, 50.0)[2]
        except Exception as exc:  # recorded; the probe goes on
            row["status"] = "error"
            row["message"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rows.append(row)
        print(f"  {variant:66s} {row['status']:6s} {row['us']:9.2f} us  err {row['error']:.2e} "
              f"{row['message'][:100]}", flush=True)
        tmp = out / "walk.tmp"
        with tmp.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        tmp.replace(out / "walk.csv")

    for direction in ("fwd", "bwd_data"):
        for key in PROBLEMS:
            problem = ConvProblem.from_key(f"{direction}|bf16|{key}")
            if direction == "bwd_data" and problem.stride != (1, 1):
                continue
            print(problem.key, flush=True)
            setup = record.setup = new_setup(problem, settings)
            torch.backends.cudnn.benchmark = True
            record(problem, "cudnn", _cudnn_call(problem, setup), grouped_result=True)
            loader = registry.loader()
            for name in REGISTRY_CANDIDATES[direction]:
                config = parse_kernel_name(name)
                if name in registry.entries and is_supported(problem, config):
                    record(problem, name, lambda i, c=config, p=problem, su=setup, ld=loader: launch.run(
                        p, c, su.first[i], su.second[i], su.out[i], backend="compiled", loader=ld,
                        check_support=False))
            for tile_w, images, rows_, merge, warps, hold in _walk_configs(direction, problem):
                walk = Walk(direction, problem.batch, problem.groups, problem.c_per_group, problem.k_per_group,
                            problem.input_size, problem.filter_size, problem.stride, problem.pad_begin,
                            problem.dilation, tile_w, images, rows_, merge, warps, hold)
                record(problem, walk.name,
                       lambda i, w=walk, su=setup: w.call(su.first[i], su.second[i], su.out[i]))
            del setup
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--check", action="store_true", help="interpreter check on the CPU")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args(argv)
    if args.check:
        return check_local()
    started = time.time()
    code = run_gpu(args.out, args.workers)
    print(f"walk probe done in {time.time() - started:.0f}s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
