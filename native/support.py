"""``is_supported(problem, config)``: whether a kernel instance can run a problem, and why not."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from tiledispatch.native.configs import GROUP_PADDED_FAMILIES, Family, KernelConfig
from tiledispatch.native.kernels import channel_pad_geometry, halo_tiling
from tiledispatch.native.kernels.gwalk_geometry import MAX_LANES_PER_SPLIT, weight_walk_geometry
from tiledispatch.native.kernels.tma_geometry import TmaGeometry
from tiledispatch.native.problem import INT32_INDEX_LIMIT, ConvProblem, Direction

#: gmerge and direct target small groups; larger groups waste a merged tile or CUDA-core FMAs.
GMERGE_MAX_CHANNELS_PER_GROUP = 32
DIRECT_MAX_CHANNELS_PER_GROUP = 16
#: Largest fp32 split-K workspace of a forward / backward-data kernel (``split_k`` copies of Y or dX): past
#: it the partials' traffic (written, then read by the reduce) alone outweighs what the extra CTAs gain,
#: and split 16 of a tensor near 2^31 elements would not fit in GPU memory.
MAX_SPLIT_PARTIALS_BYTES = 1 << 30


@dataclass(frozen=True)
class Support:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


_YES = Support(True)


def is_supported(problem: ConvProblem, config: KernelConfig) -> Support:
    """``Support(True)`` or ``Support(False, reason)``; the reason names the problem field.

    A 2D kernel supports a 3D problem that is a 2D one (:attr:`ConvProblem.planar`) when it supports that
    2D problem; the launchers run it there over the same bytes."""
    if config.direction is not problem.direction:
        return Support(False, f"direction: kernel is {config.direction.value}, problem is {problem.direction.value}")
    if config.dtype is not problem.dtype:
        return Support(False, f"dtype: kernel is {config.dtype.value}, problem is {problem.dtype.value}")
    if config.ndim != problem.ndim:
        planar = problem.kernel_problem(config.ndim)
        if planar is None:
            why = (" (only a 3D problem with a 1-deep filter or a 1x1 plane filter is a 2D one)"
                   if config.ndim == 2 else "")
            return Support(False, f"ndim: kernel is {config.ndim}d, problem is {problem.ndim}d{why}")
        support = is_supported(planar, config)
        if support:
            return support
        return Support(False, f"{support.reason} (as the 2D problem {planar.key})")
    if problem.needs_int64_index and not config.index64:
        largest = max(problem.input_elements, problem.weight_elements, problem.output_elements)
        return Support(False, f"input/weight/output: a tensor has {largest} elements (> 2^31-1); "
                              "needs a 64-bit-indexed kernel (i64)")
    if config.family in (Family.DIRECT, Family.DWROLL, Family.DWROW, Family.DWRUN) and config.index64:
        # Direct kernels keep per-row arithmetic in 32 bits; only element offsets are 64-bit.
        largest_dim = max(problem.batch, problem.in_channels, problem.out_channels, *problem.input_size,
                          *problem.output_size)
        if largest_dim > INT32_INDEX_LIMIT:
            return Support(False, f"batch/input_size/channels: a single size of {largest_dim} exceeds 2^31-1, "
                                  "beyond the direct kernels' 32-bit row arithmetic")
    if config.pad_channels:
        return Support(False, refusal) if (refusal := _channel_padding_refusal(problem, config)) else _YES
    cg, kg = problem.c_per_group, problem.k_per_group
    if config.vec in (2, 4) and problem.in_channels % config.vec:  # dwrun: vec channels a thread, one load
        return Support(False, f"in_channels: {problem.in_channels} is not divisible by {config.vec}; a v{config.vec} "
                              f"kernel loads {config.vec} neighbouring channels at once (use a v1 kernel)")
    if config.vec == 8:
        if config.family in (Family.DIRECT, Family.DWROLL, Family.DWROW):
            if problem.in_channels % 8 or problem.out_channels % 8:
                return Support(False, f"in_channels/out_channels: {problem.in_channels}/{problem.out_channels} "
                                      "not divisible by 8 (kernel needs v8 alignment)")
        elif config.family in (Family.GMERGE, Family.GWALK, Family.HALO):
            # gmerge / gwalk / halo load and store the merged channel runs (MERGE·C/G, MERGE·K/G) as wholes.
            if (config.merge * cg) % 8 or (config.merge * kg) % 8 or problem.in_channels % 8 \
                    or problem.out_channels % 8:
                return Support(False, f"in_channels/out_channels: merged runs MERGE*C/G={config.merge * cg}, "
                                      f"MERGE*K/G={config.merge * kg} and C={problem.in_channels}, "
                                      f"K={problem.out_channels} must be divisible by 8 (kernel needs v8 alignment)")
        elif cg % 8 or kg % 8:
            return Support(False, f"in_channels/out_channels: C/G={cg}, K/G={kg} not divisible by 8 "
                                  "(kernel needs v8 alignment)")
    if config.family is Family.GEMM1X1:
        if any(f != 1 for f in problem.filter_size):
            return Support(False, f"filter_size: gemm1x1 needs a 1x1 filter, got {list(problem.filter_size)}")
        if any(s != 1 for s in problem.stride):
            return Support(False, f"stride: gemm1x1 needs stride 1, got {list(problem.stride)}")
        if any(problem.pad_begin) or any(problem.pad_end):
            return Support(False, "pad_begin/pad_end: gemm1x1 needs no padding")
    if config.family is Family.GMERGE:
        if config.merge > problem.groups:
            return Support(False, f"groups: gmerge merges {config.merge} groups per CTA, problem has {problem.groups}")
        if max(cg, kg) > GMERGE_MAX_CHANNELS_PER_GROUP:
            return Support(False, f"in_channels/out_channels: gmerge is for C/G and K/G <= "
                                  f"{GMERGE_MAX_CHANNELS_PER_GROUP}, got {cg}/{kg}")
    if config.family is Family.DIRECT and max(cg, kg) > DIRECT_MAX_CHANNELS_PER_GROUP:
        return Support(False, f"in_channels/out_channels: direct is for C/G and K/G <= "
                              f"{DIRECT_MAX_CHANNELS_PER_GROUP}, got {cg}/{kg}")
    if config.family is Family.DIRECT and config.group_m > 1 and (cg != 1 or kg == 1):
        return Support(False, f"in_channels/out_channels: direct group_m {config.group_m} (the multiplier binary) "
                              f"is for depthwise-multiplier problems (C/G = 1, K/G > 1), got {cg}/{kg}")
    if config.family is Family.DIRECT and config.block_k > 1:  # the depthwise tap-row program
        if cg != 1 or kg != 1:
            return Support(False, f"in_channels/out_channels: direct block_k {config.block_k} (tap rows) is for "
                                  f"depthwise problems (C/G = K/G = 1), got {cg}/{kg}")
        if problem.filter_size[-1] > config.block_k:
            return Support(False, f"filter_size: direct block_k {config.block_k} unrolls at most {config.block_k} "
                                  f"filter columns, got {problem.filter_size[-1]}")
    if config.family is Family.DWROLL:
        refusal = _dwroll_refusal(problem, config)
        if refusal:
            return Support(False, refusal)
    if config.family is Family.DWROW:
        refusal = _dwrow_refusal(problem, config)
        if refusal:
            return Support(False, refusal)
    if config.family is Family.DWRUN:
        refusal = _dwrun_refusal(problem, config)
        if refusal:
            return Support(False, refusal)
    if config.family is Family.TMA:
        refusal = _tma_refusal(problem, config)
        if refusal:
            return Support(False, refusal)
    if config.family is Family.GWALK:
        refusal = _gwalk_refusal(problem, config)
        if refusal:
            return Support(False, refusal)
    if config.family is Family.HALO:
        refusal = _halo_refusal(problem, config)
        if refusal:
            return Support(False, refusal)
    if config.split_k > 1 and problem.direction is not Direction.BACKWARD_WEIGHT:
        # Forward / backward-data (igemm, gmerge, gemm1x1): any reduction length (an empty split stores
        # zero partials); only the fp32 partials' size is bounded.
        result = problem.output_elements if problem.direction is Direction.FORWARD else problem.input_elements
        partials = config.split_k * result * 4
        if partials > MAX_SPLIT_PARTIALS_BYTES:
            return Support(False, f"batch/input_size: split_k={config.split_k} would need {partials} bytes of fp32 "
                                  f"partials (> {MAX_SPLIT_PARTIALS_BYTES}); the unsplit kernel runs it")
    elif config.split_k > 1 and config.family not in (Family.DWROLL, Family.DWROW, Family.DWRUN, Family.GWALK):
        # (dwroll, dwrow, dwrun and gwalk: their empty splits write zero partials)
        reduction = problem.batch * math.prod(problem.output_size)
        step = config.block_m if config.family is Family.DIRECT else config.block_k
        if -(-reduction // step) < config.split_k:  # every split must own at least one step
            return Support(False, f"batch/output size: reduction of {reduction} positions is too short for "
                                  f"split_k={config.split_k} steps of {step}")
    return _YES


def _gwalk_refusal(problem: ConvProblem, config: KernelConfig) -> str:
    """Why a ``gwalk`` kernel cannot run the problem ('' when it can): a 3×3 filter, stride 1 and dilation 1
    (compiled into the walk; backward-weight kernels walking one row with pointer loads take any), a merged
    block's reduction and output channels within the config's tiles, 32-bit offsets (``needs_int64_index``
    already refused above for i32 configs)."""
    if tuple(problem.filter_size) != (3, 3):
        return f"filter_size: gwalk kernels run 3x3 filters, got {list(problem.filter_size)}"
    if config.merge > problem.groups:
        return f"groups: gwalk merges {config.merge} groups per program, problem has {problem.groups}"
    one_row_weight = (problem.direction is Direction.BACKWARD_WEIGHT and config.group_m == 1
                      and config.num_stages == 1)
    if not one_row_weight and (any(s != 1 for s in problem.stride) or any(d != 1 for d in problem.dilation)):
        walk = "fed by TMA boxes" if config.num_stages > 1 else f"walking {config.group_m} rows"
        return (f"stride/dilation: gwalk kernels {walk} need stride 1 and dilation 1, got "
                f"stride {list(problem.stride)}, dilation {list(problem.dilation)}")
    if problem.direction is Direction.BACKWARD_WEIGHT:
        return _gwalk_weight_refusal(problem, config)
    return _merged_tile_refusal(problem, config)


def _halo_refusal(problem: ConvProblem, config: KernelConfig) -> str:
    """Why a ``halo`` kernel cannot run the problem ('' when it can): a 3×3 filter; stride 1 (any dilation:
    halo_tiling.py's residue classes) or, forward at dilation 1 where the config's stride-2 ring fits in shared
    memory, stride 2 (both compiled in); whole merged group blocks within the config's channel tiles (the
    8-divisible channel runs are checked above), 32-bit offsets (refused above for i32 configs)."""
    if tuple(problem.filter_size) != (3, 3):
        return f"filter_size: halo kernels run 3x3 filters, got {list(problem.filter_size)}"
    if tuple(problem.stride) == (2, 2):
        if problem.direction is not Direction.FORWARD:
            return f"stride: halo {problem.direction.value} kernels need stride 1, got {list(problem.stride)}"
        if any(d != 1 for d in problem.dilation):
            return (f"stride/dilation: halo kernels run stride 2 at dilation 1, got dilation "
                    f"{list(problem.dilation)}")
        if not halo_tiling.strided_fits(config):
            return (f"stride: this halo tile's stride-2 ring ({halo_tiling.smem_bytes(config, 2)} B of shared "
                    f"memory) does not fit; stride 2 runs on tiles up to {halo_tiling.SMEM_LIMIT_BYTES} B")
    elif any(s != 1 for s in problem.stride):
        return f"stride: halo kernels need stride 1 or (2, 2) (forward), got {list(problem.stride)}"
    if problem.groups % config.merge:
        return f"groups: halo merges {config.merge} groups per program, problem has {problem.groups}"
    return _merged_tile_refusal(problem, config)


def _merged_tile_refusal(problem: ConvProblem, config: KernelConfig) -> str:
    """Forward / backward-data walks (gwalk, halo): a merged block's reduction channels within block_k and its
    output channels within block_n ('' when they fit)."""
    reduction, columns = problem.c_per_group, problem.k_per_group
    if problem.direction is Direction.BACKWARD_DATA:
        reduction, columns = columns, reduction
    if config.merge * reduction > config.block_k or config.merge * columns > config.block_n:
        names = ("K/G", "C/G") if problem.direction is Direction.BACKWARD_DATA else ("C/G", "K/G")
        return (f"in_channels/out_channels: MERGE*{names[0]}={config.merge * reduction} and MERGE*{names[1]}="
                f"{config.merge * columns} must fit the kernel's block_k={config.block_k} and "
                f"block_n={config.block_n}")
    return ""


def _gwalk_weight_refusal(problem: ConvProblem, config: KernelConfig) -> str:
    """Backward-weight: a merged block's output / input channels within block_m / block_n, and at most
    :data:`MAX_LANES_PER_SPLIT` reduction lanes per split (one tensor-core accumulator each)."""
    if config.merge * problem.k_per_group > config.block_m or config.merge * problem.c_per_group > config.block_n:
        return (f"in_channels/out_channels: MERGE*K/G={config.merge * problem.k_per_group} and MERGE*C/G="
                f"{config.merge * problem.c_per_group} must fit the kernel's block_m={config.block_m} and "
                f"block_n={config.block_n}")
    lanes = weight_walk_geometry(problem, config)["lanes_per_split"]
    if lanes > MAX_LANES_PER_SPLIT:
        return (f"batch/input_size: each of split_k={config.split_k} splits would sum {lanes} positions in one "
                f"tensor-core accumulator (> {MAX_LANES_PER_SPLIT}); a kernel with more splits runs it")
    return ""


def _dwroll_refusal(problem: ConvProblem, config: KernelConfig) -> str:
    """Why a ``dwroll`` kernel cannot run the problem ('' when it can): depthwise, rows walked with
    stride 1 and dilation 1 (backward-data: every stride 1), the filter height the kernel unrolls."""
    refusal = _depthwise_rows_refusal(problem, config)
    if refusal:
        return refusal
    if problem.stride[-2] != 1 or problem.dilation[-2] != 1:
        return (f"stride/dilation: dwroll kernels walk the rows with stride 1 and dilation 1, got stride "
                f"{list(problem.stride)}, dilation {list(problem.dilation)}")
    if problem.direction is Direction.BACKWARD_DATA and any(s != 1 for s in problem.stride):
        return f"stride: backward-data dwroll kernels need stride 1, got {list(problem.stride)}"
    filter_h, filter_w = problem.filter_size[-2:]
    if filter_h != config.block_k or filter_w > config.block_k:
        return (f"filter_size: dwroll block_k {config.block_k} runs filters {config.block_k} high and at most "
                f"{config.block_k} wide, got {list(problem.filter_size)}")
    return ""


def _depthwise_rows_refusal(problem: ConvProblem, config: KernelConfig, *, multiplier: bool = False) -> str:
    """What dwroll, dwrow and dwrun need ('' when it holds): a depthwise problem (``multiplier``: C/G = 1 with any
    K/G, dwrow's scalar binary), and one row of the input or the output (W·C elements) within 32-bit offsets."""
    family = config.family.value
    if multiplier and problem.c_per_group != 1:
        return (f"in_channels: the scalar {family} binary (vec 1) needs C/G = 1 (depthwise, with any K/G), got "
                f"C/G = {problem.c_per_group}")
    if not multiplier and (problem.c_per_group != 1 or problem.k_per_group != 1):
        return (f"in_channels/out_channels: {family} kernels are for depthwise problems (C/G = K/G = 1), got "
                f"{problem.c_per_group}/{problem.k_per_group}")
    widest = max(problem.input_size[-1] * problem.in_channels, problem.output_size[-1] * problem.out_channels)
    if widest > INT32_INDEX_LIMIT:
        return (f"input_size/in_channels: one row of {widest} elements exceeds 2^31-1 ({family} row offsets are "
                "32-bit)")
    return ""


def _dwrow_refusal(problem: ConvProblem, config: KernelConfig) -> str:
    """Why a ``dwrow`` kernel cannot run the problem ('' when it can): depthwise (``vec`` 1, the scalar binary:
    C/G = 1 and any K/G), a filter at most ``block_k`` wide (any height, depth, stride, dilation and padding),
    32-bit row offsets."""
    refusal = _depthwise_rows_refusal(problem, config, multiplier=config.vec == 1)
    if refusal or problem.filter_size[-1] <= config.block_k:
        return refusal
    return (f"filter_size: dwrow block_k {config.block_k} unrolls at most {config.block_k} filter columns, "
            f"got {list(problem.filter_size)}")


def _dwrun_refusal(problem: ConvProblem, config: KernelConfig) -> str:
    """Why a ``dwrun`` kernel cannot run the problem ('' when it can): depthwise, rows and columns walked with
    stride 1 and dilation 1 (backward-weight: any depth stride, dilation and padding; backward-data: every stride
    1), a filter ``block_k`` high and at most that wide, 32-bit row offsets. (The config is 2D in the data
    directions: KernelConfig checks.)"""
    refusal = _depthwise_rows_refusal(problem, config)
    if refusal:
        return refusal
    if any(s != 1 for s in problem.stride[-2:]) or any(d != 1 for d in problem.dilation[-2:]):
        return (f"stride/dilation: dwrun kernels walk rows and columns with stride 1 and dilation 1, got stride "
                f"{list(problem.stride)}, dilation {list(problem.dilation)}")
    filter_h, filter_w = problem.filter_size[-2:]
    if problem.direction is Direction.BACKWARD_DATA and any(s != 1 for s in problem.stride):
        return f"stride: backward-data dwrun kernels need stride 1, got {list(problem.stride)}"
    if filter_h != config.block_k or filter_w > config.block_k:
        return (f"filter_size: dwrun block_k {config.block_k} runs filters {config.block_k} high and at most "
                f"{config.block_k} wide, got {list(problem.filter_size)}")
    return ""


def _tma_refusal(problem: ConvProblem, config: KernelConfig) -> str:
    """Why a ``tma`` kernel cannot run the problem ('' when it can): stride 1, every tile of the
    reduction inside one group, pads the padded copy can express, 32-bit padded offsets."""
    if any(s != 1 for s in problem.stride):
        return f"stride: tma kernels need stride 1, got {list(problem.stride)}"
    shape = TmaGeometry(problem)
    reduction_name = "in_channels" if shape.forward else "out_channels"
    if shape.reduction % config.block_k:
        return (f"{reduction_name}: {shape.reduction} per group is not a multiple of the tma kernel's "
                f"block_k {config.block_k}")
    begin, end = shape.pads
    if min(begin + end) < 0:
        return (f"pad_begin/pad_end: backward-data tma kernels need pads <= dilation*(filter-1), got "
                f"{list(problem.pad_begin)}/{list(problem.pad_end)}")
    if shape.rows * problem.groups * shape.reduction > INT32_INDEX_LIMIT:
        return "input/output: the padded activations exceed 2^31-1 elements (tma kernels index in 32 bits)"
    return ""


def _channel_padding_refusal(problem: ConvProblem, config: KernelConfig) -> str:
    """Why a ``pad_channels`` kernel cannot run the problem ('' when it can): C/G = 1 for the direct and dwrow ones
    (they pad the groups), C/G > 1 for the others (they pad each group's runs), channel runs not aligned already
    (else the plain v8 tile runs it without the copies), padding at most doubling the work
    (:data:`~tiledispatch.native.kernels.channel_pad_geometry.MAX_WORK_INFLATION`), and that v8 tile running the
    padded problem."""
    pads_groups = channel_pad_geometry.pads_groups(problem)
    if config.family in GROUP_PADDED_FAMILIES and not pads_groups:
        return (f"in_channels: {config.family.value} pad_channels kernels pad the groups of C/G = 1 problems "
                f"(depthwise, multiplier), got C/G = {problem.c_per_group}; the direct v1 and v8 kernels run it")
    if config.family not in GROUP_PADDED_FAMILIES and pads_groups:
        return (f"in_channels/out_channels: {config.family.value} pad_channels kernels pad each group's runs: C/G = 1, "
                f"K/G = {problem.k_per_group} padded to multiples of {channel_pad_geometry.CHANNEL_MULTIPLE} "
                f"multiplies the work by {channel_pad_geometry.runs_inflation(problem):.2f}; the direct and dwrow "
                "pad_channels kernels pad the groups instead")
    what = (f"groups={problem.groups} (C/G = 1)" if pads_groups
            else f"C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    if channel_pad_geometry.aligned(problem):
        return (f"in_channels/out_channels: {what} are multiples of {channel_pad_geometry.CHANNEL_MULTIPLE} already; "
                f"the v8 kernel {config.unpadded.name} runs the problem without padded copies")
    inflation = channel_pad_geometry.work_inflation(problem)
    if inflation > channel_pad_geometry.MAX_WORK_INFLATION:
        return (f"in_channels/out_channels: padding {what} to multiples of {channel_pad_geometry.CHANNEL_MULTIPLE} "
                f"multiplies the work by {inflation:.2f} (more than {channel_pad_geometry.MAX_WORK_INFLATION:g}); "
                "the v1, direct and gmerge kernels run it")
    padded = channel_pad_geometry.padded_problem(problem)
    weight_copy = channel_pad_geometry.repack(problem.weight_shape, padded.weight_shape, weight=True)
    if weight_copy.slabs > channel_pad_geometry.MAX_SLABS:  # padded runs: a slab per padded output channel
        return (f"out_channels: {padded.out_channels} padded output channels exceed the weight copy's grid "
                f"({channel_pad_geometry.MAX_SLABS} slabs)")
    support = is_supported(padded, config.unpadded)
    if not support:
        return (f"{support.reason} (as the channel-padded problem G={padded.groups}, C/G={padded.c_per_group}, "
                f"K/G={padded.k_per_group})")
    return ""


def supported_configs(problem: ConvProblem, configs: Iterable[KernelConfig]) -> list[KernelConfig]:
    return [c for c in configs if is_supported(problem, c)]
