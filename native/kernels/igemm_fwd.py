"""Forward convolution on tensor cores: implicit GEMM (igemm), group-merged (gmerge) and 1×1 (gemm1x1).

GEMM mapping, per block of ``MERGE`` consecutive groups starting at ``g0`` (``MERGE`` = 1 except gmerge):

* rows ``m`` (GEMM M = N·prod(out)): output positions ``(n, od, oh, ow)``;
* columns ``j`` (GEMM N = MERGE·K/G): output channel ``g0·K/G + j``, of merged group ``j // (K/G)``;
* reduction (GEMM K = prod(filter)·MERGE·C/G): one flattened loop over (filter tap, channel block),
  channel ``r`` of the merged block is input channel ``g0·C/G + r`` of merged group ``r // (C/G)``;

``Y[m, j] = Σ_tap Σ_r X[n, o·stride − pad_begin + tap·dilation, g0·C/G + r] · B[r, j]`` with
``B[r, j] = W[g0 + j//(K/G), j % (K/G), tap, r % (C/G)]`` where ``r // (C/G) == j // (K/G)`` and 0
elsewhere: a block-diagonal operand, so merged groups never mix. With aligned merged runs (v8) the
operand is packed densely first (``gmerge_pack.py``) and read with 16-byte pipelined loads.
Because NHWGC keeps the channels of consecutive groups adjacent, the merged input and output
channel runs are contiguous.

split_k > 1 (``SPLIT_K``, grid axis 2): the flattened reduction loop of ``prod(filter)·cdiv(MERGE·C/G,
BLOCK_K)`` (tap, channel block) steps is cut into ``SPLIT_K`` contiguous ranges of
``cdiv(steps, SPLIT_K)`` steps; split ``s`` runs steps ``[s·per_split, min((s+1)·per_split, steps))``
and stores its fp32 partial tile to ``workspace[s, m, channel]`` (a ``[SPLIT_K, N·prod(out)·K]`` copy of
Y's layout); a split whose range is empty (more splits than steps) stores zeros. The ``reduce`` program
(``split_reduce.py``, the one every split-K family uses) sums the ``SPLIT_K`` rows in a fixed order
(deterministic, no atomics) and casts to Y's dtype. With split_k = 1 the main program stores Y directly.
For small GEMM M (batch-1 inference: M = prod(out)) this multiplies the CTAs by ``SPLIT_K`` and divides
each one's sequential steps by it.
The loop carries its (depth tap, row tap, column tap, channel block) as an odometer, and every tap's A rows
are the tap-(0, 0, 0) rows shifted by one scalar (NDHWC is row-major), so a step spends no scalar division and
per row only the bounds test (one unsigned compare per dimension): 198 instead of 281 instructions per step
in the SASS of the 128×128×64 8-warp tile (sm_90), whose integer work had been the busiest pipe.
2D problems run as 3D with depth 1.
Grid: axis 0 = (m, n) tiles (GROUP_M-swizzled), axis 1 = group block, axis 2 = split.
"""

from __future__ import annotations

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels import gmerge_pack
from tiledispatch.native.kernels.base import (
    Launch,
    Program,
    as3d,
    cdiv,
    fixed_sizes,
    int_type,
    pointer_type,
    register_cap,
    tensor_core_constexprs,
)
from tiledispatch.native.kernels.split_reduce import (
    partials_elements,
    split_reduce_launch,
    with_split_reduce,
)
from tiledispatch.native.kernels.tiles import grouped_tile
from tiledispatch.native.problem import ConvProblem, Direction

_SIZE_PARAMS = ("BATCH", "GROUPS", "CG", "KG", "IN_D", "IN_H", "IN_W", "OUT_D", "OUT_H", "OUT_W",
                "F_D", "F_H", "F_W", "STR_D", "STR_H", "STR_W", "DIL_D", "DIL_H", "DIL_W",
                "PAD_D", "PAD_H", "PAD_W")


@triton.jit
def aligned_channels(GROUPS, CG, KG, MERGE: tl.constexpr, VEC: tl.constexpr):
    """(C, K, C/G, K/G, MERGE·C/G, MERGE·K/G) written so that, with ``VEC == 8``, the compiler can
    prove every channel run it loads or stores 16-byte aligned: runs of one group for MERGE = 1;
    for gmerge only the merged runs (MERGE·C/G, MERGE·K/G and C, K multiples of 8, which the
    support check guarantees), so groups of 4 channels merged by 2 or more still get 16-byte loads."""
    if VEC == 8 and MERGE == 1:
        CG = (CG // 8) * 8
        KG = (KG // 8) * 8
    C_TOTAL = GROUPS * CG
    K_TOTAL = GROUPS * KG
    GC = MERGE * CG
    GK = MERGE * KG
    if VEC == 8 and MERGE > 1:
        C_TOTAL = (C_TOTAL // 8) * 8
        K_TOTAL = (K_TOTAL // 8) * 8
        GC = (GC // 8) * 8
        GK = (GK // 8) * 8
    return C_TOTAL, K_TOTAL, CG, KG, GC, GK


@triton.jit
def in_range(index, size, INDEX64: tl.constexpr):
    """0 ≤ index < size; with 32-bit indices one unsigned compare (a negative index wraps past any size)."""
    if INDEX64:
        ok = (index >= 0) & (index < size)
    else:
        ok = index.to(tl.uint32, bitcast=True) < tl.cast(size, tl.uint32)
    return ok


@triton.jit
def _igemm_fwd_kernel(
    x_ptr, w_ptr, y_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    MERGE: tl.constexpr, IS_1X1: tl.constexpr, VEC: tl.constexpr, INDEX64: tl.constexpr,
    DOT_PRECISION: tl.constexpr, SPLIT_K: tl.constexpr,
):
    C_TOTAL, K_TOTAL, CG, KG, GC, GK = aligned_channels(GROUPS, CG, KG, MERGE, VEC)
    M = BATCH * OUT_D * OUT_H * OUT_W
    # GC: merged reduction channels, GK: merged output channels

    # Grouped (swizzled) ordering of the (m, n) tiles for L2 reuse of the operand tiles.
    pid = tl.program_id(0)
    group_block = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(GK, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)
    c0 = group_block * GC  # first input channel of the merged block (= g0·C/G)
    k0 = group_block * GK  # first output channel of the merged block (= g0·K/G)

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if INDEX64:
        rows = rows.to(tl.int64)
    row_ok = rows < M
    col_ok = (cols < GK) & (k0 + cols < K_TOTAL)

    if IS_1X1:
        x_row = rows * C_TOTAL
    else:
        ow = rows % OUT_W
        t = rows // OUT_W
        oh = t % OUT_H
        t = t // OUT_H
        od = t % OUT_D
        nb = t // OUT_D
        base_d = od * STR_D - PAD_D
        base_h = oh * STR_H - PAD_H
        base_w = ow * STR_W - PAD_W

    taps = F_D * F_H * F_W
    k_blocks = tl.cdiv(GC, BLOCK_K)
    w_col = (k0 + cols) * (taps * CG)  # start of each output channel's filter
    if INDEX64:
        w_col = w_col.to(tl.int64)
    col_group = cols // KG
    red = tl.arange(0, BLOCK_K)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if SPLIT_K > 1:  # this split's contiguous range of (tap, channel block) steps; may be empty
        split = tl.program_id(2)
        steps = taps * k_blocks
        per_split = tl.cdiv(steps, SPLIT_K)
        it_begin = tl.minimum(split * per_split, steps)
        it_end = tl.minimum(it_begin + per_split, steps)
    else:
        it_begin = 0
        it_end = taps * k_blocks
    # Loop-carried (td, th, tw, channel block) odometer from the first step: no scalar division per step.
    kb = it_begin % k_blocks
    tap = it_begin // k_blocks
    tw = tap % F_W
    th = (tap // F_W) % F_H
    td = tap // (F_W * F_H)
    if not IS_1X1:
        # Every tap's input row is the tap-(0, 0, 0) row shifted by one scalar (row-major NDHWC).
        x_row0 = (((nb * IN_D + base_d) * IN_H + base_h) * IN_W + base_w) * C_TOTAL
    for _ in tl.range(it_begin, it_end):
        r = kb * BLOCK_K + red
        r_ok = (r < GC) & (c0 + r < C_TOTAL)
        if IS_1X1:
            a_ptrs = x_ptr + (x_row[:, None] + (c0 + r)[None, :])
            a_mask = row_ok[:, None] & r_ok[None, :]
        else:
            in_ok = (row_ok & in_range(base_d + td * DIL_D, IN_D, INDEX64)
                     & in_range(base_h + th * DIL_H, IN_H, INDEX64) & in_range(base_w + tw * DIL_W, IN_W, INDEX64))
            x_shift = ((td * DIL_D * IN_H + th * DIL_H) * IN_W + tw * DIL_W) * C_TOTAL
            a_ptrs = x_ptr + (x_row0[:, None] + (x_shift + c0 + r)[None, :])
            a_mask = in_ok[:, None] & r_ok[None, :]
        a = tl.load(a_ptrs, mask=a_mask, other=0.0)
        if MERGE == 1:
            b_ptrs = w_ptr + (w_col[None, :] + tap * CG + r[:, None])
            b_mask = r_ok[:, None] & col_ok[None, :]
        elif VEC == 8:  # w_ptr is the packed block-diagonal operand (gmerge_pack.py): dense 8-aligned rows
            b_ptrs = w_ptr + (((group_block * taps + tap) * GC + r) * GK)[:, None] + cols[None, :]
            b_mask = (r < GC)[:, None] & (cols < GK)[None, :]
        else:
            red_group = r // CG
            b_ptrs = w_ptr + (w_col[None, :] + tap * CG + (r - red_group * CG)[:, None])
            b_mask = r_ok[:, None] & col_ok[None, :] & (red_group[:, None] == col_group[None, :])
        b = tl.load(b_ptrs, mask=b_mask, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        # Advance (td, th, tw, kb) like an odometer.
        kb += 1
        wrap = kb == k_blocks
        kb = tl.where(wrap, 0, kb)
        tap += wrap.to(tap.dtype)
        tw += wrap.to(tw.dtype)
        wrap = tw == F_W
        tw = tl.where(wrap, 0, tw)
        th += wrap.to(th.dtype)
        wrap = th == F_H
        th = tl.where(wrap, 0, th)
        td += wrap.to(td.dtype)

    if SPLIT_K > 1:  # this split's row of the fp32 workspace [SPLIT_K, Y elements]
        y_ptr += split.to(tl.int64) * M * K_TOTAL
    y_ptrs = y_ptr + (rows * K_TOTAL)[:, None] + (k0 + cols)[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def spatial_args(problem: ConvProblem) -> tuple[int, ...]:
    """The 3D view of a problem's sizes, in the kernel's parameter order after the channel counts."""
    return (*as3d(problem.input_size, 1), *as3d(problem.output_size, 1), *as3d(problem.filter_size, 1),
            *as3d(problem.stride, 1), *as3d(problem.dilation, 1), *as3d(problem.pad_begin, 0))


class IgemmForward:
    direction = Direction.FORWARD
    families = frozenset({Family.IGEMM, Family.GMERGE, Family.GEMM1X1})

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        return tensor_core_programs(config, _igemm_fwd_kernel, ("x_ptr", "w_ptr", "y_ptr"), _SIZE_PARAMS,
                                    backward_data=False)

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        """fp32 elements: the split-K partials (``split_k`` copies of Y, rounded up to 16 bytes), then
        gmerge's packed weights (v8)."""
        return partials_elements(problem.output_elements, config) + gmerge_pack.workspace_elements(problem, config)

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        m = problem.batch * _prod(problem.output_size)
        tiles = cdiv(m, config.block_m) * cdiv(config.merge * problem.k_per_group, config.block_n)
        grid = (tiles, cdiv(problem.groups, config.merge), config.split_k)
        sizes = (problem.batch, problem.groups, problem.c_per_group, problem.k_per_group, *spatial_args(problem))
        return tensor_core_launches(problem, config, grid, sizes, first, second, out, workspace,
                                    problem.output_elements, self.workspace_elements(problem, config))


def tensor_core_programs(config: KernelConfig, kernel, pointers: tuple[str, str, str], size_params: tuple[str, ...],
                         *, backward_data: bool) -> dict[str, Program]:
    """A forward / backward-data tensor-core kernel's programs: ``main`` (``pointers``: its two operands and
    its result, fp32 partials with split-K; ``size_params``: its integer arguments), gmerge's weight packing
    (v8), and with split-K the reduce of the partials."""
    ptr = pointer_type(config.dtype)
    ints = int_type(config)
    first, second, result = pointers
    types = {first: ptr, second: ptr, result: "*fp32" if config.split_k > 1 else ptr,
             **{name: ints for name in size_params}}
    constexprs = {**tensor_core_constexprs(config), "SPLIT_K": config.split_k}
    # Backward-data's main program gets a register budget (``register_cap``): left to itself ptxas spends
    # more registers than its forward twin (sm_90: 143 against 102 on the 128×128×64 8-warp tile), so fewer
    # CTAs share an SM than shared memory allows.
    programs = {"main": Program(kernel, constexprs, types, config.num_warps, config.num_stages,
                                fixed_sizes(config, kernel), max_registers=register_cap(config)),
                **gmerge_pack.programs(config, backward_data=backward_data)}
    return with_split_reduce(programs, config)


def tensor_core_launches(problem: ConvProblem, config: KernelConfig, grid: tuple[int, int, int], sizes: tuple,
                         first, second, out, workspace, result_elements: int, workspace_elements: int) -> list[Launch]:
    """A forward / backward-data tensor-core plan's launches: gmerge's weight packing (v8), the main program
    (``sizes``: its size arguments), and with split-K the reduce of its fp32 partials into ``out``. The
    workspace (``workspace_elements`` fp32) holds the partials (``split_k`` copies of the ``result_elements``
    result) first, then the packed weights."""
    partials = partials_elements(result_elements, config)
    if partials and (workspace is None or workspace.numel() < workspace_elements):
        raise ValueError(f"workspace: split_k={config.split_k} needs {workspace_elements} fp32 elements")
    launches = []
    weight = second
    if gmerge_pack.packs_weights(config):
        pack, weight = gmerge_pack.pack_launch(problem, config, second, workspace[partials:])
        launches.append(pack)
    if not partials:
        return [*launches, Launch("main", grid, (first, weight, out, *sizes))]
    return [*launches, Launch("main", grid, (first, weight, workspace, *sizes)),
            split_reduce_launch(config, workspace, out, result_elements)]


def _prod(values: tuple[int, ...]) -> int:
    out = 1
    for v in values:
        out *= v
    return out
