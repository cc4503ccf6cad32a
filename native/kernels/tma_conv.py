"""Stride-1 convolution on tensor cores with TMA-fed tiles (family ``tma``; forward and backward-data).

The igemm kernels compute every A-tile element's address and bounds from its output position and
filter tap: on the H200 that integer work, not the tensor cores, is the busiest pipe (Nsight
Compute of ``gconv_fwd_bf16_2d_igemm_128x128x64_w8_s3``: ALU 46 %, tensor work a small fraction).
With stride 1 the gather disappears once the activations are zero-padded: over the padded grid
``(N, Dp, Hp, Wp)`` flattened to rows ``q``, filter tap ``(td, th, tw)`` reads row
``q + shift(tap)`` with ``shift = (td·dil_d·Hp + th·dil_h)·Wp + tw·dil_w``, so the A tile of any
tap is one rectangular box ``[q0 + shift, q0 + shift + BLOCK_M) × channels`` — one TMA copy,
no per-element addresses, no masks (rows past the end are zero-filled by the TMA unit).

GEMM mapping, per group ``g`` (program axis 1) and tile (axis 0, grouped ordering for L2 reuse):

* rows (GEMM M = N·Dp·Hp·Wp): padded positions ``q``; row ``q = ((n·Dp + d)·Hp + h)·Wp + w`` is the
  output at ``(n, d, h, w)`` when ``d < OUT_D, h < OUT_H, w < OUT_W``, and is computed but not
  stored otherwise (the cost: ``Dp·Hp·Wp / prod(out)``, 1.07 for 56×56 3×3, 1.15 for 28×28);
* columns (GEMM N = O/G): output channel ``g·O/G + j``;
* reduction (GEMM K = taps·R/G): one flattened loop over (tap, channel block of ``BLOCK_K``);
  ``BLOCK_K`` divides R/G, so a block never straddles groups.

``OUT[q, g·O/G + j] = Σ_tap Σ_r A[q + shift(tap), g·R/G + r] · B[g·O/G + j, tap·R/G + r]``

* forward: ``A`` = X padded by (pad_begin, pad_end), R = C, O = K, ``B`` = W as stored (GKYXC is
  ``[G·K/G, taps·C/G]`` row-major);
* backward-data: ``dX[i] = Σ_t dY[i + pad_begin − t·dil] · W[t]``; with ``t' = F − 1 − t`` that is a
  forward convolution of dY padded by ``dil·(F−1) − pad_begin`` / ``dil·(F−1) − pad_end`` with the
  flipped, transposed filter: ``A`` = dY padded, R = K, O = C, ``B[g·C/G + c, t'·K/G + k] =
  W[g, k, F−1−t', c]`` (packed once per call by ``_flip_kernel``).

Columns ``j ≥ O/G`` of the last column tile read the next group's rows of B (or the TMA unit's
zeros past the end) and are not stored. The padded copy costs one read and one write of the
activations (skipped when every pad is 0); both live in the fp32 workspace. Device-side tensor
descriptors need Triton's global scratch allocator (``ensure_scratch_allocator``).
"""

from __future__ import annotations

import math

import triton
import triton.language as tl
from triton.runtime import _allocation

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import Launch, Program, as3d, cdiv, pointer_type
from tiledispatch.native.kernels.tiles import grouped_tile
from tiledispatch.native.kernels.tma_geometry import TmaGeometry
from tiledispatch.native.problem import ConvProblem, Direction

PAD_ROWS = 32
PAD_CHANNELS = 64
FLIP_BLOCK = 1024


@triton.jit
def _padded_position(q, DP, HP, WP):
    """(n, d, h, w) of padded row ``q = ((n·DP + d)·HP + h)·WP + w``."""
    w = q % WP
    t = q // WP
    h = t % HP
    t = t // HP
    return t // DP, t % DP, h, w


@triton.jit
def _pad_kernel(src_ptr, dst_ptr, ROWS, CHANNELS, IN_D, IN_H, IN_W, DP, HP, WP, PAD_D, PAD_H, PAD_W,
                BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """``dst[q, c] = src[n, d − PAD_D, h − PAD_H, w − PAD_W, c]`` inside the source, 0 outside, for
    padded row ``q = ((n·DP + d)·HP + h)·WP + w``; every ``dst`` element is written."""
    CHANNELS = (CHANNELS // 8) * 8  # 16-byte channel runs (the support check guarantees C % 8 == 0)
    q = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    n, d, h, w = _padded_position(q, DP, HP, WP)
    i_d = d - PAD_D
    i_h = h - PAD_H
    i_w = w - PAD_W
    row_ok = q < ROWS
    inside = row_ok & (i_d >= 0) & (i_d < IN_D) & (i_h >= 0) & (i_h < IN_H) & (i_w >= 0) & (i_w < IN_W)
    c_ok = c < CHANNELS
    src = (((n * IN_D + i_d) * IN_H + i_h) * IN_W + i_w) * CHANNELS
    value = tl.load(src_ptr + src[:, None] + c[None, :], mask=inside[:, None] & c_ok[None, :], other=0.0)
    tl.store(dst_ptr + (q * CHANNELS)[:, None] + c[None, :], value, mask=row_ok[:, None] & c_ok[None, :])


@triton.jit
def _flip_kernel(w_ptr, b_ptr, GROUPS, CG, KG, TAPS, TOTAL, BLOCK: tl.constexpr):
    """Backward-data operand ``B[(g·C/G + c)·taps·K/G + t'·K/G + k] = W[((g·K/G + k)·taps + taps−1−t')·C/G + c]``
    (flipping every filter axis at once reverses the flattened tap index)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < TOTAL
    k = offs % KG
    t = offs // KG
    tap = t % TAPS
    t = t // TAPS
    c = t % CG
    g = t // CG
    value = tl.load(w_ptr + ((g * KG + k) * TAPS + (TAPS - 1 - tap)) * CG + c, mask=ok, other=0.0)
    tl.store(b_ptr + offs, value, mask=ok)


@triton.jit
def _tma_conv_kernel(
    a_ptr, b_ptr, out_ptr,
    ROWS, GROUPS, RG, OG, DP, HP, WP, OUT_D, OUT_H, OUT_W, F_D, F_H, F_W, DIL_D, DIL_H, DIL_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """``OUT[q, g·OG + j] = Σ_tap Σ_r A[q + shift(tap), g·RG + r] · B[g·OG + j, tap·RG + r]`` (module docstring)."""
    OG = (OG // 8) * 8  # 16-byte output runs (support: O/G % 8 == 0); RG is a multiple of BLOCK_K
    R_TOTAL = GROUPS * RG
    O_TOTAL = GROUPS * OG
    taps = F_D * F_H * F_W

    pid = tl.program_id(0)
    g = tl.program_id(1)
    num_pid_m = tl.cdiv(ROWS, BLOCK_M)
    num_pid_n = tl.cdiv(OG, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)
    q0 = pid_m * BLOCK_M
    n0 = pid_n * BLOCK_N

    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[ROWS, R_TOTAL], strides=[R_TOTAL, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[O_TOTAL, taps * RG], strides=[taps * RG, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    k_blocks = RG // BLOCK_K
    a_col = g * RG
    b_row = g * OG + n0
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for it in tl.range(0, taps * k_blocks):
        tap = it // k_blocks
        r0 = (it - tap * k_blocks) * BLOCK_K
        tw = tap % F_W
        th = (tap // F_W) % F_H
        td = tap // (F_W * F_H)
        shift = (td * DIL_D * HP + th * DIL_H) * WP + tw * DIL_W
        a = a_desc.load([q0 + shift, a_col + r0])
        b = b_desc.load([b_row, tap * RG + r0])
        acc = tl.dot(a, b.T, acc)

    q = q0 + tl.arange(0, BLOCK_M)
    n, d, h, w = _padded_position(q, DP, HP, WP)
    row_ok = (q < ROWS) & (w < OUT_W) & (h < OUT_H) & (d < OUT_D)
    cols = n0 + tl.arange(0, BLOCK_N)
    out_row = ((n * OUT_D + d) * OUT_H + h) * OUT_W + w
    out_ptrs = out_ptr + (out_row * O_TOTAL)[:, None] + (g * OG + cols)[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols < OG)[None, :])


# ---- host side -------------------------------------------------------------------------------
def ensure_scratch_allocator() -> None:
    """Device-side tensor descriptors are written to global scratch that Triton's launcher asks its
    allocator for; the default allocator refuses. Install one backed by PyTorch's caching allocator
    (on the current stream, so CUDA-graph capture works) in this thread's context, once."""
    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        import torch

        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


class TmaConvolution:
    """Template of the ``tma`` family for one direction (forward or backward-data)."""

    families = frozenset({Family.TMA})

    def __init__(self, direction: Direction):
        self.direction = direction

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        main_ints = ("ROWS", "GROUPS", "RG", "OG", "DP", "HP", "WP", "OUT_D", "OUT_H", "OUT_W", "F_D", "F_H", "F_W",
                     "DIL_D", "DIL_H", "DIL_W")
        pad_ints = ("ROWS", "CHANNELS", "IN_D", "IN_H", "IN_W", "DP", "HP", "WP", "PAD_D", "PAD_H", "PAD_W")
        out = {
            "main": Program(_tma_conv_kernel,
                            {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                             "GROUP_M": config.group_m},
                            {"a_ptr": ptr, "b_ptr": ptr, "out_ptr": ptr, **{name: "i32" for name in main_ints}},
                            config.num_warps, config.num_stages),
            "pad": Program(_pad_kernel, {"BLOCK_R": PAD_ROWS, "BLOCK_C": PAD_CHANNELS},
                           {"src_ptr": ptr, "dst_ptr": ptr, **{name: "i32" for name in pad_ints}}, 4, 1),
        }
        if self.direction is Direction.BACKWARD_DATA:
            out["flip"] = Program(_flip_kernel, {"BLOCK": FLIP_BLOCK},
                                  {"w_ptr": ptr, "b_ptr": ptr,
                                   **{name: "i32" for name in ("GROUPS", "CG", "KG", "TAPS", "TOTAL")}}, 4, 1)
        return out

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return -(-sum(TmaGeometry(problem).regions) * problem.dtype.itemsize // 4)

    def before_launch(self, config: KernelConfig) -> None:
        """Every call, in the calling thread (plans are cached; the allocator is per thread)."""
        ensure_scratch_allocator()

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        from tiledispatch.native.launch import torch_dtype

        shape = TmaGeometry(problem)
        padded_elements, flipped_elements = shape.regions
        if padded_elements + flipped_elements and (
                workspace is None or workspace.numel() < self.workspace_elements(problem, config)):
            raise ValueError(f"workspace: the tma kernel needs {self.workspace_elements(problem, config)} "
                             "fp32 elements")
        scratch = workspace.view(torch_dtype(problem.dtype)) if workspace is not None else None
        launches = []
        activations = first
        if padded_elements:
            activations = scratch[: shape.padded_elements]
            channels = problem.groups * shape.reduction
            launches.append(Launch("pad", (cdiv(shape.rows, PAD_ROWS), cdiv(channels, PAD_CHANNELS), 1),
                                   (first, activations, shape.rows, channels, *shape.source, *shape.padded,
                                    *shape.pads[0])))
        weights = second
        if problem.direction is Direction.BACKWARD_DATA:
            weights = scratch[padded_elements: padded_elements + problem.weight_elements]
            total = problem.weight_elements
            launches.append(Launch("flip", (cdiv(total, FLIP_BLOCK), 1, 1),
                                   (second, weights, problem.groups, problem.c_per_group, problem.k_per_group,
                                    math.prod(problem.filter_size), total)))
        tiles = cdiv(shape.rows, config.block_m) * cdiv(shape.outputs, config.block_n)
        launches.append(Launch("main", (tiles, problem.groups, 1),
                               (activations, weights, out, shape.rows, problem.groups, shape.reduction,
                                shape.outputs, *shape.padded, *shape.out, *as3d(problem.filter_size, 1),
                                *as3d(problem.dilation, 1))))
        return launches
