"""3D problems that are 2D ones (``ConvProblem.planar``): which are, what they become, and that the 2D
problem over the same bytes gives the 3D problem's result (float64 reference), in every direction."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiledispatch.native import reference
from tiledispatch.native.problem import ConvProblem, Direction, DType

# n50 c23 5x37x37 1x3x3: the synthetic sweep's slowest 3D depthwise problem (odd channels, a 1-deep filter).
SPATIAL = dict(direction="fwd", dtype="bf16", batch=50, groups=23, in_channels=23, out_channels=23,
               input_size=(5, 37, 37), filter_size=(1, 3, 3), stride=(1, 1, 1), dilation=(2, 1, 1),
               pad_begin=(0, 1, 1), pad_end=(0, 1, 1))
TEMPORAL = dict(direction="bwd_data", dtype="bf16", batch=42, groups=24, in_channels=24, out_channels=24,
                input_size=(15, 17, 17), filter_size=(3, 1, 1), stride=(2, 1, 1), dilation=(1, 3, 1),
                pad_begin=(1, 0, 0), pad_end=(2, 0, 0))


def test_spatial_filter_is_a_2d_problem_over_batch_times_depth():
    planar = ConvProblem(**SPATIAL).planar
    assert planar == ConvProblem(direction="fwd", dtype="bf16", batch=250, groups=23, in_channels=23,
                                 out_channels=23, input_size=(37, 37), filter_size=(3, 3), stride=(1, 1),
                                 dilation=(1, 1), pad_begin=(1, 1), pad_end=(1, 1))


def test_temporal_filter_is_a_2d_problem_over_depth_by_plane():
    planar = ConvProblem(**TEMPORAL).planar
    assert planar == ConvProblem(direction="bwd_data", dtype="bf16", batch=42, groups=24, in_channels=24,
                                 out_channels=24, input_size=(15, 289), filter_size=(3, 1), stride=(2, 1),
                                 dilation=(1, 1), pad_begin=(1, 0), pad_end=(2, 0))


def test_pointwise_filter_takes_the_spatial_form():
    problem = ConvProblem(**{**SPATIAL, "filter_size": (1, 1, 1), "pad_begin": (0, 0, 0), "pad_end": (0, 0, 0)})
    assert problem.planar.batch == 250 and problem.planar.input_size == (37, 37)


@pytest.mark.parametrize("overrides", [
    dict(stride=(2, 1, 1)),                                   # depth stride: output depth d reads input 2d
    dict(pad_begin=(1, 1, 1)),                                # depth padding adds output depths
    dict(pad_end=(1, 1, 1)),
    dict(filter_size=(2, 3, 3)),                              # a filter of depth and plane
    dict(filter_size=(3, 1, 1), pad_begin=(0, 1, 0), pad_end=(0, 0, 0)),   # plane padding
    dict(filter_size=(3, 1, 1), pad_begin=(0, 0, 0), pad_end=(0, 0, 0), stride=(1, 1, 2)),  # plane stride
], ids=["depth_stride", "depth_pad_begin", "depth_pad_end", "full_filter", "plane_pad", "plane_stride"])
def test_problems_with_work_on_both_axes_are_not_planar(overrides):
    problem = ConvProblem(**{**SPATIAL, **overrides})
    assert problem.planar is None and problem.canonical is problem
    assert problem.kernel_problem(2) is None and problem.kernel_problem(3) is problem


def test_2d_problems_have_no_planar_form():
    planar = ConvProblem(**SPATIAL).planar
    assert planar.planar is None and planar.canonical is planar and planar.kernel_problem(3) is None


def test_planar_form_keeps_every_tensor_and_the_work():
    for fields in (SPATIAL, TEMPORAL):
        for direction in Direction:
            problem = ConvProblem(**{**fields, "direction": direction})
            planar = problem.planar
            assert [math.prod(s) for s in planar.operand_shapes] == [math.prod(s) for s in problem.operand_shapes]
            assert planar.flops == problem.flops and planar.min_bytes == problem.min_bytes
            assert planar.needs_int64_index == problem.needs_int64_index
            assert problem.canonical is planar


@st.composite
def planar_problems(draw):
    """Small random 3D problems with an idle depth or an idle plane (any class, odd counts)."""
    groups = draw(st.integers(1, 3))
    cpg, kpg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    spatial = draw(st.booleans())
    depth, height, width = draw(st.integers(1, 4)), draw(st.integers(1, 6)), draw(st.integers(1, 6))
    if spatial:
        filt = (1, draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        stride = (1, draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        pad_begin = (0, draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        pad_end = (0, draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    else:
        filt = (draw(st.integers(1, 3)), 1, 1)
        stride = (draw(st.integers(1, 2)), 1, 1)
        dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), 1)
        pad_begin = (draw(st.integers(0, 2)), 0, 0)
        pad_end = (draw(st.integers(0, 2)), 0, 0)
    size = tuple(max(i, dl * (f - 1) + 1) for i, f, dl in zip((depth, height, width), filt, dilation))
    return ConvProblem(direction=draw(st.sampled_from(tuple(Direction))), dtype=DType.FP32,
                       batch=draw(st.integers(1, 3)), groups=groups, in_channels=groups * cpg,
                       out_channels=groups * kpg, input_size=size, filter_size=filt, stride=stride,
                       dilation=dilation, pad_begin=pad_begin, pad_end=pad_end)


@settings(max_examples=120, deadline=None)
@given(planar_problems(), st.integers(0, 2**31 - 1))
def test_planar_form_computes_the_same_result_on_the_same_bytes(problem, seed):
    """The float64 reference of the 2D form, on the 3D operands' bytes, is the 3D problem's result."""
    planar = problem.planar
    assert planar is not None and planar.ndim == 2
    rng = np.random.default_rng(seed)
    first, second = (rng.standard_normal(shape) for shape in problem.operand_shapes[:2])
    expected = reference.run_reference(problem, first, second)
    flat = reference.run_reference(planar, first.reshape(planar.operand_shapes[0]),
                                   second.reshape(planar.operand_shapes[1]))
    np.testing.assert_allclose(flat.reshape(expected.shape), expected, rtol=1e-12, atol=1e-12)


def test_planar_form_is_computed_once():
    problem = ConvProblem(**SPATIAL)
    assert problem.planar is problem.planar
    assert dataclasses.replace(problem, batch=2).planar.batch == 10
