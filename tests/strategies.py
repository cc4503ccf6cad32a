"""Shared hypothesis strategies and cached rule-set slices for the foundation tests.

Problems are drawn by class (dense, grouped, depthwise, depthwise-multiplier) so that every class
shows up in a moderate number of examples, with odd channel counts, non-square filters, strides,
dilations and asymmetric pads; the input extent is drawn *after* the filter so the problem is
valid by construction (output >= 1 on every axis) rather than by rejection.
"""

from __future__ import annotations

import math
from functools import cache

from hypothesis import strategies as st

from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.problem import INT32_INDEX_LIMIT, ConvProblem, Direction, DType
from tiledispatch.native.rules import rule_set_configs

DIRECTIONS = tuple(Direction)
DTYPES = tuple(DType)
HALF_DTYPES = (DType.BF16, DType.FP16)
NDIMS = (2, 3)
CLASSES = ("dense", "grouped", "depthwise", "depthwise_multiplier")


@st.composite
def problem_fields(
    draw,
    *,
    ndims=NDIMS,
    directions=DIRECTIONS,
    dtypes=DTYPES,
    max_batch: int = 256,
    max_groups: int = 64,
    max_per_group: int = 80,
    max_filter: int = 7,
    max_stride: int = 3,
    max_dilation: int = 3,
    max_pad: int = 4,
    max_extra_input: int = 40,
) -> dict:
    """Keyword arguments of a valid :class:`ConvProblem` (as plain Python values)."""
    ndim = draw(st.sampled_from(ndims))
    kind = draw(st.sampled_from(CLASSES))
    if kind == "dense":
        groups = 1
    else:
        groups = draw(st.integers(2, max_groups))
    if kind in ("depthwise", "depthwise_multiplier"):
        cpg = 1
        kpg = 1 if kind == "depthwise" else draw(st.integers(2, min(8, max_per_group)))
    else:
        cpg = draw(st.integers(1, max_per_group))
        kpg = draw(st.integers(1, max_per_group))
        if kind == "grouped" and cpg == 1:
            cpg = 2  # C/G == 1 would make it a depthwise class
    filt = tuple(draw(st.integers(1, max_filter)) for _ in range(ndim))
    stride = tuple(draw(st.integers(1, max_stride)) for _ in range(ndim))
    dilation = tuple(draw(st.integers(1, max_dilation)) for _ in range(ndim))
    pad_begin = tuple(draw(st.integers(0, max_pad)) for _ in range(ndim))
    pad_end = tuple(draw(st.integers(0, max_pad)) for _ in range(ndim))
    input_size = []
    for f, d, pb, pe in zip(filt, dilation, pad_begin, pad_end):
        reach = d * (f - 1) + 1
        smallest = max(1, reach - pb - pe)
        input_size.append(draw(st.integers(smallest, smallest + max_extra_input)))
    return dict(
        direction=draw(st.sampled_from(directions)),
        dtype=draw(st.sampled_from(dtypes)),
        batch=draw(st.integers(1, max_batch)),
        groups=groups,
        in_channels=groups * cpg,
        out_channels=groups * kpg,
        input_size=tuple(input_size),
        filter_size=filt,
        stride=stride,
        dilation=dilation,
        pad_begin=pad_begin,
        pad_end=pad_end,
    )


def conv_problems(**kwargs) -> st.SearchStrategy[ConvProblem]:
    return problem_fields(**kwargs).map(lambda fields: ConvProblem(**fields))


@st.composite
def huge_problems(draw, **kwargs) -> ConvProblem:
    """A valid problem with at least one tensor over 2^31 - 1 elements (needs 64-bit indexing).

    The first spatial input extent is stretched until the input tensor crosses the limit; the
    output and weight stay far below the 2^48 ceiling."""
    fields = draw(problem_fields(**kwargs))
    others = math.prod(fields["input_size"][1:]) * fields["batch"] * fields["in_channels"]
    need = INT32_INDEX_LIMIT // others + 1
    first = max(fields["input_size"][0], need) + draw(st.integers(0, 64))
    fields["input_size"] = (first, *fields["input_size"][1:])
    problem = ConvProblem(**fields)
    assert problem.needs_int64_index
    return problem


def any_problems(huge_weight: int = 1, **kwargs) -> st.SearchStrategy[ConvProblem]:
    """Ordinary problems, with some huge (> 2^31-element) ones mixed in."""
    return st.one_of(*([conv_problems(**kwargs)] * 4), *([huge_problems(**kwargs)] * huge_weight))


def small_problems(**kwargs) -> st.SearchStrategy[ConvProblem]:
    """Problems small enough for the float64 reference to run in milliseconds."""
    params = dict(max_batch=3, max_groups=4, max_per_group=5, max_filter=3, max_stride=3, max_dilation=2,
                  max_pad=2, max_extra_input=5)
    params.update(kwargs)
    return conv_problems(**params)


# ---- rule-set slices, generated once per test session --------------------------------------
@cache
def rule_slice(rule_set: str, direction: Direction, dtype: DType, ndim: int, arch: str = "sm_90"
               ) -> tuple[KernelConfig, ...]:
    return tuple(rule_set_configs(rule_set, arch, directions=[direction], dtypes=[dtype], ndims=[ndim]))


@cache
def rule_slice_set(rule_set: str, direction: Direction, dtype: DType, ndim: int, arch: str = "sm_90"
                   ) -> frozenset[KernelConfig]:
    return frozenset(rule_slice(rule_set, direction, dtype, ndim, arch))


def all_slices():
    """Every (direction, dtype, ndim) a rule set is generated for."""
    return [(d, t, n) for d in DIRECTIONS for t in DTYPES for n in NDIMS]


def slice_id(key) -> str:
    direction, dtype, ndim = key
    return f"{direction.value}-{dtype.value}-{ndim}d"
