"""Issue 7.3: overload. Concurrency and queue limits shed load with RESOURCE_EXHAUSTED (memory stays
bounded, admitted calls keep a bounded latency), and a call whose deadline passes while it waits
for the GPU worker is dropped, never run."""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest

from tests.service.conftest import TINY
from tests.service.harness import ServerProcess, newest_models, settings_for
from tiledispatch.client import Client, DeadlineExceededError, ResourceExhaustedError
from tiledispatch.client.errors import TileDispatchError

from .servers import open_fds, report_path, rss_kib, running_server, serving

REPO = Path(__file__).resolve().parents[2]
REPORT = report_path("overload_report.json")
SLOW = "tests.hardening.slow_gpu:SlowGpuHandler"
#: ~30 ms of float64 CPU reference per Run on this kind of host.
HEAVY = {**TINY, "batch": 4, "groups": 4, "in_channels": 64, "out_channels": 64, "input_size": (24, 24),
         "filter_size": (3, 3), "stride": (1, 1), "dilation": (1, 1), "pad_begin": (1, 1), "pad_end": (1, 1)}


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def test_flood_is_shed_with_bounded_memory_and_latency(tmp_path):
    server = ServerProcess(tmp_path, "--gpus", "none", "--max-concurrency", "8", "--max-queue", "3", "--threads", "2",
                           "--max-message-mb", "4", "--models-dir", str(newest_models(tmp_path))).start()
    pid = server.process.pid
    try:
        with Client(server.target, retries=0, timeout=60) as warm:  # imports, caches, first allocations
            for _ in range(3):
                warm.run(HEAVY, generate_inputs=True)
                warm.select(TINY)
        base_rss, base_fds = rss_kib(pid), open_fds(pid)
        codes: dict[str, int] = {}
        latencies: dict[str, list[float]] = {"Run": [], "Select": []}
        lock = threading.Lock()
        peak = [base_rss]
        stop_at = time.monotonic() + 10.0
        payload = np.random.default_rng(0).standard_normal((4, 24, 24, 4, 16)).astype(np.float32)
        weight = np.random.default_rng(1).standard_normal((4, 16, 3, 3, 16)).astype(np.float32)

        def flood(i: int) -> None:
            with Client(server.target, retries=0, timeout=30) as client:
                n = 0
                while time.monotonic() < stop_at:
                    n += 1
                    method = "Run" if (i + n) % 2 else "Select"
                    start = time.monotonic()
                    try:
                        if method == "Run":
                            client.run(HEAVY, (payload, weight) if n % 3 == 0 else None, generate_inputs=n % 3 != 0)
                        else:
                            client.select({**TINY, "batch": 1 + n % 16}, top_k=3)
                        code = "OK"
                    except TileDispatchError as error:
                        code = error.code.name
                    elapsed = time.monotonic() - start
                    with lock:
                        codes[code] = codes.get(code, 0) + 1
                        if code == "OK":
                            latencies[method].append(elapsed)

        def sample() -> None:
            while time.monotonic() < stop_at:
                peak[0] = max(peak[0], rss_kib(pid))
                time.sleep(0.1)

        with ThreadPoolExecutor(65) as pool:
            futures = [pool.submit(flood, i) for i in range(64)] + [pool.submit(sample)]
            for future in futures:
                future.result()
        end_rss, end_fds = rss_kib(pid), open_fds(pid)
        assert serving(server.port)
        with Client(server.target, retries=0) as after:  # still answers once the flood is over
            assert after.run(TINY, generate_inputs=True).executed_on == "cpu_reference"
        result = {
            "machine": f"{os.cpu_count()} CPUs, loopback, server: --gpus none --max-concurrency 8 --max-queue 3 "
                       "--threads 2",
            "clients": 64, "seconds": 10, "codes": codes,
            "admitted_latency_s": {m: {"p50": round(_percentile(v, 50), 4), "p99": round(_percentile(v, 99), 4),
                                       "max": round(max(v, default=0.0), 4), "count": len(v)}
                                   for m, v in latencies.items()},
            "rss_mib": {"before": round(base_rss / 1024, 1), "peak": round(peak[0] / 1024, 1),
                        "after": round(end_rss / 1024, 1)},
            "fds": {"before": base_fds, "after": end_fds},
        }
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, codes
        assert codes.get("RESOURCE_EXHAUSTED", 0) > 0 and codes.get("OK", 0) > 50, codes
        assert (peak[0] - base_rss) / 1024 < 200, result["rss_mib"]   # bounded, not growing with the flood
        assert result["admitted_latency_s"]["Run"]["p99"] < 5.0, result
        assert result["admitted_latency_s"]["Select"]["p99"] < 5.0, result
        assert end_fds - base_fds < 20, result["fds"]
    finally:
        server.stop()


@pytest.fixture
def slow_gpu(tmp_path):
    log = tmp_path / "executed.log"
    os.environ.update(TILEDISPATCH_SLOW_GPU_S="0.6", TILEDISPATCH_SLOW_GPU_LOG=str(log))
    settings = settings_for(tmp_path, gpus="0", worker_handler=SLOW, kernel_timeout_s=30.0, max_queue=3)
    try:
        with running_server(settings) as port:
            log.write_text("")
            yield f"127.0.0.1:{port}", log
    finally:
        for name in ("TILEDISPATCH_SLOW_GPU_S", "TILEDISPATCH_SLOW_GPU_LOG"):
            os.environ.pop(name, None)


def test_calls_whose_deadline_passes_in_the_gpu_queue_never_run(slow_gpu):
    target, log = slow_gpu
    outcomes: list[str] = []

    def one() -> None:
        with Client(target, retries=0, timeout=1.0) as client:
            try:
                client.run(TINY, generate_inputs=True)
                outcomes.append("OK")
            except TileDispatchError as error:
                outcomes.append(error.code.name)

    threads = [threading.Thread(target=one) for _ in range(3)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # queue them in order
    for thread in threads:
        thread.join(10)
    assert time.monotonic() - start < 3.0  # each answered by its deadline
    time.sleep(1.5)  # anything still running or queued on the server has had time to finish
    executed = [line for line in log.read_text().splitlines() if line.startswith("run")]
    assert outcomes.count("OK") == 1 and outcomes.count("DEADLINE_EXCEEDED") == 2, outcomes
    assert len(executed) == 2, executed  # the third waited past its deadline and was dropped
    with Client(target, retries=0, timeout=10) as client:  # the worker is free again
        assert client.run(TINY, generate_inputs=True).executed_on == "gpu"


def test_gpu_queue_limit_sheds_at_once(slow_gpu):
    target, log = slow_gpu
    outcomes: list[tuple[str, float]] = []

    def one() -> None:
        start = time.monotonic()
        with Client(target, retries=0, timeout=20) as client:
            try:
                client.run(TINY, generate_inputs=True)
                outcomes.append(("OK", time.monotonic() - start))
            except ResourceExhaustedError:
                outcomes.append(("RESOURCE_EXHAUSTED", time.monotonic() - start))

    threads = [threading.Thread(target=one) for _ in range(7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    shed = [t for code, t in outcomes if code == "RESOURCE_EXHAUSTED"]
    assert len(outcomes) == 7 and len(shed) >= 4, outcomes  # --max-queue 3 admitted, the rest shed
    assert max(shed) < 0.5, shed  # shed at once, not after waiting
    with Client(target, retries=0, timeout=20) as client:  # Select (fast path) is never held up by the queue
        assert client.select(TINY).candidates


def test_deadline_exceeded_maps_to_its_code():
    from tiledispatch.server.errors import DeadlineExceeded, to_status

    assert to_status(DeadlineExceeded("waited")).code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert DeadlineExceededError  # the client has a typed error for it
