"""Weight packing for group-merged (gmerge) tensor-core kernels with aligned merged runs (v8).

A gmerge CTA multiplies by a block-diagonal operand: ``MERGE`` groups' filters side by side, zeros
between them. Gathered from GKYXC on the fly, its rows break every C/G (or K/G) elements, so the
loads are 2-byte scalars the compiler cannot hand to ``cp.async`` (PTX of the unpacked kernel:
8 ``ld.global.b16`` + ``st.shared.b16`` per thread and iteration beside 16-byte ``cp.async`` for
the activations). This program writes the operand once per call, dense, zeros included:

``P[gb, tap, r, j]`` for group block ``gb`` (groups ``gb·MERGE …``), filter tap ``tap``, row ``r``
and column ``j`` of the GEMM's B tile:

* forward (``B[r, j]``, r = input channel of the block, j = output channel):
  ``P = W[gb·MERGE + j // (K/G), j % (K/G), tap, r % (C/G)]`` where ``r // (C/G) == j // (K/G)``;
* backward-data (r = output channel, j = input channel):
  ``P = W[gb·MERGE + r // (K/G), r % (K/G), tap, j % (C/G)]`` where ``r // (K/G) == j // (C/G)``;

and 0 elsewhere, or where the group is past the last (a partial last block). Rows are
``MERGE·C/G`` (forward) or ``MERGE·K/G`` long and 8-aligned under v8, so the main kernel loads
``P`` with 16-byte pipelined copies. Size: ``cdiv(G, MERGE) · taps · MERGE²·C/G·K/G`` elements
(e.g. 36,864 for 32 groups of 4 channels, 3×3) — one small launch before the main program.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import Launch, Program, pointer_type
from tiledispatch.native.problem import ConvProblem

PACK_BLOCK = 1024
PACK_WARPS = 4


def packs_weights(config: KernelConfig) -> bool:
    """gmerge with aligned merged runs: its main program reads the packed operand."""
    return config.family is Family.GMERGE and config.merge > 1 and config.vec == 8


def packed_elements(problem: ConvProblem, config: KernelConfig) -> int:
    taps = math.prod(problem.filter_size)
    return (-(-problem.groups // config.merge) * taps * config.merge * problem.c_per_group
            * config.merge * problem.k_per_group)


def workspace_elements(problem: ConvProblem, config: KernelConfig) -> int:
    """fp32 workspace elements holding the packed operand (in the problem's dtype); 0 when the
    kernel does not pack."""
    if not packs_weights(config):
        return 0
    return -(-packed_elements(problem, config) * problem.dtype.itemsize // 4)


def programs(config: KernelConfig, backward_data: bool) -> dict[str, Program]:
    """``{"pack": …}`` for a kernel that packs its weights, else nothing."""
    return {"pack": pack_program(config, backward_data)} if packs_weights(config) else {}


def pack_program(config: KernelConfig, backward_data: bool) -> Program:
    """The packing program of ``config``'s merge, dtype and index width (gmerge v8, and every gwalk kernel)."""
    ints = "i64" if config.index64 else "i32"
    ptr = pointer_type(config.dtype)
    return Program(_pack_kernel, {"MERGE": config.merge, "BACKWARD_DATA": backward_data, "BLOCK": PACK_BLOCK},
                   {"w_ptr": ptr, "p_ptr": ptr, "GROUPS": ints, "CG": ints, "KG": ints, "TAPS": ints,
                    "TOTAL": ints}, PACK_WARPS, 1)


def pack_launch(problem: ConvProblem, config: KernelConfig, weight, workspace) -> tuple[Launch, object]:
    """The ``pack`` launch and the packed operand (inside the fp32 workspace, in the problem's
    dtype) that the main program then reads in place of the weight."""
    from tiledispatch.native.launch import torch_dtype

    packed = workspace.view(torch_dtype(problem.dtype))[: packed_elements(problem, config)]
    total = packed.numel()
    launch = Launch("pack", (-(-total // PACK_BLOCK), 1, 1),
                    (weight, packed, problem.groups, problem.c_per_group, problem.k_per_group,
                     math.prod(problem.filter_size), total))
    return launch, packed


@triton.jit
def _pack_kernel(w_ptr, p_ptr, GROUPS, CG, KG, TAPS, TOTAL,
                 MERGE: tl.constexpr, BACKWARD_DATA: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_range = offs < TOTAL
    if BACKWARD_DATA:
        cols = MERGE * CG  # j: input channel; rows r: output channel
        c_idx = offs % cols
        t = offs // cols
        k_idx = t % (MERGE * KG)
        t = t // (MERGE * KG)
    else:
        cols = MERGE * KG  # j: output channel; rows r: input channel
        k_idx = offs % cols
        t = offs // cols
        c_idx = t % (MERGE * CG)
        t = t // (MERGE * CG)
    tap = t % TAPS
    group_block = t // TAPS
    local = k_idx // KG
    group = group_block * MERGE + local
    keep = in_range & (c_idx // CG == local) & (group < GROUPS)
    source = ((group * KG + k_idx % KG) * TAPS + tap) * CG + c_idx % CG
    value = tl.load(w_ptr + source, mask=keep, other=0.0)
    tl.store(p_ptr + offs, value, mask=in_range)
