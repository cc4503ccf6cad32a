"""The problem descriptor (DESIGN §3): validation, derived sizes, identity and serialisation."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import conv_problems, problem_fields
from tiledispatch.native.problem import (
    INT32_INDEX_LIMIT,
    MAX_TENSOR_ELEMENTS,
    ConvProblem,
    Direction,
    DType,
    Layout,
    ProblemClass,
    ProblemError,
)

DEV_SUITE = Path(__file__).parents[1].parent / "shared" / "bench" / "dev_suite.json"

# Grouped, odd channel counts, asymmetric nothing: every override below breaks exactly one rule.
BASE = dict(direction="fwd", dtype="bf16", batch=2, groups=3, in_channels=9, out_channels=6,
            input_size=[8, 7], filter_size=[3, 3], stride=[1, 1], dilation=[1, 1],
            pad_begin=[1, 1], pad_end=[1, 1])

PROPERTY = settings(max_examples=150, deadline=None)


def make(**overrides) -> ConvProblem:
    return ConvProblem(**{**BASE, **overrides})


def test_base_problem_is_valid():
    p = make()
    assert p.direction is Direction.FORWARD and p.dtype is DType.BF16 and p.layout is Layout.NHWGC
    assert p.input_size == (8, 7) and isinstance(p.stride, tuple)
    assert (p.c_per_group, p.k_per_group, p.ndim) == (3, 2, 2)


# ---- validation: every error names the field and the rule ---------------------------------
INVALID = [
    # (id, overrides, field, fragment of the rule)
    ("batch_zero", dict(batch=0), "batch", ">= 1"),
    ("batch_negative", dict(batch=-3), "batch", ">= 1"),
    ("groups_zero", dict(groups=0), "groups", ">= 1"),
    ("in_channels_zero", dict(in_channels=0), "in_channels", ">= 1"),
    ("out_channels_negative", dict(out_channels=-6), "out_channels", ">= 1"),
    ("c_not_multiple_of_g", dict(in_channels=10), "in_channels", "divisible by groups"),
    ("k_not_multiple_of_g", dict(out_channels=7), "out_channels", "divisible by groups"),
    ("input_1d", dict(input_size=[8]), "input_size", "2 (H, W) or 3 (D, H, W)"),
    ("input_4d", dict(input_size=[8, 7, 6, 5]), "input_size", "2 (H, W) or 3 (D, H, W)"),
    ("filter_wrong_len", dict(filter_size=[3, 3, 3]), "filter_size", "2 entries"),
    ("stride_wrong_len", dict(stride=[1]), "stride", "2 entries"),
    ("dilation_wrong_len", dict(dilation=[1, 1, 1]), "dilation", "2 entries"),
    ("pad_begin_wrong_len", dict(pad_begin=[1]), "pad_begin", "2 entries"),
    ("pad_end_wrong_len", dict(pad_end=[1, 1, 1]), "pad_end", "2 entries"),
    ("input_zero", dict(input_size=[0, 7]), "input_size[0]", ">= 1"),
    ("filter_zero", dict(filter_size=[3, 0]), "filter_size[1]", ">= 1"),
    ("stride_zero", dict(stride=[0, 1]), "stride[0]", ">= 1"),
    ("dilation_zero", dict(dilation=[1, 0]), "dilation[1]", ">= 1"),
    ("pad_begin_negative", dict(pad_begin=[-1, 0]), "pad_begin[0]", ">= 0"),
    ("pad_end_negative", dict(pad_end=[0, -2]), "pad_end[1]", ">= 0"),
    ("output_lt_1_filter", dict(input_size=[2, 7], filter_size=[5, 3], pad_begin=[0, 0], pad_end=[0, 0]),
     "filter_size[0]", "output size would be < 1"),
    ("output_lt_1_dilation", dict(input_size=[5, 5], dilation=[1, 3], pad_begin=[0, 0], pad_end=[0, 0]),
     "filter_size[1]", "output size would be < 1"),
    ("output_lt_1_3d", dict(input_size=[4, 4, 1], filter_size=[1, 1, 3], stride=[1, 1, 1], dilation=[1, 1, 1],
                            pad_begin=[0, 0, 1], pad_end=[0, 0, 0]), "filter_size[2]", "output size would be < 1"),
    ("batch_fraction", dict(batch=2.5), "batch", "integer"),
    ("groups_text", dict(groups="three"), "groups", "integer"),
    ("channels_none", dict(out_channels=None), "out_channels", "integer"),
    ("input_entry_fraction", dict(input_size=[8, 7.5]), "input_size[1]", "integer"),
    ("input_string", dict(input_size="87"), "input_size", "list"),
    ("stride_scalar", dict(stride=2), "stride", "list"),
    ("direction_unknown", dict(direction="sideways"), "direction", "must be one of"),
    ("dtype_unknown", dict(dtype="int8"), "dtype", "must be one of"),
    ("layout_unknown", dict(layout="nchw"), "layout", "nhwgc"),
    ("input_too_big", dict(batch=2**40, groups=1, in_channels=1, out_channels=1, input_size=[1024, 1024]),
     "input", "exceeds the limit"),
    ("weight_too_big", dict(groups=1, in_channels=2**24, out_channels=2**24), "weight", "exceeds the limit"),
    ("output_too_big", dict(groups=1, in_channels=1, out_channels=2**40, input_size=[64, 64], filter_size=[1, 1],
                            pad_begin=[0, 0], pad_end=[0, 0]), "output", "exceeds the limit"),
]


@pytest.mark.parametrize("overrides, field, rule", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_problem_names_field_and_rule(overrides, field, rule):
    with pytest.raises(ProblemError) as info:
        make(**overrides)
    error = info.value
    assert error.field == field
    assert rule in error.rule
    assert str(error).startswith(f"{field}: ")
    assert isinstance(error, ValueError)


def test_tensor_limit_boundary():
    at_limit = make(batch=MAX_TENSOR_ELEMENTS, groups=1, in_channels=1, out_channels=1, input_size=[1, 1],
                    filter_size=[1, 1], pad_begin=[0, 0], pad_end=[0, 0])
    assert at_limit.input_elements == MAX_TENSOR_ELEMENTS
    with pytest.raises(ProblemError) as info:
        dataclasses.replace(at_limit, batch=MAX_TENSOR_ELEMENTS + 1)
    assert info.value.field == "input"


@pytest.mark.parametrize("field", ["batch", "groups"])
def test_bool_is_not_an_integer(field):
    with pytest.raises(ProblemError) as info:
        make(**{field: True, "in_channels": 3, "out_channels": 3} if field == "groups" else {field: True})
    assert info.value.field == field


def test_integral_values_are_normalised():
    p = make(batch=2.0, input_size=(8.0, 7))
    assert p == make() and type(p.batch) is int and all(type(v) is int for v in p.input_size)


def test_aliases_normalise_to_canonical_values():
    p = make(direction="backward_weight", dtype="bfloat16", layout="NHWGC")
    assert p.direction is Direction.BACKWARD_WEIGHT and p.dtype is DType.BF16
    assert make(direction="Forward", dtype="FLOAT16").dtype is DType.FP16
    assert make(direction=Direction.BACKWARD_DATA).direction is Direction.BACKWARD_DATA


# ---- from_dict / from_json -------------------------------------------------------------------
REQUIRED = ["direction", "dtype", "batch", "groups", "in_channels", "out_channels", "input_size", "filter_size"]


@pytest.mark.parametrize("key", REQUIRED)
def test_from_dict_missing_required_key(key):
    data = make().to_dict()
    del data[key]
    with pytest.raises(ProblemError) as info:
        ConvProblem.from_dict(data)
    assert info.value.field == key and "required" in info.value.rule


@pytest.mark.parametrize("key", ["padding", "ndim", "Batch", "groups_per_cta"])
def test_from_dict_unknown_key(key):
    data = {**make().to_dict(), key: 1}
    with pytest.raises(ProblemError) as info:
        ConvProblem.from_dict(data)
    assert info.value.field == key and "not a problem field" in info.value.rule


def test_from_dict_defaults():
    data = {k: v for k, v in make().to_dict().items() if k not in ("stride", "dilation", "pad_begin", "pad_end",
                                                                    "layout")}
    p = ConvProblem.from_dict(data)
    assert p.stride == (1, 1) and p.dilation == (1, 1) and p.pad_begin == (0, 0) and p.pad_end == (0, 0)
    assert p.layout is Layout.NHWGC
    data3 = {**data, "input_size": [4, 5, 6], "filter_size": [1, 3, 3]}
    p3 = ConvProblem.from_dict(data3)
    assert p3.stride == (1, 1, 1) and p3.pad_end == (0, 0, 0) and p3.output_size == (4, 3, 4)


@pytest.mark.parametrize("text, rule", [("{not json", "valid JSON"), ("[1, 2]", "JSON object"),
                                        ('"fwd"', "JSON object")])
def test_from_json_bad_text(text, rule):
    with pytest.raises(ProblemError) as info:
        ConvProblem.from_json(text)
    assert info.value.field == "problem" and rule in info.value.rule


def test_from_json_validates_fields():
    data = {**make().to_dict(), "in_channels": 10}
    with pytest.raises(ProblemError) as info:
        ConvProblem.from_json(json.dumps(data))
    assert info.value.field == "in_channels"


# ---- properties on valid problems ------------------------------------------------------------
def brute_force_output_extent(size: int, f: int, s: int, d: int, pb: int, pe: int) -> int:
    """Count output positions o >= 0 whose every tap lands inside the padded input [-pb, size-1+pe]."""
    count = 0
    o = 0
    while True:
        first = o * s - pb
        last = first + d * (f - 1)
        if last > size - 1 + pe:
            return count
        assert first >= -pb
        count += 1
        o += 1


@PROPERTY
@given(conv_problems(max_extra_input=30))
def test_output_size_matches_brute_force(p):
    expected = tuple(brute_force_output_extent(*axis) for axis in
                     zip(p.input_size, p.filter_size, p.stride, p.dilation, p.pad_begin, p.pad_end))
    assert p.output_size == expected
    assert all(o >= 1 for o in p.output_size)
    assert p.output_shape == (p.batch, *expected, p.groups, p.out_channels // p.groups)


@PROPERTY
@given(conv_problems())
def test_shapes_flops_bytes_and_gemm(p):
    n, g, c, k = p.batch, p.groups, p.in_channels, p.out_channels
    cg, kg = c // g, k // g
    out = p.output_size
    taps = math.prod(p.filter_size)
    x_elems = n * math.prod(p.input_size) * c
    w_elems = k * cg * taps
    y_elems = n * math.prod(out) * k
    assert p.input_shape == (n, *p.input_size, g, cg)
    assert p.weight_shape == (g, kg, *p.filter_size, cg)
    assert (p.input_elements, p.weight_elements, p.output_elements) == (x_elems, w_elems, y_elems)
    assert p.needs_int64_index == (max(x_elems, w_elems, y_elems) > INT32_INDEX_LIMIT)

    # FLOPs: one multiply-add per (output element, reduction term); the same in every direction.
    flops = 2 * n * math.prod(out) * w_elems
    assert flops == 2 * n * k * math.prod(out) * cg * taps
    itemsize = {DType.BF16: 2, DType.FP16: 2, DType.FP32: 4}[p.dtype]
    for direction in Direction:
        q = p.with_direction(direction)
        assert q.flops == flops
        # Every direction touches the same three tensors once: two read, one written.
        assert q.min_bytes == (x_elems + w_elems + y_elems) * itemsize
        m_, n_, k_ = q.gemm_mnk
        if direction is Direction.FORWARD:
            assert (m_, n_, k_) == (n * math.prod(out), kg, cg * taps)
        elif direction is Direction.BACKWARD_DATA:
            assert (m_, n_, k_) == (n * math.prod(p.input_size), cg, kg * taps)
        else:
            assert (m_, n_, k_) == (kg, cg * taps, n * math.prod(out))
        if direction is not Direction.BACKWARD_DATA:
            assert 2 * g * m_ * n_ * k_ == flops  # the implicit GEMMs do exactly the conv's work

    operands = {Direction.FORWARD: (p.input_shape, p.weight_shape, p.output_shape),
                Direction.BACKWARD_DATA: (p.output_shape, p.weight_shape, p.input_shape),
                Direction.BACKWARD_WEIGHT: (p.input_shape, p.output_shape, p.weight_shape)}
    assert p.operand_shapes == operands[p.direction]


@PROPERTY
@given(conv_problems())
def test_problem_class(p):
    cg, kg = p.in_channels // p.groups, p.out_channels // p.groups
    if p.groups == 1:
        expected = ProblemClass.DENSE
    elif cg == 1 and kg == 1:
        expected = ProblemClass.DEPTHWISE
    elif cg == 1:
        expected = ProblemClass.DEPTHWISE_MULTIPLIER
    else:
        expected = ProblemClass.GROUPED
    assert p.problem_class is expected
    assert p.class_label == f"{p.ndim}d_{expected.value}"


@pytest.mark.parametrize("fields, expected", [
    (dict(groups=1, in_channels=1, out_channels=1), ProblemClass.DENSE),  # G == 1 wins over C/G == 1
    (dict(groups=1, in_channels=64, out_channels=8), ProblemClass.DENSE),
    (dict(groups=3, in_channels=9, out_channels=3), ProblemClass.GROUPED),  # K/G == 1 but C/G == 3
    (dict(groups=8, in_channels=8, out_channels=8), ProblemClass.DEPTHWISE),
    (dict(groups=5, in_channels=5, out_channels=15), ProblemClass.DEPTHWISE_MULTIPLIER),
])
def test_problem_class_examples(fields, expected):
    assert make(**fields).problem_class is expected


@PROPERTY
@given(conv_problems())
def test_round_trips(p):
    assert ConvProblem.from_json(p.to_json()) == p
    assert ConvProblem.from_dict(p.to_dict()) == p
    assert ConvProblem.from_dict(json.loads(p.to_json())) == p
    assert json.loads(p.to_json()) == p.to_dict()
    assert ConvProblem.from_json(p.to_json()).key == p.key
    assert hash(ConvProblem.from_dict(p.to_dict())) == hash(p)


@PROPERTY
@given(problem_fields())
def test_equal_problems_have_equal_keys(fields):
    as_lists = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}
    p, q = ConvProblem(**fields), ConvProblem(**as_lists)
    assert p == q and p.key == q.key and p.shape_key == q.shape_key
    r = q.with_direction("forward" if p.direction is not Direction.FORWARD else "bwd_data")
    assert r.key != p.key and r.shape_key == p.shape_key
    t = q.with_dtype("fp32" if p.dtype is not DType.FP32 else "bf16")
    assert t.key != p.key and t.shape_key == p.shape_key


MUTABLE = ["direction", "dtype", "batch", "groups", "in_channels", "out_channels", "input_size", "filter_size",
           "stride", "dilation", "pad_begin", "pad_end"]


@settings(max_examples=200, deadline=None)
@given(problem_fields(), st.sampled_from(MUTABLE), st.data())
def test_distinct_problems_have_distinct_keys(fields, name, data):
    """Change one field (keeping the problem valid): the key must change. The seed's key left out
    stride, dilation and pads, so two different convolutions shared one row."""
    p = ConvProblem(**fields)
    changed = dict(fields)
    if name == "direction":
        changed[name] = data.draw(st.sampled_from([d for d in Direction if d is not p.direction]))
    elif name == "dtype":
        changed[name] = data.draw(st.sampled_from([t for t in DType if t is not p.dtype]))
    elif name == "groups":
        # keep C/G and K/G; change G
        new_g = p.groups + data.draw(st.integers(1, 3))
        changed.update(groups=new_g, in_channels=new_g * p.c_per_group, out_channels=new_g * p.k_per_group)
    elif name in ("batch", "in_channels", "out_channels"):
        changed[name] = getattr(p, name) + p.groups * data.draw(st.integers(1, 3))
    else:
        axis = data.draw(st.integers(0, p.ndim - 1))
        values = list(getattr(p, name))
        values[axis] += data.draw(st.integers(1, 2))
        changed[name] = tuple(values)
        if name in ("filter_size", "dilation"):  # keep the output >= 1
            reach = changed["dilation"][axis] * (changed["filter_size"][axis] - 1) + 1
            sizes = list(p.input_size)
            sizes[axis] = max(sizes[axis], reach)
            changed["input_size"] = tuple(sizes)
    q = ConvProblem(**changed)
    assert q != p
    assert q.key != p.key
    if name not in ("direction", "dtype"):
        assert q.shape_key != p.shape_key


@pytest.mark.parametrize("field, value", [("stride", [2, 1]), ("dilation", [1, 2]), ("pad_begin", [1, 0]),
                                          ("pad_end", [0, 1]), ("filter_size", [3, 1])])
def test_key_includes_geometry(field, value):
    """The seed's flaw: problems differing only in stride/dilation/pads must not share a key."""
    a = make(input_size=[9, 9], filter_size=[1, 1], stride=[1, 1], dilation=[1, 1], pad_begin=[0, 0],
             pad_end=[0, 0])
    b = dataclasses.replace(a, **{field: value})
    assert a.key != b.key and a.shape_key != b.shape_key


def test_key_and_shape_key_spelling():
    p = make(stride=[2, 1], dilation=[1, 2], pad_begin=[1, 0], pad_end=[0, 2], input_size=[9, 8])
    assert p.key == "fwd|bf16|2d|n2|g3|c9|k6|in9x8|f3x3|s2x1|d1x2|pb1x0|pe0x2"
    assert p.shape_key == "2d|n2|g3|c9|k6|in9x8|f3x3|s2x1|d1x2|pb1x0|pe0x2"


@PROPERTY
@given(problem_fields())
def test_from_key_inverts_key(fields):
    p = ConvProblem(**fields)
    assert ConvProblem.from_key(p.key) == p


@pytest.mark.parametrize("key, says", [
    ("fwd|bf16|2d|n2|g3|c9|k6|in9x8|f3x3|s2x1|d1x2|pb1x0", "direction|dtype"),
    ("fwd|bf16|2d|n2|g3|c9|k6|in9x8|f3x3|s2x1|d1x2|pb1x0|px0x2", "'pe' expected"),
    ("fwd|bf16|2d|n2|g3|c9|k6|in9xA|f3x3|s2x1|d1x2|pb1x0|pe0x2", "integers joined by 'x'"),
    ("fwd|bf16|2d|n2x2|g3|c9|k6|in9x8|f3x3|s2x1|d1x2|pb1x0|pe0x2", "one integer each"),
    ("forward|bf16|2d|n2|g3|c9|k6|in9x8|f3x3|s2x1|d1x2|pb1x0|pe0x2", "not canonical"),
])
def test_from_key_names_what_is_wrong(key, says):
    with pytest.raises(ProblemError, match=says) as raised:
        ConvProblem.from_key(key)
    assert raised.value.field == "key"


def test_from_key_applies_the_problem_rules():
    with pytest.raises(ProblemError) as raised:
        ConvProblem.from_key("fwd|bf16|2d|n2|g4|c9|k8|in9x8|f3x3|s1x1|d1x1|pb1x1|pe1x1")
    assert raised.value.field == "in_channels"


# ---- the dev suite ---------------------------------------------------------------------------
def _suite():
    if not DEV_SUITE.is_file():
        pytest.skip(f"{DEV_SUITE} not found (CI clones ../shared beside the repo)")
    return json.loads(DEV_SUITE.read_text())["problems"]


def test_every_dev_suite_entry_builds():
    entries = _suite()
    assert len(entries) >= 18
    shape_keys = set()
    for entry in entries:
        for direction in Direction:
            p = ConvProblem.from_suite_entry(entry, direction)
            assert p.direction is direction and p.dtype is DType.BF16
            assert p.ndim == entry["ndim"], entry["name"]
            assert p.batch == entry["N"] and p.groups == entry["G"]
            assert (p.in_channels, p.out_channels) == (entry["C"], entry["K"])
            assert list(p.input_size) == entry["input"] and list(p.filter_size) == entry["filter"]
            assert list(p.pad_begin) == entry["pad_begin"] and list(p.dilation) == entry["dilation"]
            assert ConvProblem.from_json(p.to_json()) == p
        assert set(entry["cudnn_h200_us"]) == {d.value for d in Direction}, entry["name"]
        shape_keys.add(p.shape_key)
    assert len(shape_keys) == len(entries)  # named problems are distinct convolutions


def test_dev_suite_known_values():
    entries = {e["name"]: e for e in _suite()}
    p = ConvProblem.from_suite_entry(entries["resnext_s1"], "fwd")
    assert p.output_size == (56, 56)
    assert p.problem_class is ProblemClass.GROUPED and (p.c_per_group, p.k_per_group) == (4, 4)
    assert p.flops == 924_844_032  # 2·32·128·56·56·4·9
    assert p.gemm_mnk == (100_352, 4, 36)
    assert p.min_bytes == 2 * (32 * 56 * 56 * 128 * 2 + 32 * 4 * 9 * 4)  # X and Y equal-sized, plus W
    assert p.with_direction("bwd_weight").gemm_mnk == (4, 36, 100_352)

    s = ConvProblem.from_suite_entry(entries["resnext_s2_stride"], "bwd_data", "fp16")
    assert s.output_size == (28, 28) and s.dtype is DType.FP16
    assert s.gemm_mnk == (32 * 56 * 56, 8, 8 * 9)

    dw = ConvProblem.from_suite_entry(entries["dw_convnext7"], "fwd")
    assert dw.problem_class is ProblemClass.DEPTHWISE and dw.output_size == (56, 56)
    assert dw.flops == 2 * 32 * 96 * 56 * 56 * 49

    x3d = ConvProblem.from_suite_entry(entries["x3d_dw"], "fwd")
    assert x3d.class_label == "3d_depthwise" and x3d.output_size == (16, 28, 28)

    dil = ConvProblem.from_suite_entry(entries["g8_dil2"], "fwd")
    assert dil.output_size == (64, 64)  # 64 + 2 + 2 - 2*2 - 1 + 1
    assert ConvProblem.from_suite_entry(entries["g1_256"], "fwd").problem_class is ProblemClass.DENSE
