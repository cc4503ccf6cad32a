"""A fake GPU that, like the real handler, loads each kernel's binaries from the registry (the
artifact cache) before running it, so a cache with missing artifacts fails the way it would on a
GPU host: a ``RegistryError`` naming the kernel, raised in the worker."""

from __future__ import annotations

import os
from pathlib import Path

from tests.service.fake_gpu import FakeGpuHandler
from tiledispatch.native.configs import parse_kernel_name


class RegistryGpuHandler(FakeGpuHandler):
    def __init__(self, device: int, options: dict):
        os.environ.pop("TRITON_INTERPRET", None)  # artifact keys hash the compiled kernel source
        super().__init__(device, options)
        from tiledispatch.native.registry import Registry

        self.registry = Registry.load(Path(options["registry_dir"]), options.get("arch", "sm_90"))

    def run(self, payload: dict) -> dict:
        self.registry.binaries(parse_kernel_name(payload["kernel"]))  # RegistryError when an artifact is gone
        return super().run(payload)
