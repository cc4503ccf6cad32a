"""A fake GPU whose runs and measurements take a set time (``TILEDISPATCH_SLOW_GPU_S``) and leave a
line in a log file (``TILEDISPATCH_SLOW_GPU_LOG``) for every call that actually executed, so tests
can tell work that ran from work that was dropped in the queue."""

from __future__ import annotations

import os
import time

from tests.service.fake_gpu import FakeGpuHandler


class SlowGpuHandler(FakeGpuHandler):
    def __init__(self, device: int, options: dict):
        super().__init__(device, options)
        self.delay = float(os.environ.get("TILEDISPATCH_SLOW_GPU_S", "0.5"))
        self.log = os.environ.get("TILEDISPATCH_SLOW_GPU_LOG", "")

    def _executed(self, op: str, kernel: str) -> None:
        if self.log:
            with open(self.log, "a") as handle:
                handle.write(f"{op} {kernel} {time.time():.3f}\n")
        time.sleep(self.delay)

    def run(self, payload: dict) -> dict:
        self._executed("run", payload["kernel"])
        return super().run(payload)

    def measure(self, payload: dict) -> dict:
        self._executed("measure", payload["kernel"])
        return super().measure(payload)
