"""Shared-memory Run inputs (server/shm_inputs.py, client/shm.py): the same answer as sending the
bytes; refused unless the server allows it and the caller is local; every bad segment, name, offset,
dtype or shape refused naming its field; the client's segment unlinked on close."""

from __future__ import annotations

import os
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest

from tiledispatch.client import Client
from tiledispatch.client.errors import FailedPreconditionError, InvalidArgumentError
from tiledispatch.native.problem import ConvProblem
from tiledispatch.server import shm_inputs
from tiledispatch.server.config import parse_settings
from tiledispatch.server.errors import FailedPrecondition, InvalidArgument
from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb

from .conftest import TINY
from .harness import in_process_server, settings_for

SHAPES = ConvProblem(**TINY).operand_shapes
BF16 = pb.DATA_TYPE_BF16
ROLES = ("input", "weight")


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    return rng.standard_normal(SHAPES[0]).astype(np.float32), rng.standard_normal(SHAPES[1]).astype(np.float32)


@pytest.fixture(scope="module")
def shm_server(tmp_path_factory):
    settings = settings_for(tmp_path_factory.mktemp("shm"), allow_shared_memory=True)
    with in_process_server(settings) as (port, _):
        yield port


@pytest.fixture
def segment():
    """A client-named segment holding both operands (bf16 bits) at offsets 0 and 4096."""
    first, second = (codec.float_to_bf16_bits(a) for a in _inputs())
    shm = shared_memory.SharedMemory(name=f"tiledispatch-client-test-{os.getpid()}", create=True, size=8192)
    np.ndarray(first.shape, first.dtype, buffer=shm.buf)[...] = first
    np.ndarray(second.shape, second.dtype, buffer=shm.buf, offset=4096)[...] = second
    message = pb.SharedMemoryInputs(segment=shm.name,
                                    first=pb.SharedMemoryTensor(dtype=BF16, shape=SHAPES[0], offset=0),
                                    second=pb.SharedMemoryTensor(dtype=BF16, shape=SHAPES[1], offset=4096))
    yield message, (first, second)
    shm.close()
    shm.unlink()


def _refused(message: pb.SharedMemoryInputs) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        shm_inputs.read_inputs(message, BF16, SHAPES[:2], ROLES)
    return caught.value


def test_reads_the_operands_in_place(segment):
    message, (first, second) = segment
    got = shm_inputs.read_inputs(message, BF16, SHAPES[:2], ROLES)
    assert np.array_equal(got[0], first) and np.array_equal(got[1], second)
    assert not got[0].flags.writeable  # mapped read-only


@pytest.mark.parametrize("name", ["../../etc/passwd", "tiledispatch-1234-0-in1-ab", "tiledispatch-client-",
                                  "tiledispatch-client-a/b", "x" * 30, "tiledispatch-client-" + "a" * 201])
def test_names_outside_the_client_prefix_are_refused(segment, name):
    message, _ = segment
    bad = pb.SharedMemoryInputs()
    bad.CopyFrom(message)
    bad.segment = name
    error = _refused(bad)
    assert error.field == "shared_memory.segment" and "tiledispatch-client-" in error.message


def test_bad_segments_offsets_dtypes_and_shapes_name_their_field(segment):
    message, _ = segment
    cases = {
        "shared_memory.segment": lambda m: setattr(m, "segment", "tiledispatch-client-missing-xyz"),
        "shared_memory.second.offset": lambda m: setattr(m.second, "offset", 8000),
        "shared_memory.first.dtype": lambda m: setattr(m.first, "dtype", pb.DATA_TYPE_FP16),
        "shared_memory.second.shape": lambda m: m.second.shape.append(1),
        "shared_memory.second": lambda m: m.ClearField("second"),
    }
    for field, spoil in cases.items():
        bad = pb.SharedMemoryInputs()
        bad.CopyFrom(message)
        spoil(bad)
        error = _refused(bad)
        assert error.field == field, (field, error.details)
    assert "past the end of the segment (8192 bytes)" in _refused(
        _with(message, lambda m: setattr(m.second, "offset", 8000))).message


def _with(message, spoil):
    bad = pb.SharedMemoryInputs()
    bad.CopyFrom(message)
    spoil(bad)
    return bad


def test_only_when_allowed_and_only_from_this_host():
    with pytest.raises(FailedPrecondition) as caught:
        shm_inputs.check_allowed(False, "ipv4:127.0.0.1:5000")
    assert caught.value.field == "shared_memory" and "--allow-shared-memory" in caught.value.message
    with pytest.raises(FailedPrecondition) as caught:
        shm_inputs.check_allowed(True, "ipv4:10.1.2.3:5000")
    assert "10.1.2.3" in caught.value.message
    for peer in ("ipv4:127.0.0.1:1", "ipv4:127.8.0.1:1", "ipv6:[::1]:1", "ipv6:[::ffff:127.0.0.1]:1", "unix:/tmp/s"):
        assert shm_inputs.is_local_peer(peer), peer
    for peer in ("ipv4:192.168.0.1:1", "ipv6:[2001:db8::1]:1", "ipv6:[::ffff:10.0.0.1]:1", "", "dns:x"):
        assert not shm_inputs.is_local_peer(peer), peer


def test_the_switch_parses_as_a_switch():
    assert parse_settings([]).allow_shared_memory is False
    assert parse_settings(["--allow-shared-memory"]).allow_shared_memory is True
    assert parse_settings([], {"TILEDISPATCH_ALLOW_SHARED_MEMORY": "true"}).allow_shared_memory is True
    assert parse_settings([], {"TILEDISPATCH_ALLOW_SHARED_MEMORY": "0"}).allow_shared_memory is False
    with pytest.raises(SystemExit):
        parse_settings([], {"TILEDISPATCH_ALLOW_SHARED_MEMORY": "maybe"})


def _client_segments() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob(f"tiledispatch-client-{os.getpid()}-*")}


def test_same_answer_as_bytes_and_the_segment_goes_with_the_client(shm_server):
    first, second = _inputs()
    before = _client_segments()
    with Client(f"127.0.0.1:{shm_server}", timeout=60) as client:
        plain = client.run(TINY, (first, second), bf16="bits")
        local = client.run(TINY, (first, second), bf16="bits", shared_memory=True)
        again = client.run(TINY, (first * 2, second), bf16="bits", shared_memory=True)  # the segment reused
        assert len(_client_segments() - before) == 1
        with pytest.raises(ValueError, match="shared_memory"):
            client.run(TINY, generate_inputs=True, shared_memory=True)
        with pytest.raises(InvalidArgumentError) as caught:  # checked by the server like tensors
            client.run(TINY, (first[..., :-1], second), shared_memory=True)
        assert caught.value.field == "shared_memory.first.shape"
    assert _client_segments() == before
    assert np.array_equal(plain.output, local.output) and local.kernel == plain.kernel
    assert not np.array_equal(again.output, local.output)


def test_refused_by_a_server_that_does_not_allow_it(cpu_server):
    port, _ = cpu_server
    first, second = _inputs()
    with Client(f"127.0.0.1:{port}", timeout=60) as client, pytest.raises(FailedPreconditionError) as caught:
        client.run(TINY, (first, second), shared_memory=True)
    assert caught.value.field == "shared_memory" and "--allow-shared-memory" in str(caught.value)
