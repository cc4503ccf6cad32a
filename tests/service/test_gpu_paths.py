"""The GPU-only paths (Run on a worker, Benchmark, AUTOTUNE, fault isolation and quarantine), run
on the CPU through a worker handler that fakes the GPU. The real handler is covered by the tests
marked ``gpu``."""

from __future__ import annotations

import json
import urllib.request

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2

from tiledispatch.client import Client
from tiledispatch.client.errors import FailedPreconditionError, InternalError, NotFoundError
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.reference import run_reference
from tiledispatch.server.tuning_db import TuningDB

from .conftest import TINY, crashing_kernel
from .harness import health_status


@pytest.fixture(scope="module")
def client(fake_gpu_server):
    port, _ = fake_gpu_server
    with Client(f"127.0.0.1:{port}", timeout=60) as c:
        yield c


def db_rows(settings) -> int:
    db = TuningDB(settings.db)
    try:
        return db.count()
    finally:
        db.close()


def metric(settings, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{settings.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_info_reports_the_worker(client):
    info = client.info()
    assert info["has_gpu"] and info["gpu_count"] == 1 and info["gpu_name"] == "Fake GPU (tests)"


def test_run_goes_to_the_worker(client):
    result = client.run(TINY, generate_inputs=True, seed=3, return_inputs=True)
    assert result.executed_on == "gpu" and result.elapsed_us > 0
    expected = run_reference(ConvProblem(**TINY), *(x.astype(np.float64) for x in result.inputs))
    assert np.allclose(result.output, expected, rtol=2**-8, atol=2**-8 * np.abs(expected).max())


def test_benchmark_streams_records_and_feeds_selection(client, fake_gpu_server):
    _, settings = fake_gpu_server
    problem = {**TINY, "batch": 3}
    rows = db_rows(settings)
    before = client.select(problem, top_k=4)
    assert before.source == "analytic"
    events = list(client.benchmark(problem, top_k=4))
    measurements, summary = events[:-1], events[-1]
    assert [m.index for m in measurements] == [0, 1, 2, 3] and all(m.total == 4 for m in measurements)
    assert [m.kernel for m in measurements] == [c.kernel for c in before.candidates]
    assert all(m.status == "ok" and m.graph_us > 0 and m.predicted_us > 0 for m in measurements)
    fastest = min(measurements, key=lambda m: m.graph_us)
    assert summary.oracle_kernel == fastest.kernel and summary.oracle_us == fastest.graph_us
    assert summary.selected_kernel == before.best.kernel and summary.selection_source == "analytic"
    assert summary.selection_efficiency == pytest.approx(fastest.graph_us / measurements[0].graph_us)
    assert summary.measured == 4 and summary.failed == 0 and summary.gpu_name == "Fake GPU (tests)"
    assert db_rows(settings) == rows + 4
    after = client.select(problem, top_k=4)  # exact hit now
    assert after.source == "tuning_db" and after.best.kernel == fastest.kernel
    assert after.best.measured_us == fastest.graph_us
    assert metric(settings, "tiledispatch_prediction_relative_error_count") >= 4


def test_benchmark_named_kernels_validated_first(client, fake_gpu_server):
    _, settings = fake_gpu_server
    rows = db_rows(settings)
    good = client.select(TINY).best.kernel
    with pytest.raises(NotFoundError) as caught:
        list(client.benchmark(TINY, kernels=[good, "gconv_unknown"]))
    assert caught.value.field == "kernels[1]"
    assert db_rows(settings) == rows
    events = list(client.benchmark(TINY, kernels=[good]))
    assert len(events) == 2 and events[0].kernel == good


def test_autotune(client):
    problem = {**TINY, "batch": 5}
    selection = client.select(problem, policy="autotune", top_k=3)
    assert selection.source == "autotune" and len(selection.candidates) == 3
    measured = [c.measured_us for c in selection.candidates]
    assert measured == sorted(measured) and all(m > 0 for m in measured)
    assert client.select(problem).source == "tuning_db"


def test_a_crashing_kernel_is_isolated_and_quarantined(client, fake_gpu_server):
    port, settings = fake_gpu_server
    kernel = crashing_kernel()
    restarts = metric(settings, "tiledispatch_worker_restarts_total")
    with pytest.raises(InternalError) as caught:
        client.run(TINY, kernel=kernel, generate_inputs=True)
    assert kernel in caught.value.message and "crashed" in caught.value.message
    assert caught.value.code == grpc.StatusCode.INTERNAL
    assert health_status(port) == health_pb2.HealthCheckResponse.SERVING
    assert metric(settings, "tiledispatch_worker_restarts_total") == restarts + 1
    # The worker was replaced: the next run works; the kernel is quarantined, here and on disk.
    assert client.run(TINY, generate_inputs=True).executed_on == "gpu"
    listed = {k["name"]: k for k in client.list_kernels(problem=TINY)}
    assert listed[kernel]["quarantined"]
    assert kernel not in [c.kernel for c in client.select(TINY, top_k=1000).candidates]
    db = TuningDB(settings.db)
    assert kernel in db.quarantined("h200")
    db.close()
    with pytest.raises(FailedPreconditionError) as again:
        client.run(TINY, kernel=kernel, generate_inputs=True)
    assert "quarantined" in str(again.value) and again.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert client.info()["quarantined_kernels"] >= 1


def test_bench_command_streams(fake_gpu_server, capsys):
    from tiledispatch.client.cli import main

    port, _ = fake_gpu_server
    args = ["bench", "--target", f"127.0.0.1:{port}", "--direction", "bwd_weight", "--n", "2", "--g", "3", "--c", "6",
            "--k", "9", "--input", "5,6", "--filter", "3,2", "--top-k", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "[1/2]" in out and "[2/2]" in out and "oracle" in out and "efficiency" in out
    assert main([*args, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [next(iter(line)) for line in lines] == ["measurement", "measurement", "summary"]
