"""Problem and tensor conversion between the wire and the core: round trips and field-level errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from tiledispatch.native.problem import ConvProblem
from tiledispatch.server import convert
from tiledispatch.server.errors import InvalidArgument
from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb

from ..strategies import problem_fields
from .conftest import TINY


@settings(max_examples=150, deadline=None)
@given(problem_fields())
def test_problem_round_trip(fields):
    problem = ConvProblem(**fields)
    message = convert.problem_to_proto(problem)
    again = convert.problem_from_proto(pb.Problem.FromString(message.SerializeToString()))
    assert again == problem
    assert again.key == problem.key


def test_empty_stride_dilation_and_pads_default():
    message = codec.problem_to_proto({k: v for k, v in TINY.items()
                                      if k not in ("stride", "dilation", "pad_begin", "pad_end")})
    problem = convert.problem_from_proto(message)
    assert problem.stride == (1, 1) and problem.dilation == (1, 1)
    assert problem.pad_begin == (0, 0) and problem.pad_end == (0, 0)


@pytest.mark.parametrize("missing", ["direction", "dtype", "batch", "groups", "in_channels", "out_channels",
                                     "input_size", "filter_size"])
def test_missing_field_is_named(missing):
    message = codec.problem_to_proto({k: v for k, v in TINY.items() if k != missing})
    with pytest.raises(InvalidArgument) as caught:
        convert.problem_from_proto(message)
    assert caught.value.field == f"problem.{missing}"
    assert "required" in caught.value.message


@pytest.mark.parametrize("change, field, words", [
    (dict(batch=-1), "problem.batch", ">= 1"),
    (dict(groups=-2), "problem.groups", ">= 1"),
    (dict(in_channels=7), "problem.in_channels", "divisible by groups"),
    (dict(out_channels=10), "problem.out_channels", "divisible by groups"),
    (dict(input_size=(0, 6)), "problem.input_size[0]", ">= 1"),
    (dict(stride=(0, 1)), "problem.stride[0]", ">= 1"),
    (dict(pad_begin=(-1, 0)), "problem.pad_begin[0]", ">= 0"),
    (dict(filter_size=(9, 2)), "problem.filter_size[0]", "output size would be < 1"),
    (dict(filter_size=(3, 3, 3)), "problem.filter_size", "entries"),
    (dict(input_size=(5,), filter_size=(3,), stride=(1,), dilation=(1,), pad_begin=(0,), pad_end=(0,)),
     "problem.input_size", "2 (H, W) or 3"),
])
def test_invalid_problem_names_field_and_rule(change, field, words):
    message = codec.problem_to_proto({**TINY, **change})
    with pytest.raises(InvalidArgument) as caught:
        convert.problem_from_proto(message)
    assert caught.value.field == field
    assert words in caught.value.message


def test_unknown_enum_value_is_named():
    message = codec.problem_to_proto(TINY)
    message.direction = 42
    with pytest.raises(InvalidArgument) as caught:
        convert.problem_from_proto(message)
    assert caught.value.field == "problem.direction" and "unknown value 42" in caught.value.message


def test_select_query_defaults_and_errors():
    request = pb.SelectRequest(problem=codec.problem_to_proto(TINY))
    query = convert.select_query(request)
    assert query.top_k == 5 and query.policy.value == "default" and query.model is None
    with pytest.raises(InvalidArgument, match="problem: is required"):
        convert.select_query(pb.SelectRequest())
    request.families.append(0)
    with pytest.raises(InvalidArgument) as caught:
        convert.select_query(request)
    assert caught.value.field == "families[0]"


# ---- tensors -------------------------------------------------------------------------------------
def test_bf16_rounding_is_nearest_even_and_exact_on_representable_values():
    values = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5, 65280.0, np.inf, -np.inf, 0.0, -0.0], np.float32)
    bits = codec.float_to_bf16_bits(values)
    back = codec.bf16_bits_to_float(bits)
    assert back.tolist() == [1.0, 1.0, 1 + 2**-6, -2.5, 65280.0, np.inf, -np.inf, 0.0, -0.0]
    assert np.isnan(codec.bf16_bits_to_float(codec.float_to_bf16_bits(np.array([np.nan], np.float32))))[0]
    random = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    once = codec.bf16_bits_to_float(codec.float_to_bf16_bits(random))
    assert np.array_equal(codec.float_to_bf16_bits(once), codec.float_to_bf16_bits(random))  # idempotent
    assert np.max(np.abs(once - random) / np.abs(random)) <= 2**-8


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_tensor_round_trip(dtype):
    array = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    tensor = codec.encode_tensor(array, dtype)
    assert len(tensor.data) == array.size * (4 if dtype == "fp32" else 2)
    back = codec.decode_tensor(tensor)
    tolerance = {"bf16": 2**-8, "fp16": 2**-11, "fp32": 0}[dtype]
    assert back.shape == array.shape
    assert np.allclose(back, array, rtol=tolerance, atol=0)


def test_bf16_bits_pass_through():
    bits = np.array([0x3F80, 0xC020, 0x7F80], dtype=np.uint16)
    tensor = codec.encode_tensor(bits, "bf16")
    assert np.array_equal(codec.decode_tensor(tensor, bf16="bits"), bits)


def _run_request(first: pb.Tensor, second: pb.Tensor) -> pb.RunRequest:
    request = pb.RunRequest(problem=codec.problem_to_proto(TINY))
    request.tensors.first.CopyFrom(first)
    request.tensors.second.CopyFrom(second)
    return request


def test_run_tensors_are_validated_by_name():
    problem = ConvProblem(**TINY)
    first_shape, second_shape, _ = problem.operand_shapes
    good_first = codec.encode_tensor(np.ones(first_shape), "bf16")
    good_second = codec.encode_tensor(np.ones(second_shape), "bf16")
    query = convert.run_query(_run_request(good_first, good_second))
    assert query.inputs[0].dtype == np.uint16 and query.inputs[0].shape == first_shape

    short = pb.Tensor(dtype=pb.DATA_TYPE_BF16, shape=list(first_shape), data=good_first.data[:-2])
    with pytest.raises(InvalidArgument) as caught:
        convert.run_query(_run_request(short, good_second))
    assert caught.value.field == "tensors.first.data" and "bytes" in caught.value.message
    assert "(the input tensor)" in caught.value.message

    wrong_shape = codec.encode_tensor(np.ones(second_shape[::-1]), "bf16")
    with pytest.raises(InvalidArgument) as caught:
        convert.run_query(_run_request(good_first, wrong_shape))
    assert caught.value.field == "tensors.second.shape"

    wrong_dtype = codec.encode_tensor(np.ones(first_shape), "fp16")
    with pytest.raises(InvalidArgument) as caught:
        convert.run_query(_run_request(wrong_dtype, good_second))
    assert caught.value.field == "tensors.first.dtype"

    request = pb.RunRequest(problem=codec.problem_to_proto(TINY))
    request.tensors.first.CopyFrom(good_first)
    with pytest.raises(InvalidArgument) as caught:
        convert.run_query(request)
    assert caught.value.field == "tensors.second"
    with pytest.raises(InvalidArgument) as caught:
        convert.run_query(pb.RunRequest(problem=codec.problem_to_proto(TINY)))
    assert caught.value.field == "inputs"


def test_every_kernel_family_has_its_own_proto_value():
    from tiledispatch.native.configs import Family

    values = [codec.FAMILY_TO_PROTO[family.value] for family in Family]
    assert len(set(values)) == len(values)
    assert all(codec.FAMILY_FROM_PROTO[value] == family.value for value, family in zip(values, Family))
