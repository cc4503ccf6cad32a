"""Service performance on loopback: Select latency (cached and uncached), Select throughput with
concurrent clients, and Run's tensor bandwidth. Starts its own ``tiledispatch serve`` process.

    python bench/service_perf.py --out bench/results/service_perf_<machine>.json

Every figure is measured here, by the client, over a real gRPC connection (wall clock around
each call). Run on the CI machine class (2 cores) nothing else should be running.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from tiledispatch.client import Client

PROBLEM = dict(direction="fwd", dtype="bf16", batch=32, groups=32, in_channels=128, out_channels=128,
               input_size=[56, 56], filter_size=[3, 3], stride=[1, 1], dilation=[1, 1], pad_begin=[1, 1],
               pad_end=[1, 1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1e3 for s in samples_s)
    return {"p50_ms": ms[len(ms) // 2], "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
            "mean_ms": statistics.fmean(ms), "calls": len(ms)}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the throughput phase")
    args = parser.parse_args()
    port, metrics_port = _free_port(), _free_port()
    home = Path(tempfile.mkdtemp(prefix="tdperf-"))
    server = subprocess.Popen([sys.executable, "-m", "tiledispatch.cli", "serve", "--port", str(port),
                               "--metrics-port", str(metrics_port), "--db", str(home / "tuning.sqlite"),
                               "--max-message-mb", "256", "--log-level", "warning"],
                              env={**os.environ, "TILEDISPATCH_HOME": str(home)}, stdout=subprocess.DEVNULL)
    target = f"127.0.0.1:{port}"
    try:
        with Client(target, timeout=120) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    info = client.info()
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            client.select(PROBLEM)  # warm
            cached = [_timed(lambda: client.select(PROBLEM)) for _ in range(2000)]
            uncached = [_timed(lambda b=b: client.select({**PROBLEM, "batch": 1000 + b})) for b in range(500)]

            # 64 MiB of fp16 input (16 x 256 x 128 x 64), a 1x1 conv to one channel: little compute per byte.
            run_problem = dict(direction="fwd", dtype="fp16", batch=16, groups=1, in_channels=64, out_channels=1,
                               input_size=[256, 128], filter_size=[1, 1])
            shape = (16, 256, 128, 1, 64)
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float16)
            w = np.random.default_rng(1).standard_normal((1, 1, 1, 1, 64)).astype(np.float16)
            client.run(run_problem, (x, w))  # warm
            run_times = [_timed(lambda: client.run(run_problem, (x, w))) for _ in range(5)]
            run_bytes = x.nbytes + w.nbytes + 16 * 256 * 128 * 2

        stop = time.monotonic() + args.seconds
        counts = [0] * 32
        errors = [0] * 32

        def worker(index: int) -> None:
            with Client(target, timeout=30) as own:
                while time.monotonic() < stop:
                    try:
                        own.select(PROBLEM)
                        counts[index] += 1
                    except Exception:
                        errors[index] += 1

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        median_run = sorted(run_times)[len(run_times) // 2]
        report = {
            "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform(), "server_has_gpu": info.get("has_gpu")},
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "select_cached": _percentiles(cached),
            "select_uncached": {**_percentiles(uncached),
                                "candidates_ranked": "every default-rule-set kernel supporting the problem"},
            "select_throughput": {"clients": 32, "seconds": elapsed, "calls": sum(counts), "errors": sum(errors),
                                  "per_second": sum(counts) / elapsed},
            "run": {"input_mib": x.nbytes / 2**20, "bytes_moved": run_bytes, "median_s": median_run,
                    "gb_per_s": run_bytes / median_run / 1e9,
                    "executed_on": "cpu_reference (no GPU on this host: includes the float64 reference compute)"},
            "targets": {"select_cached_p50_ms": 1.0, "select_cached_p99_ms": 5.0, "select_uncached_p99_ms": 10.0,
                        "select_per_second_32_clients": 1500, "run_gb_per_s": 1.0},
        }
    finally:
        server.terminate()
        server.wait(timeout=30)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
