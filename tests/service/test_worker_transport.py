"""Tensors between the server and its GPU worker processes go through shared memory: byte-exact in
both directions for every wire dtype, segments reused and grown, and unlinked when a worker is
restarted or stopped (nothing left in /dev/shm)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from tiledispatch.client import Client
from tiledispatch.native.problem import ConvProblem, DType
from tiledispatch.native.reference import run_reference
from tiledispatch.server.errors import KernelFault
from tiledispatch.server.service import from_wire, generate_inputs, to_wire
from tiledispatch.server.worker import SHM_MIN_BYTES, SHM_PREFIX, WorkerPool
from tiledispatch.v1 import codec

from .echo_gpu import digest

ECHO = "tests.service.echo_gpu:EchoHandler"
WIRE = {"bf16": np.dtype("<u2"), "fp16": np.dtype("<f2"), "fp32": np.dtype("<f4")}


#: The device index of the pools here: their segments are told apart from any other pool's by it.
DEVICE = 5


def segments() -> list[str]:
    """The segments of this process's pools on :data:`DEVICE` in /dev/shm."""
    return sorted(glob.glob(f"/dev/shm/{SHM_PREFIX}{os.getpid()}-{DEVICE}-*"))


@pytest.fixture
def pool():
    workers = WorkerPool([DEVICE], ECHO, {}, timeout_s=20.0)
    workers.start()
    yield workers
    workers.stop()


def random_wire(dtype: str, shape, seed: int) -> np.ndarray:
    """Random bit patterns of the wire type: every byte value, NaN payloads and infinities included."""
    bits = np.random.default_rng(seed).integers(0, 256, size=int(np.prod(shape)) * WIRE[dtype].itemsize,
                                                dtype=np.uint8)
    return bits.view(WIRE[dtype]).reshape(shape)


@pytest.mark.parametrize("dtype", sorted(WIRE))
def test_large_tensors_round_trip_byte_exact(pool, dtype):
    first = random_wire(dtype, (3, 64, 65, 1, 17), seed=1)     # ~0.4-0.8 MB: through shared memory
    second = random_wire(dtype, (5, 1, 1, 1, 17), seed=2)       # small: pickled with the message
    raw = first.tobytes()
    answer = pool.call("echo", {"first": first, "second": second, "raw": raw, "kernel": "k"}, "k")
    assert first.nbytes >= SHM_MIN_BYTES > second.nbytes
    seen = answer["seen"]
    assert seen["first"] == ("ndarray", digest(first))  # the worker saw the exact bytes, in place
    assert seen["raw"] == ("ndarray", digest(raw))      # bytes-like arrive as uint8 arrays
    assert seen["second"][1] == digest(second)
    back = answer["first"]
    assert back.dtype == first.dtype and back.shape == first.shape and back.tobytes() == raw
    assert answer["raw"].tobytes() == raw and answer["second"].tobytes() == second.tobytes()
    assert answer["kernel"] == "k"
    # The caller's answer is its own copy: the next call reusing the segment does not change it.
    pool.call("echo", {"first": np.zeros_like(first)}, "k")
    assert back.tobytes() == raw


def test_non_contiguous_arrays_are_sent_in_c_order(pool):
    base = random_wire("fp32", (64, 2048), seed=3)
    view = base[:, ::2].T
    answer = pool.call("echo", {"x": view}, "k")
    assert answer["x"].shape == view.shape and answer["x"].tobytes() == view.tobytes()


def test_segments_are_reused_grown_and_unlinked_on_stop():
    workers = WorkerPool([DEVICE], ECHO, {}, timeout_s=20.0)
    workers.start()
    try:
        assert segments() == []  # created on the first large call, not before
        workers.call("echo", {"x": np.ones(300_000, np.uint8)}, "k")
        first = segments()
        assert len(first) == 2  # one in, one out
        workers.call("echo", {"x": np.ones(200_000, np.uint8)}, "k")
        assert segments() == first  # reused
        answer = workers.call("fill", {"n": 5 << 20, "value": 7}, "k")  # an answer larger than the out segment
        assert answer["array"].nbytes == 5 << 20 and (answer["array"] == 7).all()
        grown = segments()
        assert len(grown) == 2 and grown != first and set(grown) & set(first)  # out replaced, in kept
        workers.call("echo", {"x": np.ones(9 << 20, np.uint8)}, "k")
        assert len(segments()) == 2
    finally:
        workers.stop()
    assert segments() == []


def test_a_worker_crash_releases_its_segments_and_the_next_call_works(pool):
    big = random_wire("fp16", (1 << 20,), seed=4)
    pool.call("echo", {"x": big}, "k")
    before = segments()
    assert len(before) == 2
    with pytest.raises(KernelFault, match="crashed its GPU worker"):
        pool.call("crash", {"x": big}, "k_crash")
    assert segments() == []  # the restart unlinked them
    answer = pool.call("echo", {"x": big}, "k")
    assert answer["x"].tobytes() == big.tobytes()
    assert len(segments()) == 2 and not set(segments()) & set(before)


def test_a_hung_worker_releases_its_segments():
    workers = WorkerPool([DEVICE], "tests.service.fake_gpu:FakeGpuHandler", {"faults": "hang:k_hang"}, timeout_s=1.0)
    workers.start()
    try:
        problem = ConvProblem(direction="fwd", dtype="fp16", batch=2, groups=1, in_channels=16, out_channels=4,
                              input_size=(64, 64), filter_size=(1, 1), stride=(1, 1), dilation=(1, 1),
                              pad_begin=(0, 0), pad_end=(0, 0))
        first, second = generate_inputs(problem, 0)
        payload = {"problem": problem.to_dict(), "first": first, "second": second}
        with pytest.raises(KernelFault, match="hung"):
            workers.call("run", {**payload, "kernel": "k_hang"}, "k_hang")
        assert segments() == []
        answer = workers.call("run", {**payload, "kernel": "k_ok"}, "k_ok")
        assert np.frombuffer(answer["output"], np.float16).size == 2 * 64 * 64 * 4
    finally:
        workers.stop()
    assert segments() == []


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_run_through_the_worker_is_byte_exact(fake_gpu_server, dtype):
    """Run with tensors over 64 KiB: client -> server -> worker (shared memory) -> back, compared bit
    for bit with the same float64 reference computed here."""
    port, _ = fake_gpu_server
    spec = dict(direction="fwd", dtype=dtype, batch=2, groups=1, in_channels=16, out_channels=8, input_size=(48, 40),
                filter_size=(1, 1))
    problem = ConvProblem(**{**spec, "stride": (1, 1), "dilation": (1, 1), "pad_begin": (0, 0), "pad_end": (0, 0)})
    first, second = generate_inputs(problem, 5)
    assert first.nbytes >= SHM_MIN_BYTES
    with Client(f"127.0.0.1:{port}", timeout=60) as client:
        result = client.run(spec, (first, second), bf16="bits")
    assert result.executed_on == "gpu" and result.elapsed_us > 0
    expected = run_reference(problem, from_wire(first, problem.dtype), from_wire(second, problem.dtype))
    expected = to_wire(expected.astype(np.float32) if problem.dtype is DType.BF16 else expected, problem.dtype)
    assert result.output.dtype == codec.WIRE_DTYPE[codec.DTYPE_TO_PROTO[dtype]]
    assert result.output.shape == expected.shape and result.output.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype, values", [("bf16", np.linspace(-3, 3, 4096).reshape(8, 512)),
                                           ("bf16", np.arange(4096, dtype=np.uint16).reshape(64, 64)),
                                           ("fp16", np.linspace(-3, 3, 8192).reshape(64, 128)[:, ::2]),
                                           ("fp32", np.zeros((0, 3), np.float32)),
                                           ("fp32", np.arange(12, dtype=">f4").reshape(3, 4))])
def test_client_serialization_is_the_message_protobuf_builds(dtype, values):
    """The client's one-copy Run serialization parses to exactly the message built field by field."""
    from tiledispatch.v1 import tiledispatch_pb2 as pb

    head = pb.RunRequest(problem=pb.Problem(batch=2, dtype=codec.dtype_to_proto(dtype)), kernel="k")
    expected = pb.RunRequest()
    expected.CopyFrom(head)
    codec.encode_tensor(values, dtype, out=expected.tensors.first)
    codec.encode_tensor(values[:1], dtype, out=expected.tensors.second)
    parsed = pb.RunRequest.FromString(codec.serialize_run_request(head, values, values[:1], dtype))
    assert parsed == expected
    assert codec.decode_tensor(parsed.tensors.first, bf16="bits").tobytes() == \
        codec.wire_array(values, dtype)[1].tobytes()
    with pytest.raises(ValueError, match="inputs"):
        codec.serialize_run_request(expected, values, values, dtype)


def test_without_shared_memory_tensors_go_through_the_pipe(monkeypatch):
    """A /dev/shm too small for a segment (a container's default): same answers, nothing left behind."""
    import errno

    from tiledispatch.server import worker as worker_module

    def full(segment, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(worker_module, "_reserve", full)
    workers = WorkerPool([DEVICE], ECHO, {}, timeout_s=20.0)
    workers.start()
    try:
        big = random_wire("fp32", (1 << 18,), seed=6)
        answer = workers.call("echo", {"x": big}, "k")
        assert answer["seen"]["x"] == ("ndarray", digest(big)) and answer["x"].tobytes() == big.tobytes()
        assert (workers.call("fill", {"n": 3 << 20, "value": 9}, "k")["array"] == 9).all()
        assert segments() == []
    finally:
        workers.stop()


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_server_leaves_no_shared_memory_behind(tmp_path, how):
    """``tiledispatch serve`` with a worker: after a Run that used shared memory, a graceful stop
    unlinks the segments; a killed server's resource tracker does."""
    import signal
    import time

    from .harness import FAKE_HANDLER, ServerProcess, newest_models

    server = ServerProcess(tmp_path, "--gpus", "0", "--worker-handler", FAKE_HANDLER,
                           "--models-dir", str(newest_models(tmp_path))).start()
    pattern = f"/dev/shm/{SHM_PREFIX}{server.process.pid}-*"
    try:
        spec = dict(direction="fwd", dtype="fp16", batch=2, groups=1, in_channels=16, out_channels=4,
                    input_size=(64, 64), filter_size=(1, 1))
        first = np.ones((2, 64, 64, 1, 16), np.float16)
        with Client(server.target, timeout=60) as client:
            assert client.run(spec, (first, np.ones((1, 4, 1, 1, 16), np.float16))).executed_on == "gpu"
        assert len(glob.glob(pattern)) == 2
        if how == "sigkill":
            server.process.send_signal(signal.SIGKILL)
            server.process.wait(10)
    finally:
        server.stop()
    deadline = time.monotonic() + 20  # the resource tracker notices its users are gone
    while glob.glob(pattern) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert glob.glob(pattern) == []
