"""The transport shortcuts: Select answered from stored serialized bytes (server/answers.py) and Run
requests parsed without copying their tensors (codec.parse_run_request). Each must give exactly
what the plain path gives, and never a stale answer."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from google.protobuf.message import DecodeError

from tiledispatch.client import Client, TileDispatchError
from tiledispatch.native.problem import ConvProblem
from tiledispatch.server import convert
from tiledispatch.server.answers import Answer, AnswerCache
from tiledispatch.server.errors import InvalidArgument
from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb
from tiledispatch.v1 import tiledispatch_pb2_grpc as pb_grpc

from .conftest import TINY


# ---- Select answers ------------------------------------------------------------------------------
def test_answer_cache_drops_entries_of_an_older_generation():
    cache = AnswerCache(2)
    cache.put(b"a", Answer(0, b"A", None))
    assert cache.get(b"a", 0).data == b"A"
    assert cache.get(b"a", 1) is None      # the selector's cache was cleared since
    assert cache.get(b"a", 0) is None      # and the stale entry is gone for good
    for key in (b"x", b"y", b"z"):
        cache.put(key, Answer(0, key, None))
    assert len(cache) == 2 and cache.get(b"x", 0) is None  # LRU bound


def test_stored_answers_equal_computed_ones(cpu_server):
    port, _ = cpu_server
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.TileDispatchServiceStub(channel)
        problem = codec.problem_to_proto({**TINY, "batch": 7})
        first = stub.Select(pb.SelectRequest(problem=problem, top_k=3))
        second = stub.Select(pb.SelectRequest(problem=problem, top_k=3))  # from the selector's cache: stored
        third = stub.Select(pb.SelectRequest(problem=problem, top_k=3))   # the stored bytes
        assert not first.cached and second.cached and third.cached
        assert second == third and len(third.candidates) == 3
        assert [c.kernel for c in first.candidates] == [c.kernel for c in third.candidates]
        other = stub.Select(pb.SelectRequest(problem=problem, top_k=1))  # other bytes: its own answer
        assert len(other.candidates) == 1 and other.candidates[0].kernel == first.candidates[0].kernel


def test_a_quarantine_is_never_hidden_by_a_stored_answer(fake_gpu_server):
    """Stored answers die with the selector's cache: after a kernel is quarantined (here: it
    crashed the fake GPU) the same request bytes no longer name it."""
    from .conftest import crashing_kernel

    port, _ = fake_gpu_server
    crasher = crashing_kernel()
    problem = dict(TINY)
    with Client(f"127.0.0.1:{port}", timeout=60) as client:
        ranked = [c.kernel for c in client.select(problem, top_k=1000).candidates]
        assert crasher in ranked
        for _ in range(2):
            assert client.select(problem, top_k=1000).cached  # now answered from stored bytes
        with pytest.raises(TileDispatchError):  # the kernel crashed the (fake) GPU worker
            client.run(problem, kernel=crasher, generate_inputs=True)
        after = client.select(problem, top_k=1000)
        assert crasher not in [c.kernel for c in after.candidates]
        client.lift_quarantine(crasher)
        assert crasher in [c.kernel for c in client.select(problem, top_k=1000).candidates]


# ---- Run requests --------------------------------------------------------------------------------
def _tensors() -> tuple[np.ndarray, np.ndarray]:
    first_shape, second_shape, _ = ConvProblem(**TINY).operand_shapes
    rng = np.random.default_rng(3)
    return (codec.float_to_bf16_bits(rng.standard_normal(first_shape)),
            codec.float_to_bf16_bits(rng.standard_normal(second_shape)))


def test_parsed_run_request_matches_protobuf():
    first, second = _tensors()
    request = pb.RunRequest(problem=codec.problem_to_proto(TINY), kernel="k")
    data = codec.serialize_run_request(request, first, second, "bf16")
    parsed = codec.parse_run_request(data)
    assert isinstance(parsed, codec.ParsedRunRequest)
    assert parsed.message.tensors.first.data == b"" and parsed.message.kernel == "k"
    fast, plain = convert.run_query(parsed), convert.run_query(pb.RunRequest.FromString(data))
    assert fast.problem == plain.problem and fast.kernel == plain.kernel
    for a, b, want in zip(fast.inputs, plain.inputs, (first, second)):
        assert np.array_equal(a, b) and np.array_equal(a, want)


def test_parsed_run_request_keeps_protobuf_semantics_for_unusual_layouts():
    first, second = _tensors()
    request = pb.RunRequest(problem=codec.problem_to_proto(TINY))
    data = codec.serialize_run_request(request, first, second, "bf16")
    generate = pb.RunRequest(generate=pb.GenerateInputs(seed=5)).SerializeToString()
    # tensors then generate: the oneof's last field wins, as protobuf says
    assert codec.parse_run_request(data + generate) == pb.RunRequest.FromString(data + generate)
    # tensors given twice: protobuf merges them; the fast parser leaves that to protobuf
    twice = data + data[len(request.SerializeToString()):]
    assert codec.parse_run_request(twice) == pb.RunRequest.FromString(twice)
    # damaged: the same DecodeError protobuf raises (the decode interceptor answers INVALID_ARGUMENT)
    with pytest.raises(DecodeError):
        codec.parse_run_request(data[:-3])  # a field longer than the message


def test_parsed_run_request_still_names_a_short_tensor():
    first, second = _tensors()
    request = pb.RunRequest(problem=codec.problem_to_proto(TINY))
    parsed = codec.parse_run_request(codec.serialize_run_request(request, first[..., :-1], second, "bf16"))
    with pytest.raises(InvalidArgument) as caught:
        convert.run_query(parsed)
    assert caught.value.field == "tensors.first.shape"


def test_run_over_the_wire_with_the_fast_parser(cpu_server):
    port, _ = cpu_server
    first, second = _tensors()
    with Client(f"127.0.0.1:{port}", timeout=60) as client:
        given = client.run(TINY, (first, second), bf16="bits")
        generated = client.run(TINY, generate_inputs=True, seed=4, return_inputs=True, bf16="bits")
        again = client.run(TINY, generated.inputs, bf16="bits")
    assert given.output.shape == ConvProblem(**TINY).operand_shapes[2]
    assert np.array_equal(again.output, generated.output)


# ---- undecodable requests (checked in the handlers, not by a per-call interceptor) --------------
@pytest.mark.parametrize("method, streaming", [("Select", False), ("Run", False), ("Benchmark", True)])
def test_undecodable_bytes_are_invalid_argument(cpu_server, method, streaming):
    port, _ = cpu_server
    garbage = b"\x0a\xff\xff\xff\xff\x0f"  # field 1, length-delimited, longer than the message
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        path = f"/tiledispatch.v1.TileDispatchService/{method}"
        call = (channel.unary_stream(path) if streaming else channel.unary_unary(path))
        with pytest.raises(grpc.RpcError) as caught:
            result = call(garbage, timeout=30)
            list(result) if streaming else None
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"not a valid {method} request message" in caught.value.details()
