"""The GPU worker's handler: runs and measures kernels on one CUDA device.

Built inside a spawned worker process (:mod:`.worker`), so torch, triton and the CUDA context live
only there. Kernels come from the compiled registry (``backend="compiled"``); when no registry is
built for the arch, Run lets Triton compile on first use (``jit``) and measuring is refused (the
tile engine launches registry binaries only); the worker's hello says which.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.problem import ConvProblem

from .device import driver_version, package_version

#: Words of errors after which the CUDA context is unusable (sticky errors).
_STICKY = ("illegal memory access", "unspecified launch failure", "misaligned address", "illegal instruction",
           "device-side assert", "CUDA error: an illegal")


class GpuHandler:
    def __init__(self, device: int, options: dict[str, Any]):
        # Each worker sees only its own GPU, as device 0: the benchmark code and torch's current
        # device then agree without passing indices around.
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        os.environ["CUDA_VISIBLE_DEVICES"] = visible[device] if device < len(visible) else str(device)
        import torch

        from tiledispatch.native import launch

        self._torch = torch
        self._launch = launch
        self.index = device
        self.device = torch.device("cuda", 0)
        torch.cuda.set_device(self.device)
        self.arch = options.get("arch", "sm_90")
        self.registry, self.registry_note = self._open_registry(options.get("registry_dir"), self.arch)
        self.loader = self.registry.loader() if self.registry is not None else None
        self.backend = "compiled" if self.registry is not None else "jit"
        self._warm: set[str] = set()
        self._ceilings = None
        self._setup = None

    @staticmethod
    def _open_registry(registry_dir: str | None, arch: str):
        if registry_dir and Path(registry_dir).exists():
            try:
                from tiledispatch.native.registry import Registry

                return Registry.load(Path(registry_dir), arch), f"registry:{registry_dir}"
            except (ImportError, FileNotFoundError) as error:
                return None, f"no registry ({error}); Run compiles kernels on first use, Benchmark is refused"
        return None, "no registry; Run compiles kernels on first use, Benchmark is refused"

    def hello(self) -> dict[str, Any]:
        torch = self._torch
        props = torch.cuda.get_device_properties(self.device)
        return {"index": self.index, "name": props.name, "capability": [props.major, props.minor],
                "memory_bytes": props.total_memory, "cuda": torch.version.cuda or "", "driver": driver_version(),
                "torch": torch.__version__, "triton": package_version("triton"), "backend": self.backend,
                "registry": self.registry_note}

    # ---- operations ------------------------------------------------------------------------------
    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Run one kernel once (after one untimed warm-up the first time it is used here)."""
        torch = self._torch
        problem = ConvProblem.from_dict(payload["problem"])
        config = parse_kernel_name(payload["kernel"])
        first_shape, second_shape, _ = problem.operand_shapes
        first = self._tensor(payload["first"], first_shape, problem)
        second = self._tensor(payload["second"], second_shape, problem)
        options = {"backend": self.backend, "loader": self.loader}
        if config.name not in self._warm:  # loading a binary must not count as its run time
            self._launch.run(problem, config, first, second, **options)
            self._warm.add(config.name)
        torch.cuda.synchronize(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = self._launch.run(problem, config, first, second, **options)
        end.record()
        end.synchronize()
        data = out.contiguous().view(torch.uint8).cpu().numpy()  # an array: the pool moves it by shared memory
        return {"output": data, "elapsed_us": start.elapsed_time(end) * 1000.0}

    def measure(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Time one kernel with the tile engine's method (per-call CUDA events, median and min, and
        CUDA-graph replay for device time) after checking it against the float64 reference. The
        operands and reference of the last problem are kept, so a Benchmark of N kernels builds
        them once."""
        from tiledispatch.native import bench

        if self.registry is None:
            raise RuntimeError(f"measuring needs a compiled registry: {self.registry_note}")
        problem = ConvProblem.from_dict(payload["problem"])
        config = parse_kernel_name(payload["kernel"])
        settings = bench.BenchSettings(cache_dir=str(self.registry.cache_dir), arch=self.arch, include_cudnn=False)
        if payload.get("repeats"):
            settings = replace(settings, event_repeats=int(payload["repeats"]))
        if self._ceilings is None:
            self._ceilings = bench.measure_ceilings()
        if self._setup is None or self._setup.problem != problem:
            self._setup = None  # free the previous problem's buffers first
            self._setup = bench.new_setup(problem, settings)
        row = bench.measure_kernel(self._setup, config, self.loader, self._ceilings, settings)
        return {"median_us": float(row["event_median_us"]), "min_us": float(row["event_min_us"]),
                "graph_us": float(row["graph_us"]), "status": str(row["status"]),
                "relative_error": float(row["relative_error"]), "message": str(row.get("message", ""))}

    # ---- helpers ---------------------------------------------------------------------------------
    def _tensor(self, data, shape: tuple[int, ...], problem: ConvProblem):
        """A device tensor from the wire bytes: a numpy array over the worker's shared memory (large
        tensors; read in place, no host copy) or bytes (small ones, copied: torch wants writable)."""
        torch = self._torch
        writable = isinstance(data, np.ndarray) and data.flags.writeable and data.flags.c_contiguous
        host = torch.frombuffer(data if writable else bytearray(data),
                                dtype=self._launch.torch_dtype(problem.dtype)).reshape(shape)
        return host.to(self.device)

    def is_fatal(self, error: BaseException) -> bool:
        """Whether the device context survived ``error`` (if not, the worker must be replaced)."""
        if any(word in str(error) for word in _STICKY):
            return True
        try:
            self._torch.cuda.synchronize(self.device)
        except Exception:
            return True
        return False
