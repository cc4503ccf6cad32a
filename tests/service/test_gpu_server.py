"""The real GPU handler behind the service (skipped without a CUDA GPU)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tiledispatch.client import Client
from tiledispatch.native.accuracy import within_limit
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.reference import relative_error, run_reference

from .conftest import TINY
from .harness import ServerProcess

pytestmark = pytest.mark.gpu

PROBLEMS = [
    {**TINY, "dtype": dtype, "direction": direction}
    for dtype in ("bf16", "fp16") for direction in ("fwd", "bwd_data", "bwd_weight")
] + [dict(direction="fwd", dtype="bf16", batch=4, groups=32, in_channels=128, out_channels=128,
          input_size=(14, 14), filter_size=(3, 3), stride=(1, 1), dilation=(1, 1), pad_begin=(1, 1),
          pad_end=(1, 1))]


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory):
    registry = os.environ.get("TILEDISPATCH_REGISTRY_DIR", "")
    args = ["--registry-dir", registry] if registry else []
    server = ServerProcess(tmp_path_factory.mktemp("gpu"), *args).start(timeout=600)
    yield server, bool(registry) and Path(registry).exists()
    server.stop()


def test_info_names_the_gpu(gpu_server):
    server, _ = gpu_server
    with Client(server.target) as client:
        info = client.info()
    assert info["has_gpu"] and info["gpu_count"] >= 1 and info["gpu_name"] and info["cuda_version"]


@pytest.mark.parametrize("fields", PROBLEMS, ids=lambda f: f"{f['direction']}-{f['dtype']}-g{f['groups']}")
def test_run_on_the_gpu_matches_the_reference(gpu_server, fields):
    server, _ = gpu_server
    problem = ConvProblem(**fields)
    with Client(server.target, timeout=600) as client:
        result = client.run(fields, generate_inputs=True, seed=11, return_inputs=True)
    assert result.executed_on == "gpu" and result.elapsed_us > 0
    reference = run_reference(problem, *(x.astype(np.float64) for x in result.inputs))
    error = relative_error(result.output, reference)
    assert within_limit(problem.dtype, error), f"{result.kernel}: relative error {error:.3g}"


def test_benchmark_on_the_gpu(gpu_server):
    server, has_registry = gpu_server
    if not has_registry:
        pytest.skip("Benchmark measures registry binaries: set TILEDISPATCH_REGISTRY_DIR to a built registry")
    with Client(server.target, timeout=600) as client:
        events = list(client.benchmark(PROBLEMS[-1], top_k=3))
        summary = events[-1]
        assert len(events) == 4 and all(e.status == "ok" and e.graph_us > 0 for e in events[:-1])
        assert 0 < summary.selection_efficiency <= 1
        assert client.select(PROBLEMS[-1]).source == "tuning_db"


def test_a_faulting_kernel_on_the_gpu_is_isolated_and_quarantined(tmp_path):
    """A deliberately faulting kernel (an illegal address on the device): the call fails naming the
    kernel, the worker is replaced, the kernel is quarantined, other requests keep being served and
    no tuning data is lost."""
    import grpc
    from grpc_health.v1 import health_pb2

    from tiledispatch.client.errors import InternalError
    from tiledispatch.native.problem import ConvProblem
    from tiledispatch.native.rules import rule_set_configs
    from tiledispatch.native.support import supported_configs
    from tiledispatch.server.tuning_db import TuningDB

    from .harness import health_status

    registry = os.environ.get("TILEDISPATCH_REGISTRY_DIR", "")
    if not (registry and Path(registry).exists()):
        pytest.skip("needs TILEDISPATCH_REGISTRY_DIR with a built registry")
    problem = ConvProblem(**TINY)
    kernels = sorted(c.name for c in supported_configs(problem, rule_set_configs(
        "default", "sm_90", directions=[problem.direction], dtypes=[problem.dtype], ndims=[problem.ndim])))
    faulty, healthy = kernels[-1], kernels[0]
    server = ServerProcess(tmp_path, "--registry-dir", registry, "--worker-handler",
                           "tests.service.faulting_gpu:FaultingGpuHandler",
                           env={"TILEDISPATCH_GPU_FAULTS": faulty}).start(timeout=600)
    try:
        with Client(server.target, timeout=300) as client:
            list(client.benchmark(TINY, kernels=[healthy]))  # some tuning data to keep
            db = TuningDB(Path(server.args[server.args.index('--db') + 1]))
            rows_before = db.count()
            db.close()
            assert rows_before >= 1
            with pytest.raises(InternalError) as caught:
                client.run(TINY, kernel=faulty, generate_inputs=True)
            assert faulty in caught.value.message and caught.value.code == grpc.StatusCode.INTERNAL
            assert health_status(server.port) == health_pb2.HealthCheckResponse.SERVING
            answer = client.run(TINY, kernel=healthy, generate_inputs=True)  # a fresh worker serves
            assert answer.executed_on == "gpu"
            assert {k["name"]: k for k in client.list_kernels(problem=TINY)}[faulty]["quarantined"]
            device = client.info()["device_spec"]
        db = TuningDB(Path(server.args[server.args.index('--db') + 1]))
        assert db.count() >= rows_before and faulty in db.quarantined(device)
        db.close()
    finally:
        server.stop()
