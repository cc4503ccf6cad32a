"""Service performance on loopback: Select latency (cached and uncached), Select throughput with
concurrent clients, and Run's tensor bandwidth. Starts its own ``tiledispatch serve`` processes.

    python bench/service_perf.py --out bench/results/service_perf_<machine>.json

Every figure is measured here, by the client, over a real gRPC connection (wall clock around
each call). Run on the CI machine class (2 cores) nothing else should be running; the load average
is recorded.

Run's bandwidth is measured where the tensors take the path they take on a GPU server: a second
server runs with the CPU stand-in GPU handler (``tests.service.fake_gpu``, ``--gpus 0``), so each
call goes client -> gRPC -> server -> GPU worker process (shared memory) -> back. Its "kernel" is
the float64 reference, timed inside the worker and reported in ``elapsed_us`` like the GPU's event
time; the report gives the bandwidth with and without it (bytes moved / wall, and / (wall - kernel)).
The GPU-less server's in-process CPU-reference Run is measured too.

Beside it, as a separate figure that never stands in for it (``run_shared_memory``), the same Run
with the inputs in same-host shared memory (``Client.run(..., shared_memory=True)`` against a server
started with ``--allow-shared-memory``: the inputs skip gRPC, the output still comes back over it).
Both count the same bytes moved (inputs + output).

Malloc: on this VM every first touch of a 4 KiB page is expensive and glibc maps each block over
32 MiB afresh, so each copy of a 64 MiB message costs ~5x more than with transparent huge pages.
By default the servers run, and this script re-runs itself, with
``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (as the Docker image sets it); ``--malloc default``
measures without.
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

REPO = Path(__file__).resolve().parents[1]
MALLOC_TUNABLE = "glibc.malloc.hugetlb=1"
FAKE_HANDLER = "tests.service.fake_gpu:FakeGpuHandler"
# 64 MiB of fp16 input (16 x 256 x 128 x 64), a 1x1 conv to one channel: little compute per byte.
RUN_PROBLEM = dict(direction="fwd", dtype="fp16", batch=16, groups=1, in_channels=64, out_channels=1,
                   input_size=[256, 128], filter_size=[1, 1])
RUN_SHAPES = ((16, 256, 128, 1, 64), (1, 1, 1, 1, 64))
RUN_CALLS = 9

PROBLEM = dict(direction="fwd", dtype="bf16", batch=32, groups=32, in_channels=128, out_channels=128,
               input_size=[56, 56], filter_size=[3, 3], stride=[1, 1], dilation=[1, 1], pad_begin=[1, 1],
               pad_end=[1, 1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def select_throughput(targets: list[str], clients: int, seconds: float) -> dict:
    """``clients`` threads, each with its own channel (``round_robin`` over ``targets``), calling the
    cached Select for ``seconds``; a call that fails is counted, not retried past the client's policy."""
    counts, errors = [0] * clients, [0] * clients
    stop = time.monotonic() + seconds

    def worker(index: int) -> None:
        with Client(targets, timeout=30) as own:
            own.info()
            while time.monotonic() < stop:
                try:
                    own.select(PROBLEM)
                    counts[index] += 1
                except Exception:
                    errors[index] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    return {"replicas": len(targets), "clients": clients, "seconds": round(elapsed, 3), "calls": sum(counts),
            "errors": sum(errors), "per_second": round(sum(counts) / elapsed, 1)}


def _percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1e3 for s in samples_s)
    return {"p50_ms": ms[len(ms) // 2], "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
            "mean_ms": statistics.fmean(ms), "calls": len(ms)}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _start_server(*extra: str) -> tuple[subprocess.Popen, str]:
    port, metrics_port = _free_port(), _free_port()
    home = Path(tempfile.mkdtemp(prefix="tdperf-"))
    python_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    server = subprocess.Popen([sys.executable, "-m", "tiledispatch.cli", "serve", "--port", str(port),
                               "--metrics-port", str(metrics_port), "--db", str(home / "tuning.sqlite"),
                               "--max-message-mb", "256", "--log-level", "warning", *extra],
                              env={**os.environ, "TILEDISPATCH_HOME": str(home), "PYTHONPATH": python_path},
                              stdout=subprocess.DEVNULL, cwd=REPO)
    return server, f"127.0.0.1:{port}"


def _wait_info(client: Client) -> dict:
    deadline = time.monotonic() + 120
    while True:
        try:
            return client.info()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _measure_run(client: Client, *, shared_memory: bool = False) -> dict:
    """Per-call wall time and reported kernel time of Run on 64 MiB of input (sent as gRPC bytes, or
    with ``shared_memory`` through the client's shared-memory segment)."""
    x = np.random.default_rng(0).standard_normal(RUN_SHAPES[0]).astype(np.float16)
    w = np.random.default_rng(1).standard_normal(RUN_SHAPES[1]).astype(np.float16)
    client.run(RUN_PROBLEM, (x, w), shared_memory=shared_memory)  # warm (shared memory is sized on the first call)
    calls = []
    for _ in range(RUN_CALLS):
        start = time.perf_counter()
        result = client.run(RUN_PROBLEM, (x, w), shared_memory=shared_memory)
        wall = time.perf_counter() - start
        calls.append({"wall_s": wall, "kernel_s": result.elapsed_us * 1e-6, "executed_on": result.executed_on})
    moved = x.nbytes + w.nbytes + result.output.nbytes
    wall = statistics.median(c["wall_s"] for c in calls)
    kernel = statistics.median(c["kernel_s"] for c in calls)
    transport = statistics.median(c["wall_s"] - c["kernel_s"] for c in calls)
    executed_on = ",".join(sorted({c["executed_on"] for c in calls}))  # from each RunResponse
    return {"input_mib": x.nbytes / 2**20, "bytes_moved": moved, "executed_on": executed_on,
            "calls": len(calls), "median_wall_s": wall, "median_kernel_s": kernel,
            "median_wall_minus_kernel_s": transport, "gb_per_s_including_kernel": moved / wall / 1e9,
            "gb_per_s_excluding_kernel": moved / transport / 1e9, "per_call": calls}


def measure_once(args: argparse.Namespace) -> dict:
    """One full measurement: Select latency and throughput, Run through the worker and in-process."""
    load_before = os.getloadavg()
    server, target = _start_server()
    gpu_server = None
    try:
        with Client(target, timeout=120) as client:
            info = _wait_info(client)
            client.select(PROBLEM)  # warm
            cached = [_timed(lambda: client.select(PROBLEM)) for _ in range(2000)]
            uncached = [_timed(lambda b=b: client.select({**PROBLEM, "batch": 1000 + b})) for b in range(500)]

            run_cpu = _measure_run(client)

        throughput = select_throughput([target], 32, args.seconds)
        server.terminate()
        server.wait(timeout=30)

        gpu_server, gpu_target = _start_server("--gpus", "0", "--worker-handler", FAKE_HANDLER,
                                               "--allow-shared-memory")
        with Client(gpu_target, timeout=120) as client:
            gpu_info = _wait_info(client)
            run = _measure_run(client)
            run_shm = _measure_run(client, shared_memory=True)
        load_after = os.getloadavg()
        report = {
            "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform(), "server_has_gpu": info.get("has_gpu")},
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "select_cached": _percentiles(cached),
            "select_uncached": {**_percentiles(uncached),
                                "candidates_ranked": "every default-rule-set kernel supporting the problem"},
            "select_throughput": {k: throughput[k] for k in ("clients", "seconds", "calls", "errors", "per_second")},
            "run": {**run, "server": f"--gpus 0 --worker-handler {FAKE_HANDLER} (GPU worker process, "
                                     f"{gpu_info.get('gpu_name')}: the kernel is the float64 reference on the CPU)",
                    "meets_target": {"including_kernel": run["gb_per_s_including_kernel"] >= 1.0,
                                     "excluding_kernel": run["gb_per_s_excluding_kernel"] >= 1.0}},
            "run_shared_memory": {**run_shm, "inputs": "SEPARATE FIGURE, not gRPC bytes: the inputs in same-host "
                                                       "POSIX shared memory (Client.run(shared_memory=True), server "
                                                       "--allow-shared-memory); the output over gRPC",
                                  "server": "the same server as run"},
            "run_cpu_reference": {**run_cpu, "server": "--gpus none (in-process float64 CPU reference)"},
            "malloc": {"mode": args.malloc, "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES", "")},
            "load_average": {"before": list(load_before), "after": list(load_after)},
            "targets": {"select_cached_p50_ms": 1.0, "select_cached_p99_ms": 5.0, "select_uncached_p99_ms": 10.0,
                        "select_per_second_32_clients": 1500, "run_gb_per_s": 1.0},
        }
    finally:
        for process in (server, gpu_server):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
    return report


SUMMARY = {  # name: (path into one run's report, target, True when higher is better)
    "select_cached_p50_ms": (("select_cached", "p50_ms"), 1.0, False),
    "select_cached_p99_ms": (("select_cached", "p99_ms"), 5.0, False),
    "select_uncached_p99_ms": (("select_uncached", "p99_ms"), 10.0, False),
    "select_per_second_32_clients": (("select_throughput", "per_second"), 1500.0, True),
    "run_gb_per_s_excluding_kernel": (("run", "gb_per_s_excluding_kernel"), 1.0, True),
    "run_gb_per_s_including_kernel": (("run", "gb_per_s_including_kernel"), 1.0, True),
    # Not the gRPC figure: same-host shared-memory inputs, reported beside it.
    "run_shared_memory_gb_per_s_excluding_kernel": (("run_shared_memory", "gb_per_s_excluding_kernel"), 1.0, True),
    "run_shared_memory_gb_per_s_including_kernel": (("run_shared_memory", "gb_per_s_including_kernel"), 1.0, True),
}


def summarize(runs: list[dict]) -> dict:
    out = {}
    for name, ((section, key), target, higher) in SUMMARY.items():
        values = sorted(run[section][key] for run in runs)
        median = statistics.median(values)
        out[name] = {"median": median, "min": values[0], "max": values[-1], "target": target,
                     "median_meets_target": median >= target if higher else median <= target}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the throughput phase")
    parser.add_argument("--runs", type=int, default=3, help="full measurements back to back (median reported)")
    parser.add_argument("--malloc", choices=("hugepages", "default"), default="hugepages",
                        help=f"hugepages: GLIBC_TUNABLES={MALLOC_TUNABLE} here and in the servers (default)")
    args = parser.parse_args()
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if args.malloc == "hugepages" and MALLOC_TUNABLE not in tunables:  # glibc reads it at start: re-run
        os.environ["GLIBC_TUNABLES"] = ":".join(filter(None, (tunables, MALLOC_TUNABLE)))
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if args.malloc == "default" and "glibc.malloc.hugetlb" in tunables:
        os.environ["GLIBC_TUNABLES"] = ":".join(t for t in tunables.split(":") if "glibc.malloc.hugetlb" not in t)
        os.execv(sys.executable, [sys.executable, *sys.argv])
    runs = [measure_once(args) for _ in range(args.runs)]
    report = {"runs": runs, "summary": summarize(runs), "targets": runs[0]["targets"],
              "method": f"{args.runs} full runs back to back (this VM's figures vary run to run); "
                        "summary = median, min and max over the runs"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
