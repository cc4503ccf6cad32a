"""is_supported(problem, kernel): yes, or no with a reason naming the field (DESIGN §3–§4).

The coverage property: every valid problem is runnable by at least one kernel of ``default``."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from tests.strategies import any_problems, huge_problems, rule_slice
from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.support import (
    DIRECT_MAX_CHANNELS_PER_GROUP,
    GMERGE_MAX_CHANNELS_PER_GROUP,
    MAX_SPLIT_PARTIALS_BYTES,
    Support,
    is_supported,
    supported_configs,
)

#: What a reason may name: a problem field, a derived problem attribute, or one of its tensors.
PROBLEM_NAMES = {f.name for f in dataclasses.fields(ConvProblem)} | {"ndim", "input", "weight", "output"}


def problem(**overrides) -> ConvProblem:
    fields = dict(direction="fwd", dtype="bf16", batch=4, groups=4, in_channels=64, out_channels=64,
                  input_size=(14, 14), filter_size=(3, 3), stride=(1, 1), dilation=(1, 1), pad_begin=(1, 1),
                  pad_end=(1, 1))
    fields.update(overrides)
    return ConvProblem(**fields)


def one_by_one(**overrides) -> ConvProblem:
    return problem(**{**dict(filter_size=(1, 1), pad_begin=(0, 0), pad_end=(0, 0)), **overrides})


def kernel(family=Family.IGEMM, direction=Direction.FORWARD, dtype=DType.BF16, ndim=2, **overrides) -> KernelConfig:
    if family is Family.DIRECT:
        fields = dict(block_m=64, block_n=32, block_k=1, num_warps=4, num_stages=1, group_m=1)
    else:
        fields = dict(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=3, group_m=8,
                      merge=4 if family is Family.GMERGE else 1)
    fields.update(overrides)
    return KernelConfig(direction=direction, dtype=dtype, ndim=ndim, family=family, **fields)


def assert_no(support: Support, field: str) -> None:
    assert isinstance(support, Support)
    assert not support and support.ok is False
    prefix, sep, rule = support.reason.partition(":")
    assert sep and rule.strip(), support.reason
    named = {part.strip() for part in prefix.split("/")}
    assert field in named, support.reason


NO_CASES = [
    # (id, problem, kernel, field the reason must name)
    ("direction", problem(direction="bwd_data"), kernel(), "direction"),
    ("dtype", problem(dtype="fp16"), kernel(), "dtype"),
    ("dtype_fp32", problem(dtype="fp32"), kernel(), "dtype"),
    ("ndim", problem(input_size=(4, 14, 14), filter_size=(3, 3, 3), stride=(1, 1, 1), dilation=(1, 1, 1),
                     pad_begin=(1, 1, 1), pad_end=(1, 1, 1)), kernel(), "ndim"),
    ("ndim_3d_kernel", problem(), kernel(ndim=3), "ndim"),
    ("v8_odd_c", problem(groups=3, in_channels=27, out_channels=48), kernel(vec=8), "in_channels"),
    ("v8_odd_k", problem(groups=2, in_channels=32, out_channels=6), kernel(vec=8), "out_channels"),
    ("v8_c_per_group_12", problem(groups=2, in_channels=24, out_channels=32), kernel(vec=8), "in_channels"),
    ("v8_direct_odd", problem(groups=5, in_channels=5, out_channels=5), kernel(Family.DIRECT, vec=8),
     "in_channels"),
    ("v8_gemm1x1_odd", one_by_one(groups=1, in_channels=3, out_channels=64), kernel(Family.GEMM1X1, vec=8),
     "in_channels"),
    ("gemm1x1_3x3", problem(pad_begin=(0, 0), pad_end=(0, 0)), kernel(Family.GEMM1X1), "filter_size"),
    ("gemm1x1_1x3", one_by_one(filter_size=(1, 3)), kernel(Family.GEMM1X1), "filter_size"),
    ("gemm1x1_stride2", one_by_one(stride=(2, 2)), kernel(Family.GEMM1X1), "stride"),
    ("gemm1x1_stride_w", one_by_one(stride=(1, 2)), kernel(Family.GEMM1X1), "stride"),
    ("gemm1x1_pad_begin", one_by_one(pad_begin=(1, 0)), kernel(Family.GEMM1X1), "pad_begin"),
    ("gemm1x1_pad_end", one_by_one(pad_end=(0, 1)), kernel(Family.GEMM1X1), "pad_end"),
    ("gmerge_more_than_groups", problem(groups=2, in_channels=8, out_channels=8), kernel(Family.GMERGE, merge=4),
     "groups"),
    ("gmerge_dense", problem(groups=1, in_channels=8, out_channels=8), kernel(Family.GMERGE, merge=2), "groups"),
    ("gmerge_big_groups", problem(groups=4, in_channels=256, out_channels=256), kernel(Family.GMERGE, merge=2),
     "in_channels"),
    ("direct_cg_64", problem(groups=2, in_channels=128, out_channels=128), kernel(Family.DIRECT), "in_channels"),
    ("direct_kg_64", problem(groups=2, in_channels=2, out_channels=128), kernel(Family.DIRECT), "out_channels"),
    ("split_k_tiny_reduction",
     problem(direction="bwd_weight", batch=1, input_size=(4, 4)),
     kernel(direction=Direction.BACKWARD_WEIGHT, split_k=16), "batch"),
    ("split_k_direct_tiny_reduction",
     problem(direction="bwd_weight", batch=1, groups=8, in_channels=8, out_channels=8, input_size=(8, 8)),
     kernel(Family.DIRECT, direction=Direction.BACKWARD_WEIGHT, split_k=8), "batch"),
    # 16 copies of a 32M-element Y (2 GiB of fp32 partials > MAX_SPLIT_PARTIALS_BYTES)
    ("split_k_fwd_partials_too_big", problem(batch=128, groups=1, in_channels=64, out_channels=64,
                                             input_size=(64, 64)), kernel(split_k=16), "batch"),
    ("split_k_bwd_data_partials_too_big", problem(direction="bwd_data", batch=128, groups=1, in_channels=64,
                                                  out_channels=64, input_size=(64, 64)),
     kernel(direction=Direction.BACKWARD_DATA, split_k=16), "input_size"),
]


@pytest.mark.parametrize("prob, config, field", [c[1:] for c in NO_CASES], ids=[c[0] for c in NO_CASES])
def test_unsupported_gives_reason_naming_field(prob, config, field):
    assert_no(is_supported(prob, config), field)
    assert config not in supported_configs(prob, [config])


HUGE = problem(batch=256, groups=1, in_channels=256, out_channels=256, input_size=(224, 224))


def test_huge_problem_needs_int64_kernel():
    assert HUGE.needs_int64_index
    support = is_supported(HUGE, kernel())
    assert not support
    assert "i64" in support.reason or "64-bit" in support.reason
    assert is_supported(HUGE, kernel(index64=True))


def test_huge_problem_reason_names_a_field():
    support = is_supported(HUGE, kernel())
    prefix = support.reason.partition(":")[0]
    assert {part.strip() for part in prefix.split("/")} & PROBLEM_NAMES, support.reason


YES_CASES = [
    ("igemm_odd_channels", problem(groups=3, in_channels=9, out_channels=21), kernel()),
    ("igemm_depthwise", problem(groups=7, in_channels=7, out_channels=7), kernel()),
    ("igemm_3d", problem(input_size=(3, 5, 5), filter_size=(1, 3, 3), stride=(1, 2, 2), dilation=(1, 1, 1),
                         pad_begin=(0, 1, 1), pad_end=(0, 1, 1)), kernel(ndim=3)),
    ("v8_aligned", problem(groups=2, in_channels=32, out_channels=16), kernel(vec=8)),
    ("v8_direct_depthwise_aligned", problem(groups=24, in_channels=24, out_channels=48), kernel(Family.DIRECT,
                                                                                              vec=8)),
    ("gemm1x1", one_by_one(), kernel(Family.GEMM1X1)),
    ("gemm1x1_dilated", one_by_one(dilation=(2, 3)), kernel(Family.GEMM1X1, vec=8)),
    ("gmerge_exact", problem(groups=4, in_channels=16, out_channels=16), kernel(Family.GMERGE, merge=4)),
    ("gmerge_partial", problem(groups=5, in_channels=5, out_channels=10), kernel(Family.GMERGE, merge=4)),
    ("gmerge_limit", problem(groups=4, in_channels=4 * GMERGE_MAX_CHANNELS_PER_GROUP,
                             out_channels=4 * GMERGE_MAX_CHANNELS_PER_GROUP), kernel(Family.GMERGE, merge=2)),
    ("direct_depthwise", problem(groups=64, in_channels=64, out_channels=64), kernel(Family.DIRECT)),
    ("direct_limit", problem(groups=2, in_channels=2 * DIRECT_MAX_CHANNELS_PER_GROUP, out_channels=2),
     kernel(Family.DIRECT)),
    ("split_k_long_reduction", problem(direction="bwd_weight", batch=32),
     kernel(direction=Direction.BACKWARD_WEIGHT, split_k=16)),
    ("split_k_exact", problem(direction="bwd_weight", batch=2, input_size=(16, 16)),  # 2*16*16 = 16*32
     kernel(direction=Direction.BACKWARD_WEIGHT, split_k=16)),
    # Forward / backward-data split-K: any reduction length (a 1x1 over 8 channels is one 32-channel step
    # for 16 splits: 15 of them store zero partials), strided backward-data, gmerge, 3D.
    ("split_k_fwd_one_step", one_by_one(batch=1, groups=1, in_channels=8, out_channels=64),
     kernel(Family.GEMM1X1, split_k=16)),
    ("split_k_bwd_data_stride", problem(direction="bwd_data", batch=1, stride=(2, 2)),
     kernel(direction=Direction.BACKWARD_DATA, split_k=8)),
    ("split_k_gmerge", problem(batch=1, groups=8, in_channels=32, out_channels=32),
     kernel(Family.GMERGE, split_k=4)),
    ("split_k_fwd_3d", problem(batch=1, input_size=(2, 5, 5), filter_size=(1, 1, 1), stride=(1, 1, 1),
                               dilation=(1, 1, 1), pad_begin=(0, 0, 0), pad_end=(0, 0, 0)),
     kernel(ndim=3, split_k=16)),
    ("i64_small_problem", problem(), kernel(index64=True)),
    ("fp32", problem(dtype="fp32"), kernel(dtype=DType.FP32)),
    ("bwd_data_stride", problem(direction="bwd_data", stride=(2, 3)), kernel(direction=Direction.BACKWARD_DATA)),
]


@pytest.mark.parametrize("prob, config", [c[1:] for c in YES_CASES], ids=[c[0] for c in YES_CASES])
def test_supported(prob, config):
    support = is_supported(prob, config)
    assert support, support.reason
    assert support.ok is True and support.reason == ""
    assert supported_configs(prob, [config]) == [config]


def test_split_k_boundary():
    """Reduction of N·prod(out) positions against split_k × block_k: exactly enough is enough."""
    config = kernel(direction=Direction.BACKWARD_WEIGHT, split_k=16)  # 16 × 32 = 512
    assert is_supported(problem(direction="bwd_weight", batch=2, input_size=(16, 16)), config)
    assert not is_supported(problem(direction="bwd_weight", batch=1, input_size=(16, 16)), config)
    assert is_supported(problem(direction="bwd_weight", batch=1, input_size=(16, 16)),
                        dataclasses.replace(config, split_k=8))


SPLIT_DATA_KERNELS = [KernelConfig(d, DType.FP16, n, f, 64, 32, 16, 4, 2, 8, 16, 4 if f is Family.GMERGE else 1, v, i64)
                      for d in (Direction.FORWARD, Direction.BACKWARD_DATA) for n in (2, 3)
                      for f in (Family.IGEMM, Family.GMERGE, Family.GEMM1X1) for v in (1, 8) for i64 in (False, True)]


@settings(max_examples=200, deadline=None)
@given(any_problems(huge_weight=0, directions=(Direction.FORWARD, Direction.BACKWARD_DATA), dtypes=(DType.FP16,)))
def test_split_k_data_kernels_support_what_their_unsplit_twins_do(p):
    """Forward / backward-data split-K kernels (igemm, gmerge, gemm1x1) refuse only partials past
    MAX_SPLIT_PARTIALS_BYTES: below it they answer as their split_k = 1 twins, reasons included, whatever the
    reduction length (an empty split stores zero partials)."""
    result = p.output_elements if p.direction is Direction.FORWARD else p.input_elements
    for config in SPLIT_DATA_KERNELS:
        if config.direction is not p.direction or config.ndim != p.ndim:
            continue
        split, twin = is_supported(p, config), is_supported(p, dataclasses.replace(config, split_k=1))
        if twin and 16 * result * 4 > MAX_SPLIT_PARTIALS_BYTES:
            assert not split and split.reason.startswith("batch/input_size:"), split.reason
        else:
            assert split == twin, (config.name, split.reason, twin.reason)


def test_supported_configs_filters_in_order():
    prob = problem(groups=3, in_channels=9, out_channels=9)
    configs = [kernel(vec=8), kernel(), kernel(Family.GEMM1X1), kernel(Family.DIRECT), kernel(index64=True)]
    assert supported_configs(prob, configs) == [configs[1], configs[3], configs[4]]


# ---- the coverage property -------------------------------------------------------------------
DEFAULT_SLICES = {(d, t, n): rule_slice("default", d, t, n) for d in Direction for t in DType for n in (2, 3)}


def check_coverage(p: ConvProblem) -> None:
    """Some default kernel of the rank selection offers (2D for a 3D problem that is a 2D one) supports
    ``p``; every refusal names a field."""
    configs = DEFAULT_SLICES[(p.direction, p.dtype, p.canonical.ndim)]
    answers = [(c, is_supported(p, c)) for c in configs]
    chosen = [c for c, s in answers if s]
    assert chosen, f"no default kernel supports {p.key}"
    for c, s in answers:
        if not s:
            assert ":" in s.reason, (c.name, s.reason)
    if p.needs_int64_index:
        assert all(c.index64 for c in chosen)


@settings(max_examples=300, deadline=None)
@given(any_problems())
def test_every_valid_problem_has_a_default_kernel(p):
    check_coverage(p)


@settings(max_examples=60, deadline=None)
@given(huge_problems())
def test_every_huge_problem_has_a_default_kernel(p):
    assert p.needs_int64_index
    check_coverage(p)


def _planar_3d(p: ConvProblem) -> ConvProblem:
    """``p`` as a 3D problem with an idle depth axis (two depths, a 1-deep filter, no depth stride or pad)."""
    plane = slice(-2, None)
    return dataclasses.replace(p, input_size=(2, *p.input_size[plane]), filter_size=(1, *p.filter_size[plane]),
                               stride=(1, *p.stride[plane]), dilation=(1, *p.dilation[plane]),
                               pad_begin=(0, *p.pad_begin[plane]), pad_end=(0, *p.pad_end[plane]))


@settings(max_examples=150, deadline=None)
@given(any_problems())
def test_every_planar_3d_problem_has_a_2d_default_kernel(p):
    """Selection offers only 2D kernels for a 3D problem that is a 2D one: one must support it."""
    planar = _planar_3d(p)
    assert planar.planar is not None
    check_coverage(planar)


def test_2d_kernel_supports_a_3d_problem_as_its_planar_form():
    depthwise = problem(batch=4, groups=24, in_channels=24, out_channels=24, input_size=(56, 56))
    config = kernel(Family.DIRECT)
    assert is_supported(depthwise, config)
    planar_3d = _planar_3d(depthwise)
    assert is_supported(planar_3d, config)
    deep = dataclasses.replace(planar_3d, filter_size=(3, 3, 3), pad_begin=(1, 1, 1), pad_end=(1, 1, 1))
    refusal = is_supported(deep, config)
    assert not refusal and refusal.reason.startswith("ndim: kernel is 2d, problem is 3d (only a 3D problem")
    odd = dataclasses.replace(planar_3d, groups=5, in_channels=5, out_channels=5)
    refusal = is_supported(odd, kernel(Family.DIRECT, vec=8))
    assert not refusal and "(as the 2D problem " in refusal.reason and refusal.reason.startswith("in_channels")


def test_dev_suite_like_problems_have_fast_kernels():
    """Aligned grouped and depthwise problems are served by something faster than the generic kernel."""
    resnext = problem(batch=32, groups=32, in_channels=128, out_channels=128, input_size=(56, 56))
    depthwise = problem(batch=32, groups=144, in_channels=144, out_channels=144, input_size=(56, 56))
    pointwise = one_by_one(batch=32, groups=1, in_channels=64, out_channels=256, input_size=(56, 56))
    for direction in Direction:
        for prob, family in ((resnext, Family.GMERGE), (depthwise, Family.DIRECT), (pointwise, Family.GEMM1X1)):
            p = prob.with_direction(direction)
            chosen = supported_configs(p, DEFAULT_SLICES[(p.direction, p.dtype, p.ndim)])
            assert any(c.family is family for c in chosen), (direction, family)


def _dwroll(direction=Direction.FORWARD, height=3, ndim=2) -> KernelConfig:
    return KernelConfig(direction, DType.BF16, ndim, Family.DWROLL, 16, 64, height, 4, 1, 1,
                        16 if direction is Direction.BACKWARD_WEIGHT else 1, 1, 8)


def _depthwise(**overrides) -> ConvProblem:
    return problem(**{**dict(groups=64, in_channels=64, out_channels=64), **overrides})


@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
def test_dwroll_runs_depthwise_problems_of_its_filter_height(direction):
    assert is_supported(_depthwise(direction=direction), _dwroll(direction))
    # narrower filters than the height, strided and dilated columns (not backward-data: stride 1 only)
    narrow = _depthwise(direction=direction, filter_size=(5, 2), pad_begin=(2, 0), pad_end=(2, 1))
    assert is_supported(narrow, _dwroll(direction, height=5))
    if direction is not Direction.BACKWARD_DATA:
        assert is_supported(_depthwise(direction=direction, stride=(1, 2), dilation=(1, 3)), _dwroll(direction))


@pytest.mark.parametrize("overrides, config_height, field", [
    (dict(groups=32), 3, "in_channels/out_channels"),                       # C/G = 2
    (dict(stride=(2, 1)), 3, "stride/dilation"),                            # rows walked with stride 2
    (dict(dilation=(2, 1)), 3, "stride/dilation"),
    (dict(filter_size=(5, 5), pad_begin=(2, 2), pad_end=(2, 2)), 3, "filter_size"),   # taller filter
    (dict(filter_size=(3, 5), pad_begin=(1, 2), pad_end=(1, 2)), 3, "filter_size"),   # wider than tall
    (dict(groups=60, in_channels=60, out_channels=60), 3, "in_channels/out_channels"),  # not 8-aligned
])
def test_dwroll_refusals_name_the_field(overrides, config_height, field):
    support = is_supported(_depthwise(**overrides), _dwroll(height=config_height))
    assert not support and support.reason.startswith(field), support.reason


def test_dwroll_backward_data_needs_stride_one():
    support = is_supported(_depthwise(direction="bwd_data", stride=(1, 2)), _dwroll(Direction.BACKWARD_DATA))
    assert not support and "stride" in support.reason


# ---- dwrow: depthwise backward-weight by filter row ---------------------------------------------------------

def _dwrow(width=3, ndim=2, vec=8) -> KernelConfig:
    return KernelConfig(Direction.BACKWARD_WEIGHT, DType.BF16, ndim, Family.DWROW, 32, 32, width, 4, 2, 1, 32, 1, vec)


def test_dwrow_runs_any_filter_height_stride_and_dilation_up_to_its_width():
    weight = dict(direction="bwd_weight")
    assert is_supported(_depthwise(**weight), _dwrow())
    assert is_supported(_depthwise(**weight, stride=(2, 3), dilation=(2, 1)), _dwrow())  # rows strided too
    tall = _depthwise(**weight, filter_size=(9, 2), pad_begin=(4, 0), pad_end=(4, 1))  # 9 high, 2 wide
    assert is_supported(tall, _dwrow())
    assert is_supported(problem(direction="bwd_weight", groups=16, in_channels=16, out_channels=16,
                                input_size=(4, 6, 6), filter_size=(3, 3, 3), stride=(2, 2, 2), dilation=(1, 1, 1),
                                pad_begin=(1, 1, 1), pad_end=(1, 1, 1)), _dwrow(ndim=3))


@pytest.mark.parametrize("overrides, width, field", [
    (dict(groups=32), 3, "in_channels/out_channels"),                                       # C/G = 2
    (dict(filter_size=(3, 5), pad_begin=(1, 2), pad_end=(1, 2)), 3, "filter_size"),        # wider than unrolled
    (dict(groups=60, in_channels=60, out_channels=60), 3, "in_channels/out_channels"),     # not 8-aligned
    (dict(groups=2**22, in_channels=2**22, out_channels=2**22, input_size=(4, 600), batch=1), 3, "input_size"),
])
def test_dwrow_refusals_name_the_field(overrides, width, field):
    config = _dwrow(width)
    if field == "input_size":  # a row of more than 2^31 elements: past what even the 64-bit-indexed kernels take
        config = dataclasses.replace(config, index64=True)
    support = is_supported(_depthwise(direction="bwd_weight", **overrides), config)
    assert not support and support.reason.startswith(field), support.reason


def test_scalar_dwrow_runs_depthwise_multipliers_and_any_channel_count():
    weight = dict(direction="bwd_weight")
    multiplier = _depthwise(**weight, groups=15, in_channels=15, out_channels=45)  # C/G 1, K/G 3, odd totals
    odd = _depthwise(**weight, groups=60, in_channels=60, out_channels=60)
    assert is_supported(multiplier, _dwrow(vec=1)) and is_supported(odd, _dwrow(vec=1))
    assert not is_supported(multiplier, _dwrow())  # the v8 binary: depthwise, 8-aligned channels only
    grouped = is_supported(_depthwise(**weight, groups=16, in_channels=32, out_channels=32), _dwrow(vec=1))
    assert not grouped and grouped.reason.startswith("in_channels") and "C/G = 2" in grouped.reason
    wide = is_supported(_depthwise(**weight, groups=15, in_channels=15, out_channels=45, filter_size=(3, 5),
                                   pad_begin=(1, 2), pad_end=(1, 2)), _dwrow(vec=1))
    assert not wide and wide.reason.startswith("filter_size")

# ---- dwrun: depthwise backward-weight, a run of output columns a thread -----------------------------------------

def _dwrun(height=3, ndim=2) -> KernelConfig:
    return KernelConfig(Direction.BACKWARD_WEIGHT, DType.BF16, ndim, Family.DWRUN, 7, 32, height, 4, 2, 4, 32, 1, 1)


def test_dwrun_runs_stride_one_rows_and_columns_of_its_height_any_channel_count():
    weight = dict(direction="bwd_weight")
    assert is_supported(_depthwise(**weight), _dwrun())
    assert is_supported(_depthwise(**weight, groups=13, in_channels=13, out_channels=13), _dwrun())  # not 8-aligned
    narrow = _depthwise(**weight, filter_size=(7, 2), pad_begin=(4, 0), pad_end=(2, 1))  # 7 high, 2 wide
    assert is_supported(narrow, _dwrun(7))
    assert is_supported(problem(direction="bwd_weight", groups=16, in_channels=16, out_channels=16,
                                input_size=(5, 6, 6), filter_size=(3, 3, 3), stride=(2, 1, 1), dilation=(2, 1, 1),
                                pad_begin=(1, 1, 1), pad_end=(1, 1, 1)), _dwrun(ndim=3))  # depth strided, dilated


@pytest.mark.parametrize("overrides, height, field", [
    (dict(groups=32), 3, "in_channels/out_channels"),                                       # C/G = 2
    (dict(stride=(1, 2)), 3, "stride/dilation"),                                             # strided columns
    (dict(dilation=(2, 1), pad_begin=(2, 1), pad_end=(2, 1)), 3, "stride/dilation"),        # dilated rows
    (dict(filter_size=(3, 5), pad_begin=(1, 2), pad_end=(1, 2)), 3, "filter_size"),        # wider than high
    (dict(filter_size=(5, 5), pad_begin=(2, 2), pad_end=(2, 2)), 3, "filter_size"),        # taller than unrolled
    (dict(groups=2**22, in_channels=2**22, out_channels=2**22, input_size=(4, 600), batch=1), 3, "input_size"),
])
def test_dwrun_refusals_name_the_field(overrides, height, field):
    config = _dwrun(height)
    if field == "input_size":  # a row of more than 2^31 elements: past what even the 64-bit-indexed kernels take
        config = dataclasses.replace(config, index64=True)
    support = is_supported(_depthwise(direction="bwd_weight", **overrides), config)
    assert not support and support.reason.startswith(field), support.reason


def test_dwrun_channel_pairs_need_an_even_channel_count():
    pair = dataclasses.replace(_dwrun(), direction=Direction.FORWARD, split_k=1, block_n=64, vec=2)
    assert is_supported(_depthwise(groups=14, in_channels=14, out_channels=14), pair)  # even, not 8-aligned
    support = is_supported(_depthwise(groups=13, in_channels=13, out_channels=13), pair)
    assert not support and support.reason.startswith("in_channels"), support.reason
    assert is_supported(_depthwise(groups=13, in_channels=13, out_channels=13),
                        dataclasses.replace(pair, block_n=32, vec=1))  # the v1 tile runs it


# ---- gwalk: 2D 3x3 stride-1 grouped walks ------------------------------------------------------------------

def _walk(direction=Direction.FORWARD, side=32, merge=4) -> KernelConfig:
    return KernelConfig(direction, DType.BF16, 2, Family.GWALK, 64, side, side, 4, 1, 4, 1, merge, 8)


def _resnext(**overrides) -> ConvProblem:  # 32 groups of 8 channels
    return problem(**{**dict(groups=32, in_channels=256, out_channels=256, input_size=(28, 28)), **overrides})


@pytest.mark.parametrize("direction", [Direction.FORWARD, Direction.BACKWARD_DATA], ids=lambda d: d.value)
def test_gwalk_runs_grouped_3x3_stride_1_problems(direction):
    assert is_supported(_resnext(direction=direction), _walk(direction))
    # asymmetric pads, a partial last group block (6 groups, 4 merged), K/G twice C/G within the tiles
    odd = _resnext(direction=direction, groups=6, in_channels=48, out_channels=96, pad_begin=(0, 2), pad_end=(2, 0))
    assert is_supported(odd, _walk(direction, merge=2))


@pytest.mark.parametrize("direction", [Direction.FORWARD, Direction.BACKWARD_DATA], ids=lambda d: d.value)
@pytest.mark.parametrize("overrides, merge, field", [
    (dict(stride=(2, 2)), 4, "stride/dilation"),
    (dict(dilation=(1, 2), pad_begin=(1, 2), pad_end=(1, 2)), 4, "stride/dilation"),
    (dict(filter_size=(5, 5), pad_begin=(2, 2), pad_end=(2, 2)), 4, "filter_size"),
    (dict(filter_size=(3, 1), pad_begin=(1, 0), pad_end=(1, 0)), 4, "filter_size"),
    (dict(groups=8, in_channels=256, out_channels=256), 2, "in_channels/out_channels"),  # 2 x 32 > 32
    (dict(groups=2, in_channels=16, out_channels=16), 4, "groups"),                      # merges more than G
    (dict(groups=3, in_channels=12, out_channels=12), 2, "in_channels/out_channels"),    # C = 12: no v8
])
def test_gwalk_refusals_name_the_field(direction, overrides, merge, field):
    support = is_supported(_resnext(direction=direction, **overrides), _walk(direction, merge=merge))
    assert_no(support, field.split("/")[0])


def _weight_walk(side=32, lanes=64, split_k=16, merge=4, rows=4) -> KernelConfig:
    return KernelConfig(Direction.BACKWARD_WEIGHT, DType.BF16, 2, Family.GWALK, side, side, lanes, 4, 1, rows,
                        split_k, merge, 8)


@pytest.mark.parametrize("overrides", [dict(stride=(2, 2)), dict(dilation=(2, 2), pad_begin=(2, 2), pad_end=(2, 2)),
                                       dict(stride=(2, 1), dilation=(1, 3), pad_begin=(0, 3), pad_end=(1, 3))])
def test_gwalk_backward_weight_one_row_walks_take_strides_and_dilations(overrides):
    prob = _resnext(direction=Direction.BACKWARD_WEIGHT, **overrides)
    assert is_supported(prob, _weight_walk(rows=1))
    assert_no(is_supported(prob, _weight_walk(rows=2)), "stride")  # the walk's row sharing is compiled in
    five = _resnext(direction=Direction.BACKWARD_WEIGHT, filter_size=(5, 5), pad_begin=(2, 2), pad_end=(2, 2))
    assert_no(is_supported(five, _weight_walk(rows=1)), "filter_size")


@pytest.mark.parametrize("rows", [1, 2, 4])
def test_gwalk_backward_weight_tma_walks_need_stride_1_and_dilation_1(rows):
    """The TMA walks (num_stages 2, 3) load fixed boxes: every walk length runs stride 1 and refuses the rest,
    one-row walks included."""
    tma = dataclasses.replace(_weight_walk(rows=rows), num_stages=2)
    assert is_supported(_resnext(direction=Direction.BACKWARD_WEIGHT), tma)
    for overrides in (dict(stride=(2, 2)), dict(dilation=(2, 2), pad_begin=(2, 2), pad_end=(2, 2))):
        support = is_supported(_resnext(direction=Direction.BACKWARD_WEIGHT, **overrides), tma)
        assert_no(support, "stride")
        assert "TMA" in support.reason


def test_gwalk_backward_weight_runs_grouped_3x3_stride_1_problems():
    assert is_supported(_resnext(direction=Direction.BACKWARD_WEIGHT), _weight_walk())
    # more splits than reduction units: the empty splits write zero partials
    assert is_supported(_resnext(direction=Direction.BACKWARD_WEIGHT, batch=1, input_size=(4, 4)),
                        _weight_walk(split_k=128))


@pytest.mark.parametrize("overrides, config, field", [
    (dict(stride=(2, 2)), dict(), "stride/dilation"),
    (dict(filter_size=(1, 1), pad_begin=(0, 0), pad_end=(0, 0)), dict(), "filter_size"),
    (dict(groups=8, in_channels=256, out_channels=256), dict(merge=2), "in_channels/out_channels"),  # 2 x 32 > 32
    (dict(groups=32, in_channels=256, out_channels=512), dict(), "in_channels/out_channels"),  # K: 4 x 16 > 32
    # 256 images of 112 rows: 256 x 28 walks of 4 rows x 64 lanes over 16 splits > 16384 lanes per split
    (dict(batch=256, input_size=(112, 56)), dict(), "batch/input_size"),
])
def test_gwalk_backward_weight_refusals_name_the_field(overrides, config, field):
    support = is_supported(_resnext(direction=Direction.BACKWARD_WEIGHT, **overrides), _weight_walk(**config))
    assert_no(support, field.split("/")[0])


# ---- channel padding: an igemm / gemm1x1 v8 tile on zero-padded copies ---------------------------------------------

PADDED_KERNELS = [KernelConfig(d, DType.BF16, n, f, 64, 64, 32, 4, 3, 8, 1, 1, 8, False, True)
                  for d in Direction for n in (2, 3) for f in (Family.IGEMM, Family.GEMM1X1)]
#: Group padding: the direct plain and tap-row tiles, the v8 dwrow tile (backward-weight).
PADDED_DEPTHWISE_KERNELS = [KernelConfig(d, DType.BF16, n, Family.DIRECT, 64, 32, taps_w, 4, 1, 1, 1, 1, 8, False, True)
                            for d in Direction for n in (2, 3) for taps_w in (1, 8)] + [
    KernelConfig(Direction.BACKWARD_WEIGHT, DType.BF16, n, Family.DWROW, 16, 32, 5, 4, 2, 1, 16, 1, 8, False, True)
    for n in (2, 3)]


@settings(max_examples=200, deadline=None)
@given(any_problems(huge_weight=0, dtypes=(DType.BF16,)))
def test_channel_padded_kernels_run_unaligned_problems_their_v8_tile_runs_padded(p):
    """A pad_channels kernel supports exactly the problems with C/G or K/G not a multiple of 8 (direct and dwrow:
    C/G = 1 and G not a multiple of 8; igemm and gemm1x1: C/G > 1), at most doubled in work by the padding, whose
    padded form its v8 tile supports; refusals name a field (the wrong kind of problem, aligned channels and too
    much padding: in_channels/out_channels)."""
    from tiledispatch.native.kernels.channel_pad_geometry import (
        MAX_WORK_INFLATION,
        aligned,
        padded_problem,
        pads_groups,
        work_inflation,
    )

    for config in PADDED_KERNELS + PADDED_DEPTHWISE_KERNELS:
        if config.direction is not p.direction:
            continue
        support = is_supported(p, config)
        runnable = p.kernel_problem(config.ndim)
        if runnable is None:
            assert not support and support.reason.startswith("ndim:"), support.reason
            continue
        if runnable.needs_int64_index:  # every pad_channels kernel indexes in 32 bits
            assert not support and "64-bit-indexed" in support.reason, support.reason
            continue
        if pads_groups(runnable) != (config.family in (Family.DIRECT, Family.DWROW)):
            assert not support and support.reason.startswith("in_channels"), support.reason
            continue
        if aligned(p) or work_inflation(p) > MAX_WORK_INFLATION:
            assert not support and support.reason.startswith("in_channels/out_channels:"), support.reason
            continue
        expected = is_supported(padded_problem(runnable), config.unpadded)
        assert bool(support) == bool(expected), (config.name, p.key, support.reason)
        if not support:
            assert support.reason.split(":")[0].split("/")[0] in PROBLEM_NAMES | {"in_channels", "out_channels"}


def test_channel_padding_reaches_the_unaligned_dense_layers():
    """The layers that ran on v1 tiles at 0.12-0.40x cuDNN (H200, session 34) have a padded kernel in default,
    aligned ones none (the plain v8 tile runs them without copies)."""
    from tiledispatch.native.rules import rule_set_configs

    padded = [c for c in rule_set_configs("default", dtypes=["bf16"], ndims=[2]) if c.pad_channels
              and c.family in (Family.IGEMM, Family.GEMM1X1)]
    for direction in Direction:
        odd = problem(direction=direction, batch=1, groups=1, in_channels=781, out_channels=488,
                      input_size=(107, 107))
        assert any(is_supported(odd, c) for c in padded if c.direction is direction)
        aligned_problem = problem(direction=direction, groups=1, in_channels=784, out_channels=488)
        refusals = [is_supported(aligned_problem, c) for c in padded if c.direction is direction]
        assert refusals and not any(refusals)
        assert all("multiples of 8 already" in r.reason for r in refusals)
        depthwise = problem(direction=direction, groups=96, in_channels=96, out_channels=96)  # 64x the work padded
        refusals = [is_supported(depthwise, c) for c in padded if c.direction is direction]
        assert refusals and all("multiplies the work by 64.00" in r.reason for r in refusals)


def test_group_padding_reaches_the_unaligned_depthwise_layers():
    """The depthwise layers whose channel count is not a multiple of 8 (synthetic, H200 session 34: n135 g931 7x7
    stride 2 ran on v1 direct binaries at 995-2,304 us against a 58 us bound) have a group-padded kernel in default
    in every direction, 2D and 3D; aligned depthwise layers and grouped ones (C/G > 1) none."""
    from tiledispatch.native.rules import rule_set_configs

    padded = [c for c in rule_set_configs("default", dtypes=["bf16"]) if c.pad_channels
              and c.family in (Family.DIRECT, Family.DWROW)]
    for direction in Direction:
        for spatial in ((28, 28), (5, 37, 37)):
            ndim = len(spatial)
            kernels = [c for c in padded if c.direction is direction and c.ndim == ndim]
            stride = (2,) * ndim
            odd = problem(direction=direction, batch=135, groups=931, in_channels=931, out_channels=931,
                          input_size=spatial, filter_size=(3,) * ndim, stride=stride, pad_begin=(1,) * ndim,
                          pad_end=(1,) * ndim, dilation=(1,) * ndim)
            assert any(is_supported(odd, c) for c in kernels), (direction, ndim)
            aligned_problem = dataclasses.replace(odd, groups=936, in_channels=936, out_channels=936)
            refusals = [is_supported(aligned_problem, c) for c in kernels]
            assert refusals and not any(refusals)
            assert all("multiples of 8 already" in r.reason for r in refusals)
            grouped = dataclasses.replace(odd, groups=19, in_channels=931, out_channels=931)  # C/G 49
            assert not any(is_supported(grouped, c) for c in kernels)
