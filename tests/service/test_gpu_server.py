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
