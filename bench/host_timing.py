"""What the host-overhead benchmarks (``launch_overhead.py``, ``torch_host_overhead.py``) share:
stand-in compiled binaries (launches that record their arguments and run nothing, so the host path is
timed without a GPU) and the per-call timer. Imports ``tiledispatch`` only when a loader is used, from
whichever tree the caller put first on ``sys.path`` (``torch_host_overhead.py`` times an older
revision that way)."""

from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def per_call_us(call, calls: int, rounds: int, warmup: int = 100) -> dict:
    """Median and minimum µs per call over ``rounds`` rounds of ``calls`` calls (after ``warmup``)."""
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append(1e6 * (time.perf_counter() - start) / calls)
    return {"median_us": statistics.median(samples), "min_us": min(samples)}


class StandIn:
    """A compiled binary that records its last arguments and runs nothing."""

    def __init__(self):
        self.calls = 0
        self.last: tuple = ()

    def __getitem__(self, grid):
        return self._record

    def _record(self, *args):
        self.calls += 1
        self.last = args


def stand_in_loader():
    """``loader(config) -> {program: StandIn}``, one table per kernel (as a registry loads them)."""
    from tiledispatch.native import launch

    tables: dict[str, dict] = {}

    def loader(config):
        if config.name not in tables:
            tables[config.name] = {name: StandIn() for name in launch.template_for(config).programs(config)}
        return tables[config.name]

    return loader
