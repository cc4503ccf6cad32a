"""Fleet throughput on one host: Select calls per second through the client's round_robin over 1
and over N ``tiledispatch serve`` replicas on loopback (CPU fallback, no GPU needed).

    python bench/fleet_perf.py --replicas 3 --out bench/results/fleet_perf_cpu2.json

Every figure is measured by the clients over real gRPC connections. On a small host the replicas
share its cores, so this measures the client-side balancing and the per-host ceiling, not GPU scale-out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The same Select problem and port helper as the single-server measurement (run as a script,
# this folder is on sys.path).
from service_perf import PROBLEM, _free_port, select_throughput  # noqa: E402

from tiledispatch.client import Client


def _start(home: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "tiledispatch.cli", "serve", "--port", str(port),
                                "--metrics-port", "0", "--db", str(home / f"tuning-{port}.sqlite"), "--gpus", "none",
                                "--log-level", "warning"], env={**os.environ, "TILEDISPATCH_HOME": str(home)},
                               stdout=subprocess.DEVNULL)
    return process, f"127.0.0.1:{port}"


def _wait(target: str) -> None:
    with Client(target, timeout=5) as client:
        deadline = time.monotonic() + 120
        while True:
            try:
                client.info()
                client.select(PROBLEM)  # warm the selection cache
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]  # other work on the host lowers every figure
    home = Path(tempfile.mkdtemp(prefix="tdfleet-"))
    servers = [_start(home) for _ in range(args.replicas)]
    try:
        targets = [target for _, target in servers]
        for target in targets:
            _wait(target)
        runs = [select_throughput(targets[:1], args.clients, args.seconds),
                select_throughput(targets, args.clients, args.seconds)]
    finally:
        for process, _ in servers:
            process.terminate()
        for process, _ in servers:
            process.wait(timeout=30)
    report = {"machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform(), "gpu": "none (CPU fallback)",
                          "load_average_1m_before": round(load_before, 2)},
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "problem": PROBLEM,
              "call": "Select, cached", "select_throughput": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
