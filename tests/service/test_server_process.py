"""The server as the README starts it (``tiledispatch serve`` in a subprocess), called by three
independent clients: ours, ``buf curl`` through reflection, and grpclib (a second gRPC stack)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2
from grpclib.client import Channel, UnaryStreamMethod, UnaryUnaryMethod
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from tiledispatch.client import Client
from tiledispatch.client.errors import FailedPreconditionError, InvalidArgumentError, ResourceExhaustedError
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb

from ..conftest import HAS_CUDA
from .conftest import TINY
from .harness import SERVICE, ServerProcess, health_status, newest_models

#: The shipped forward model the server picks: the newest version under models/artifacts.
SHIPPED_FWD = "lgbm-sm_90-bf16-fwd"
SHIPPED_FWD_VERSION = str(max(int(p.name) for p in (Path(__file__).resolve().parents[2] / "models" / "artifacts"
                                                    / SHIPPED_FWD).iterdir() if p.name.isdigit()))

BUF = Path(sys.executable).parent / "buf"


def _buf() -> str:
    buf = str(BUF) if BUF.exists() else shutil.which("buf")
    if buf is None:
        pytest.skip("the buf binary is not installed")
    return buf


def test_our_client(server_process):
    with Client(server_process.target) as client:
        info = client.info()
        assert info["has_gpu"] is HAS_CUDA  # --gpus auto probed this host
        assert info["max_message_bytes"] == 4 * 1024 * 1024
        selection = client.select(TINY)
        assert (selection.source, selection.model) == ("model", (SHIPPED_FWD, SHIPPED_FWD_VERSION))
        result = client.run(TINY, generate_inputs=True)
        assert result.executed_on == ("gpu" if HAS_CUDA else "cpu_reference")
        assert result.output.dtype == np.float32 and result.output.shape == (2, 2, 6, 3, 3)


def test_buf_curl_through_reflection(server_process):
    url = f"http://{server_process.target}/{SERVICE}/GetServerInfo"
    done = subprocess.run([_buf(), "curl", "--protocol", "grpc", "--http2-prior-knowledge", url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["arch"] == "sm_90" and info["registrySource"] == "rule_set:default"
    problem = json.dumps({"problem": {**codec.problem_from_proto(codec.problem_to_proto(TINY)),
                                      "direction": "DIRECTION_FORWARD", "dtype": "DATA_TYPE_BF16",
                                      "layout": "LAYOUT_NHWGC", "in_channels": 7}})
    done = subprocess.run([_buf(), "curl", "--protocol", "grpc", "--http2-prior-knowledge", "-d", problem,
                           f"http://{server_process.target}/{SERVICE}/Select"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    error = json.loads(done.stdout or done.stderr)
    assert error["code"] == "invalid_argument" and error["message"].startswith("problem.in_channels:")


def test_grpclib_client(server_process):
    host, port = server_process.target.split(":")

    async def main():
        channel = Channel(host, int(port))
        try:
            info = await UnaryUnaryMethod(channel, f"/{SERVICE}/GetServerInfo", pb.GetServerInfoRequest,
                                          pb.GetServerInfoResponse)(pb.GetServerInfoRequest(), timeout=30)
            select = UnaryUnaryMethod(channel, f"/{SERVICE}/Select", pb.SelectRequest, pb.SelectResponse)
            answer = await select(pb.SelectRequest(problem=codec.problem_to_proto(TINY), top_k=2), timeout=30)
            with pytest.raises(GRPCError) as bad:
                await select(pb.SelectRequest(problem=codec.problem_to_proto({**TINY, "batch": 0})), timeout=30)
            with pytest.raises(GRPCError) as no_gpu:
                await UnaryStreamMethod(channel, f"/{SERVICE}/Benchmark", pb.BenchmarkRequest,
                                        pb.BenchmarkResponse)(pb.BenchmarkRequest(problem=answer_problem), timeout=30)
            return info, answer, bad.value, no_gpu.value
        finally:
            channel.close()

    answer_problem = codec.problem_to_proto({**TINY, "batch": 0})
    info, answer, bad, bad_stream = asyncio.run(main())
    assert info.registry_size > 0 and info.has_gpu is HAS_CUDA
    assert len(answer.candidates) == 2 and answer.source == pb.SELECTION_SOURCE_MODEL
    assert bad.status == Status.INVALID_ARGUMENT and bad.message.startswith("problem.batch:")
    assert bad_stream.status == Status.INVALID_ARGUMENT and bad_stream.message.startswith("problem.batch:")


def test_message_size_limit(server_process):
    with Client(server_process.target) as client:
        big = np.zeros((2, 1024, 1024), dtype=np.float32)  # 8 MiB > --max-message-mb 4
        with pytest.raises(ResourceExhaustedError):
            client.run(TINY, (big, big))
        with pytest.raises(ResourceExhaustedError) as caught:  # the answer would not fit
            client.run({**TINY, "batch": 512, "input_size": (32, 32)}, generate_inputs=True)
        assert caught.value.field == "problem"
        if not HAS_CUDA:
            with pytest.raises(FailedPreconditionError):
                list(client.benchmark(TINY))


def test_metrics_endpoint(server_process):
    with Client(server_process.target) as client:
        client.select(TINY)
        client.run(TINY)  # generated inputs: feeds the kernel-run histogram whatever ran before
        with pytest.raises(InvalidArgumentError):
            client.select({**TINY, "groups": 4})
    text = urllib.request.urlopen(f"http://127.0.0.1:{server_process.metrics_port}/metrics", timeout=10).read()
    text = text.decode()
    # Without a built registry the server's candidates are the default rule set for its arch.
    registry_size = len(rule_set_configs("default", "sm_90"))
    for needle in ('tiledispatch_rpc_requests_total{code="OK",method="Select"}',
                   'tiledispatch_rpc_requests_total{code="INVALID_ARGUMENT",method="Select"}',
                   'tiledispatch_rpc_latency_seconds_bucket{code="OK",le="0.005",method="Select"}',
                   f'tiledispatch_selections_total{{model="{SHIPPED_FWD}/{SHIPPED_FWD_VERSION}",source="model"}}',
                   "tiledispatch_selection_cache_total", "tiledispatch_selection_cache_hit_ratio",
                   f"tiledispatch_registry_kernels {registry_size}.0", "tiledispatch_ready 1.0",
                   "tiledispatch_kernel_run_seconds_count", "tiledispatch_worker_restarts_total",
                   "tiledispatch_prediction_relative_error"):
        assert needle in text, needle
    assert "python_gc_objects_collected_total" not in text  # our own registry, not the global one


def test_load_on_loopback(server_process):
    """32 concurrent clients for a few seconds: every call OK."""
    errors: list[BaseException] = []
    counts = [0] * 32
    stop_at = time.monotonic() + 3.0

    def worker(i: int) -> None:
        try:
            with Client(server_process.target, timeout=30) as client:
                while time.monotonic() < stop_at:
                    problem = {**TINY, "batch": 1 + (counts[i] + i) % 8}
                    client.select(problem, top_k=3)
                    if counts[i] % 10 == 0:
                        client.list_models()
                    counts[i] += 1
        except BaseException as error:  # collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[:3]
    assert all(counts) and sum(counts) > 200


def test_graceful_shutdown_on_sigterm(tmp_path):
    server = ServerProcess(tmp_path, "--gpus", "none", "--grace-s", "2",
                           "--models-dir", str(newest_models(tmp_path))).start()
    with Client(server.target) as client:
        assert client.select(TINY).source == "model"
    start = time.monotonic()
    status = server.stop()
    assert status == 0 and time.monotonic() - start < 15
    assert health_status(server.port) is None  # gone
    log = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    messages = [entry["msg"] for entry in log]
    assert {"listening", "serving", "shutting down", "stopped"} <= set(messages)
    assert all({"ts", "level", "logger", "msg"} <= set(entry) for entry in log)


def test_health_serving(server_process):
    assert health_status(server_process.port) == health_pb2.HealthCheckResponse.SERVING
    assert health_status(server_process.port, service="") == health_pb2.HealthCheckResponse.SERVING


def test_port_in_use_fails_loudly(server_process, tmp_path):
    clash = ServerProcess(tmp_path, "--gpus", "none", port=server_process.port)
    done = subprocess.run(clash.args, env=clash.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "cannot listen" in done.stdout + done.stderr
    with grpc.insecure_channel(server_process.target) as channel:  # the first server is unaffected
        grpc.channel_ready_future(channel).result(timeout=10)
