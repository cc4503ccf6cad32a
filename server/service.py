"""The service core, independent of any transport: select, run, benchmark, list, describe.

Requests arrive as frozen dataclasses already validated by :mod:`.convert`; answers leave as
dataclasses; failures are the domain errors of :mod:`.errors`. Every method blocks (SQLite, the
CPU reference, waiting on a GPU worker) and is called from an executor thread, never the event loop.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, DType
from tiledispatch.native.reference import run_reference
from tiledispatch.native.support import is_supported
from tiledispatch.v1 import codec

from . import deadlines
from .catalog import Catalog, KernelEntry
from .errors import FailedPrecondition, InvalidArgument, KernelFault, ResourceExhausted, ServiceError
from .metrics import Metrics
from .predictors import ModelDescription, ModelStore, describe
from .selection import DEFAULT_TOP_K, Candidate, Selection, Selector, SelectQuery, Source
from .tuning_db import MeasurementRow, TuningDB
from .worker import WorkerError, WorkerPool

log = logging.getLogger("tiledispatch.server.service")

_WIRE = {DType.BF16: np.dtype("<u2"), DType.FP16: np.dtype("<f2"), DType.FP32: np.dtype("<f4")}
#: Room left in a message for everything beside the tensor bytes.
_MESSAGE_OVERHEAD = 64 * 1024


# ---- requests and answers ------------------------------------------------------------------------
@dataclass(frozen=True)
class RunQuery:
    problem: ConvProblem
    kernel: str = ""
    inputs: tuple[np.ndarray, np.ndarray] | None = None  # wire arrays (bf16 as uint16 bits)
    seed: int | None = None                               # generate inputs instead
    return_inputs: bool = False


@dataclass(frozen=True)
class RunResult:
    output: np.ndarray              # wire array in the problem dtype, grouped shape
    kernel: str
    elapsed_us: float
    executed_on: str                # "gpu" or "cpu_reference"
    selection_source: Source | None
    inputs: tuple[np.ndarray, np.ndarray] | None = None


@dataclass(frozen=True)
class BenchmarkQuery:
    problem: ConvProblem
    kernels: tuple[str, ...] = ()
    top_k: int = 0
    families: frozenset[Family] = frozenset()
    repeats: int = 0


@dataclass(frozen=True)
class Measured:
    kernel: str
    median_us: float
    min_us: float
    status: str                     # ok | error | wrong | fault
    relative_error: float
    message: str
    index: int
    total: int
    predicted_us: float
    graph_us: float = math.nan

    @property
    def time_us(self) -> float:
        """What rankings compare: device time (graph replay) where measured, else the median."""
        return self.graph_us if math.isfinite(self.graph_us) else self.median_us


@dataclass(frozen=True)
class BenchmarkSummary:
    oracle_kernel: str
    oracle_us: float
    selected_kernel: str
    selected_us: float
    selection_efficiency: float
    selection_source: Source
    model_name: str
    model_version: str
    measured: int
    failed: int
    gpu_name: str


@dataclass(frozen=True)
class ListKernelsQuery:
    direction: Any = None
    dtype: Any = None
    ndim: int = 0
    families: frozenset[Family] = frozenset()
    problem: ConvProblem | None = None
    include_unsupported: bool = False


@dataclass(frozen=True)
class ServerInfo:
    has_gpu: bool
    gpu_count: int
    gpu_name: str
    arch: str
    device_spec: str
    versions: dict[str, str]
    registry_size: int
    registry_source: str
    models: tuple[ModelDescription, ...]
    quarantined_kernels: int
    tuning_db_rows: int
    max_message_bytes: int


@dataclass(frozen=True)
class QuarantineLifted:
    kernel: str
    was_quarantined: bool
    reason: str
    quarantined_kernels: int


@dataclass
class Environment:
    """What the core runs on: filled in once at start-up."""

    arch: str                       # compute target, e.g. sm_90
    device_spec: str                # arch spec name the database keys on, e.g. h200
    gpu_name: str = ""
    gpus: list[dict] = field(default_factory=list)  # worker hellos
    versions: dict[str, str] = field(default_factory=dict)
    max_message_bytes: int = 64 * 1024 * 1024
    cpu_reference_max_flops: float = 4e9


class Dispatcher:
    def __init__(self, env: Environment, catalog: Catalog, models: ModelStore, db: TuningDB, metrics: Metrics,
                 gpu: WorkerPool | None = None, cache_size: int = 4096):
        self.env = env
        self.catalog = catalog
        self.models = models
        self.db = db
        self.metrics = metrics
        self.gpu = gpu if gpu is not None and gpu.size else None
        self.selector = Selector(catalog, models, db, env.device_spec, metrics, cache_size,
                                 autotuner=self._autotune if self.gpu else None)
        metrics.registry_size.set(len(catalog.configs))
        metrics.quarantined.set(catalog.quarantined_count)
        metrics.gpu_workers.set(self.gpu.size if self.gpu else 0)

    # ---- Select ----------------------------------------------------------------------------------
    def select(self, query: SelectQuery) -> Selection:
        return self.selector.select(query)

    def select_cached(self, query: SelectQuery) -> Selection | None:
        return self.selector.select_cached(query)

    @property
    def selection_generation(self) -> int:
        """Changes whenever cached rankings are dropped (answers built from them are then stale)."""
        return self.selector.generation

    # ---- Run -------------------------------------------------------------------------------------
    def run(self, query: RunQuery) -> RunResult:
        problem = query.problem
        config, source = self._kernel_for_run(problem, query.kernel)
        self._check_sizes(problem, with_inputs=query.return_inputs and query.seed is not None)
        if self.gpu is None and problem.flops > self.env.cpu_reference_max_flops:
            raise ResourceExhausted(f"{problem.flops / 1e9:.1f} GFLOP is more than this GPU-less server's CPU "
                                    f"reference accepts ({self.env.cpu_reference_max_flops / 1e9:.1f} GFLOP, "
                                    "--cpu-reference-max-gflop)", field="problem")
        first, second = query.inputs if query.seed is None else generate_inputs(problem, query.seed)
        if self.gpu is not None:
            output, elapsed_us, target = self._run_gpu(problem, config, first, second)
        else:
            output, elapsed_us, target = _run_cpu_reference(problem, first, second)
        self.metrics.kernel_seconds.labels(target).observe(elapsed_us * 1e-6)
        inputs = (first, second) if query.return_inputs and query.seed is not None else None
        return RunResult(output, config.name, elapsed_us, target, source, inputs)

    def _kernel_for_run(self, problem: ConvProblem, name: str) -> tuple[KernelConfig, Source | None]:
        if not name:
            selection = self.selector.select(SelectQuery(problem, top_k=1))
            return selection.best.config, selection.source
        config = self.catalog.get(name)
        support = is_supported(problem, config)
        if not support:
            raise InvalidArgument(f"{name} does not support this problem: {support.reason}", field="kernel")
        reason = self.catalog.quarantine_reason(name)
        if reason is not None:
            raise FailedPrecondition(f"{name} is quarantined on this server ({reason})", field="kernel")
        return config, None

    def _check_sizes(self, problem: ConvProblem, *, with_inputs: bool) -> None:
        """Every tensor must fit in one message (the client could not send or receive it otherwise)."""
        limit = self.env.max_message_bytes - _MESSAGE_OVERHEAD
        itemsize = problem.dtype.itemsize
        names = ("first", "second", "output")
        sizes = [math.prod(shape) * itemsize for shape in problem.operand_shapes]
        for name, size in zip(names, sizes):
            if size > limit:
                raise ResourceExhausted(f"the {name} tensor of this problem is {size} bytes, more than one message "
                                        f"may carry ({limit} bytes, --max-message-mb)", field="problem")
        total = sum(sizes) if with_inputs else sizes[2]
        if total > limit:
            raise ResourceExhausted(f"the response would carry {total} bytes of tensors, more than one message may "
                                    f"carry ({limit} bytes, --max-message-mb)", field="return_inputs")

    def _run_gpu(self, problem: ConvProblem, config: KernelConfig, first: np.ndarray, second: np.ndarray):
        # The arrays themselves: the worker pool copies them once, into the worker's shared memory.
        payload = {"problem": problem.to_dict(), "kernel": config.name, "first": first, "second": second}
        answer = self._gpu_call("run", payload, config.name)
        shape = problem.operand_shapes[2]
        output = np.frombuffer(answer["output"], dtype=_WIRE[problem.dtype]).reshape(shape)
        return output, float(answer["elapsed_us"]), "gpu"

    # ---- Benchmark -------------------------------------------------------------------------------
    def benchmark(self, query: BenchmarkQuery) -> Iterator[Measured | BenchmarkSummary]:
        """Measure kernels one by one (an event each), then a summary. Everything is validated
        before the first measurement, so a bad request changes nothing."""
        if self.gpu is None:
            raise FailedPrecondition("Benchmark measures kernels on a GPU and this server has none "
                                     "(Select and Run still work: Run uses the float64 CPU reference)")
        if query.top_k < 0 or query.repeats < 0:
            raise InvalidArgument("must be >= 0", field="top_k" if query.top_k < 0 else "repeats")
        problem = query.problem
        baseline = self.selector.select(SelectQuery(problem, families=query.families))
        if query.kernels:
            configs = self._named_kernels(problem, query.kernels)
        else:
            configs = [c.config for c in baseline.top(query.top_k)]
        return self._benchmark(problem, configs, baseline, query.repeats)

    def _named_kernels(self, problem: ConvProblem, names: Sequence[str]) -> list[KernelConfig]:
        configs = []
        for i, name in enumerate(dict.fromkeys(names)):
            config = self.catalog.get(name, field=f"kernels[{i}]")
            support = is_supported(problem, config)
            if not support:
                raise InvalidArgument(f"{name} does not support this problem: {support.reason}", field=f"kernels[{i}]")
            if self.catalog.quarantine_reason(name) is not None:
                raise FailedPrecondition(f"{name} is quarantined on this server", field=f"kernels[{i}]")
            configs.append(config)
        return configs

    def _benchmark(self, problem: ConvProblem, configs: list[KernelConfig], baseline: Selection,
                   repeats: int) -> Iterator[Measured | BenchmarkSummary]:
        times: dict[str, float] = {}
        failed = 0
        for measured in self._measure(problem, configs, repeats, source="benchmark"):
            if measured.status == "ok":
                times[measured.kernel] = measured.time_us
            else:
                failed += 1
            yield measured
        oracle = min(times, key=times.get) if times else ""
        selected = baseline.best.config.name
        selected_us = times.get(selected, 0.0)
        yield BenchmarkSummary(
            oracle_kernel=oracle, oracle_us=times.get(oracle, 0.0), selected_kernel=selected, selected_us=selected_us,
            selection_efficiency=times[oracle] / selected_us if selected_us else 0.0,
            selection_source=baseline.source, model_name=baseline.model_name, model_version=baseline.model_version,
            measured=len(configs), failed=failed, gpu_name=self.env.gpu_name)

    def _autotune(self, problem: ConvProblem, candidates: Sequence[Candidate]) -> list[float | None]:
        configs = [c.config for c in candidates]
        results = {m.kernel: m for m in self._measure(problem, configs, 0, source="autotune")}
        return [results[c.name].time_us if results[c.name].status == "ok" else None for c in configs]

    def _measure(self, problem: ConvProblem, configs: list[KernelConfig], repeats: int,
                 source: str) -> Iterator[Measured]:
        """Measure each config on the GPU; record every result (faults included) and report the
        prediction error of the server's default predictor."""
        predictor, predicted = self.selector.predict(problem, configs)
        problem_json = problem.to_json()
        try:
            for index, (config, guess) in enumerate(zip(configs, predicted)):
                payload = {"problem": problem.to_dict(), "kernel": config.name, "repeats": repeats}
                try:
                    answer = self._gpu_call("measure", payload, config.name)
                except KernelFault as fault:
                    answer = {"median_us": math.nan, "min_us": math.nan, "status": "fault", "relative_error": math.nan,
                              "message": fault.message}
                except WorkerError as error:
                    answer = {"median_us": math.nan, "min_us": math.nan, "status": "error",
                              "relative_error": math.nan, "message": error.message}
                measured = Measured(config.name, float(answer["median_us"]), float(answer["min_us"]),
                                    str(answer["status"]), float(answer["relative_error"]), str(answer["message"]),
                                    index, len(configs), float(guess), float(answer.get("graph_us", math.nan)))
                self._record(problem, problem_json, measured, source)
                if measured.status == "ok" and measured.time_us > 0:
                    self.metrics.kernel_seconds.labels("gpu").observe(measured.time_us * 1e-6)
                    self.metrics.prediction_error.labels(predictor.kind, f"{predictor.name}/{predictor.version}") \
                        .observe(abs(measured.predicted_us - measured.time_us) / measured.time_us)
                yield measured
        finally:
            self.selector.invalidate()  # new measurements change exact-hit answers

    def _record(self, problem: ConvProblem, problem_json: str, m: Measured, source: str) -> None:
        self.metrics.measurements.labels(m.status).inc()
        self.db.record([MeasurementRow(
            problem_key=problem.key, problem_json=problem_json, kernel=m.kernel, arch=self.env.arch,
            device=self.env.device_spec, gpu_name=self.env.gpu_name, median_us=_finite(m.median_us),
            min_us=_finite(m.min_us), graph_us=_finite(m.graph_us), status=m.status,
            relative_error=_finite(m.relative_error), error=m.message,
            source=source, server_version=self.env.versions.get("tiledispatch", ""),
            kernel_build=self.catalog.builds.get(m.kernel, ""))])

    def _gpu_call(self, op: str, payload: dict, kernel: str) -> dict:
        try:
            return self.gpu.call(op, payload, kernel, deadline=deadlines.current())
        except KernelFault as fault:
            self.quarantine(kernel, fault.message)
            raise
        except WorkerError as error:
            if error.kind == "RegistryError":  # a binary missing from the artifact cache: the server's state
                raise FailedPrecondition(error.message, field="kernel") from None
            raise

    def quarantine(self, kernel: str, reason: str) -> None:
        """Exclude a kernel from selection, here and (persisted) after a restart. The in-memory
        quarantine always holds; a database that cannot take the write (full disk) is logged."""
        log.error("kernel quarantined", extra={"kernel": kernel, "reason": reason})
        self.catalog.quarantine(kernel, reason)
        self.selector.invalidate()
        self.metrics.kernel_faults.inc()
        self.metrics.quarantined.set(self.catalog.quarantined_count)
        try:
            self.db.quarantine(kernel, self.env.device_spec, reason)
        except ServiceError as error:
            log.error("quarantine not persisted", extra={"kernel": kernel, "error": error.details})

    def lift_quarantine(self, kernel: str) -> QuarantineLifted:
        """Return a quarantined kernel to selection, here and in the database (an operator's call)."""
        self.catalog.get(kernel)  # NOT_FOUND for a kernel this server does not have
        reason = self.catalog.release(kernel)
        persisted = self.db.quarantined(self.env.device_spec).get(kernel)
        released = self.db.release(kernel, self.env.device_spec)
        self.selector.invalidate()
        self.metrics.quarantined.set(self.catalog.quarantined_count)
        was = reason is not None or released
        if was:
            log.warning("kernel quarantine lifted", extra={"kernel": kernel, "reason": reason or persisted})
        return QuarantineLifted(kernel, was, reason or persisted or "", self.catalog.quarantined_count)

    # ---- listings --------------------------------------------------------------------------------
    def list_kernels(self, query: ListKernelsQuery) -> list[KernelEntry]:
        return self.catalog.listing(direction=query.direction, dtype=query.dtype, ndim=query.ndim,
                                    families=query.families, problem=query.problem,
                                    include_unsupported=query.include_unsupported)

    def list_models(self) -> list[ModelDescription]:
        return [describe(m) for m in self.models.all()]

    def info(self) -> ServerInfo:
        return ServerInfo(
            has_gpu=self.gpu is not None, gpu_count=self.gpu.size if self.gpu else 0, gpu_name=self.env.gpu_name,
            arch=self.env.arch, device_spec=self.env.device_spec, versions=dict(self.env.versions),
            registry_size=len(self.catalog.configs), registry_source=self.catalog.source,
            models=tuple(self.list_models()), quarantined_kernels=self.catalog.quarantined_count,
            tuning_db_rows=self.db.count(), max_message_bytes=self.env.max_message_bytes)


# ---- inputs and the CPU reference ----------------------------------------------------------------
def generate_inputs(problem: ConvProblem, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal operands rounded to the problem dtype, as wire arrays (same on every host)."""
    rng = np.random.default_rng(seed)
    first_shape, second_shape, _ = problem.operand_shapes
    return tuple(to_wire(rng.standard_normal(shape, dtype=np.float32), problem.dtype)  # type: ignore[return-value]
                 for shape in (first_shape, second_shape))


def to_wire(values: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype is DType.BF16:
        return codec.float_to_bf16_bits(values)
    return np.asarray(values).astype(_WIRE[dtype])


def from_wire(array: np.ndarray, dtype: DType) -> np.ndarray:
    """float64 values of a wire array."""
    if dtype is DType.BF16:
        return codec.bf16_bits_to_float(array).astype(np.float64).reshape(array.shape)
    return array.astype(np.float64)


def _run_cpu_reference(problem: ConvProblem, first: np.ndarray, second: np.ndarray):
    start = time.perf_counter()
    with np.errstate(all="ignore"):  # NaN/Inf inputs give NaN/Inf outputs, as on the GPU
        result = run_reference(problem, from_wire(first, problem.dtype), from_wire(second, problem.dtype))
        output = to_wire(result.astype(np.float32) if problem.dtype is DType.BF16 else result, problem.dtype)
    return output, (time.perf_counter() - start) * 1e6, "cpu_reference"


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


__all__ = ["DEFAULT_TOP_K", "BenchmarkQuery", "BenchmarkSummary", "Dispatcher", "Environment", "ListKernelsQuery",
           "Measured", "QuarantineLifted", "RunQuery", "RunResult", "ServerInfo", "generate_inputs"]
