"""Client behaviour: targets, deadlines, retries on UNAVAILABLE only, round robin over replicas."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest

from tests.service.conftest import TINY
from tests.service.harness import free_port
from tiledispatch.client import Client, Problem, resolve_target
from tiledispatch.client.errors import DeadlineExceededError, InvalidArgumentError, UnavailableError
from tiledispatch.v1 import tiledispatch_pb2 as pb
from tiledispatch.v1 import tiledispatch_pb2_grpc as pb_grpc


def test_resolve_target(monkeypatch):
    monkeypatch.delenv("TILEDISPATCH_TARGET", raising=False)
    assert resolve_target(None) == "127.0.0.1:50051"
    monkeypatch.setenv("TILEDISPATCH_TARGET", "10.0.0.1:7000")
    assert resolve_target(None) == "10.0.0.1:7000"
    assert resolve_target(["10.0.0.1:1", "10.0.0.2:2"]) == "ipv4:10.0.0.1:1,10.0.0.2:2"
    assert resolve_target("10.0.0.1:1,10.0.0.2:2") == "ipv4:10.0.0.1:1,10.0.0.2:2"
    assert resolve_target(["[::1]:1", "[::1]:2"]) == "ipv6:[::1]:1,[::1]:2"
    assert resolve_target("dns:///td.default.svc:50051") == "dns:///td.default.svc:50051"
    with pytest.raises(ValueError, match="dns:///"):
        resolve_target(["a.example:1", "b.example:2"])


class Flaky(pb_grpc.TileDispatchServiceServicer):
    """Answers GetServerInfo after ``failures`` UNAVAILABLE answers; Select is always invalid;
    ListModels is slow."""

    def __init__(self, name: str, failures: int = 0):
        self.name, self.failures, self.calls = name, failures, 0
        self.lock = threading.Lock()

    def GetServerInfo(self, request, context):
        with self.lock:
            self.calls += 1
            failing = self.calls <= self.failures
        if failing:
            context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
        return pb.GetServerInfoResponse(gpu_name=self.name)

    def Select(self, request, context):
        with self.lock:
            self.calls += 1
        context.set_trailing_metadata((("tiledispatch-field", "problem.batch"),))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "problem.batch: is required")

    def ListModels(self, request, context):
        time.sleep(2)
        return pb.ListModelsResponse()


@pytest.fixture
def flaky_servers():
    servers, servicers, ports = [], [], []
    for name in ("a", "b"):
        servicer = Flaky(name)
        server = grpc.server(futures.ThreadPoolExecutor(4))
        pb_grpc.add_TileDispatchServiceServicer_to_server(servicer, server)
        port = free_port()
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        servers.append(server)
        servicers.append(servicer)
        ports.append(port)
    yield servicers, ports
    for server in servers:
        server.stop(0)


def test_retries_unavailable_then_succeeds(flaky_servers):
    (servicer, _), (port, _) = flaky_servers
    servicer.failures = 2
    with Client(f"127.0.0.1:{port}", backoff_s=0.01) as client:
        assert client.info()["gpu_name"] == "a"
    assert servicer.calls == 3


def test_retries_are_bounded(flaky_servers):
    (servicer, _), (port, _) = flaky_servers
    servicer.failures = 100
    with Client(f"127.0.0.1:{port}", retries=3, backoff_s=0.01) as client, pytest.raises(UnavailableError):
        client.info()
    assert servicer.calls == 4


def test_other_errors_are_not_retried_and_are_typed(flaky_servers):
    (servicer, _), (port, _) = flaky_servers
    with Client(f"127.0.0.1:{port}", backoff_s=0.01) as client, pytest.raises(InvalidArgumentError) as caught:
        client.select(Problem(**TINY))
    assert servicer.calls == 1
    assert caught.value.field == "problem.batch" and caught.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_deadline(flaky_servers):
    _, (port, _) = flaky_servers
    with Client(f"127.0.0.1:{port}", timeout=0.3) as client:
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            client.list_models()
        assert time.monotonic() - start < 1.5


def test_unreachable_server_fails_within_the_deadline():
    with Client(f"127.0.0.1:{free_port()}", timeout=1.0, backoff_s=0.05) as client:
        start = time.monotonic()
        with pytest.raises((UnavailableError, DeadlineExceededError)):
            client.info()
        assert time.monotonic() - start < 3


def test_round_robin_over_replicas(flaky_servers):
    servicers, ports = flaky_servers
    with Client([f"127.0.0.1:{port}" for port in ports]) as client:
        names = {client.info()["gpu_name"] for _ in range(20)}
    assert names == {"a", "b"}
    assert all(s.calls > 0 for s in servicers)
