"""The Python client of the tiledispatch service.

Imports only grpcio, protobuf, numpy and the generated API, so a framework can depend on it without
torch, triton or lightgbm. Every call has a deadline (``timeout``, default 30 s or
``$TILEDISPATCH_TIMEOUT_S``); UNAVAILABLE (and only it) is retried a bounded number of times with
exponential backoff and jitter within that deadline; failures raise the typed errors of
:mod:`.errors`.

Security: ``tls=True`` (system roots) or ``tls=Tls(ca_cert=..., client_cert=..., client_key=...)``
for TLS and mutual TLS; ``token=...`` sends a bearer token with every call (docs/security.md).

Several replicas: pass a list of ``host:port`` IP literals (one ``ipv4:``/``ipv6:`` target), or one
``dns:///name:port`` target whose name resolves to every replica (a Kubernetes headless Service);
either way calls are spread with gRPC's ``round_robin`` policy.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format

from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb
from tiledispatch.v1 import tiledispatch_pb2_grpc as pb_grpc

from .credentials import Tls, as_tls, bearer_metadata
from .errors import TileDispatchError, from_rpc_error
from .problem import ProblemLike, as_proto
from .shm import InputSegment

DEFAULT_TARGET = "127.0.0.1:50051"
DEFAULT_TIMEOUT_S = 30.0
_RUN_METHOD = "/tiledispatch.v1.TileDispatchService/Run"
_MAX_WINDOW = 256 * 1024 * 1024
_MAX_FRAME = (1 << 24) - 1
_ROUND_ROBIN = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})


# ---- answers -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    kernel: str
    family: str
    predicted_us: float
    measured_us: float | None = None


@dataclass(frozen=True)
class Selection:
    candidates: tuple[Candidate, ...]
    source: str                    # tuning_db | model | analytic | autotune
    model: tuple[str, str]         # (name, version)
    candidates_considered: int
    problem_key: str
    cached: bool

    @property
    def best(self) -> Candidate:
        return self.candidates[0]


@dataclass(frozen=True)
class RunResult:
    output: np.ndarray             # bf16 as float32 values (or uint16 bits with bf16="bits")
    kernel: str
    elapsed_us: float
    executed_on: str               # gpu | cpu_reference
    selection_source: str          # how the kernel was chosen ("" when the caller named it)
    inputs: tuple[np.ndarray, np.ndarray] | None = None


@dataclass(frozen=True)
class Measurement:
    kernel: str
    median_us: float
    min_us: float
    status: str                    # ok | error | wrong | fault
    relative_error: float
    message: str
    index: int
    total: int
    predicted_us: float
    graph_us: float                # device time per launch (CUDA-graph replay); 0 if not measured


@dataclass(frozen=True)
class BenchmarkSummary:
    oracle_kernel: str
    oracle_us: float
    selected_kernel: str
    selected_us: float
    selection_efficiency: float
    selection_source: str
    model: tuple[str, str]
    measured: int
    failed: int
    gpu_name: str


# ---- targets -------------------------------------------------------------------------------------
def _ip_literal(address: str) -> int:
    """4 or 6 for an ``ip:port`` / ``[ip6]:port`` literal, 0 otherwise."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return 0
    try:
        return ipaddress.ip_address(host.strip("[]")).version
    except ValueError:
        return 0


def resolve_target(target: str | Sequence[str] | None) -> str:
    """One gRPC target string for a target, a list of targets, or the default
    (``$TILEDISPATCH_TARGET``, else 127.0.0.1:50051)."""
    if target is None:
        target = os.environ.get("TILEDISPATCH_TARGET") or DEFAULT_TARGET
    if isinstance(target, str):
        if "," not in target or ":///" in target or target.startswith(("ipv4:", "ipv6:")):
            return target
        target = [part.strip() for part in target.split(",") if part.strip()]
    targets = list(target)
    if not targets:
        raise ValueError("target: at least one address is needed")
    if len(targets) == 1:
        return targets[0]
    versions = {_ip_literal(t) for t in targets}
    if versions == {4}:
        return "ipv4:" + ",".join(targets)
    if versions == {6}:
        return "ipv6:" + ",".join(targets)
    raise ValueError(f"target: several addresses must all be IPv4 or all IPv6 literals with ports, got {targets}; "
                     "for host names give one dns:///name:port target that resolves to every replica")


# ---- the client ----------------------------------------------------------------------------------
class Client:
    """A connection to one service (or a set of replicas). Thread-safe; use as a context manager
    or call :meth:`close`."""

    def __init__(self, target: str | Sequence[str] | None = None, *, timeout: float | None = None,
                 retries: int = 4, backoff_s: float = 0.1, max_backoff_s: float = 2.0, max_message_mb: int = 1024,
                 options: Iterable[tuple[str, Any]] = (), tls: bool | Tls | None = None, token: str | None = None):
        self.target = resolve_target(target)
        self.timeout = float(timeout if timeout is not None else os.environ.get("TILEDISPATCH_TIMEOUT_S")
                             or DEFAULT_TIMEOUT_S)
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        limit = max_message_mb * 1024 * 1024
        channel_options = [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit),
                           # large tensors: a wide stream window and the largest frames
                           ("grpc.http2.lookahead_bytes", min(limit, _MAX_WINDOW)),
                           ("grpc.http2.max_frame_size", _MAX_FRAME),
                           ("grpc.service_config", _ROUND_ROBIN),
                           ("grpc.enable_retries", 0),  # retries are ours: UNAVAILABLE only, bounded
                           *options]
        self._metadata = bearer_metadata(token)
        settings = as_tls(tls)
        if settings is None:
            self._channel = grpc.insecure_channel(self.target, options=channel_options)
        else:
            if settings.server_name:
                channel_options.append(("grpc.ssl_target_name_override", settings.server_name))
            self._channel = grpc.secure_channel(self.target, settings.credentials(), options=channel_options)
        self._stub = pb_grpc.TileDispatchServiceStub(self._channel)
        self._shm = InputSegment()  # shared-memory Run inputs (run(shared_memory=True)), created on first use
        # Run with tensors sends bytes serialized here (codec.serialize_run_request: one copy of the
        # tensor bytes instead of three); any other Run request is serialized as usual.
        self._run = self._channel.unary_unary(_RUN_METHOD, request_serializer=_serialize_run,
                                              response_deserializer=pb.RunResponse.FromString)

    def close(self) -> None:
        self._channel.close()
        self._shm.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- RPCs ------------------------------------------------------------------------------------
    def select(self, problem: ProblemLike, *, policy: str = "default", top_k: int = 5, families: Iterable[str] = (),
               model: str | tuple[str, str] | None = None, timeout: float | None = None) -> Selection:
        """Rank kernels for ``problem``; ``model`` pins ``name`` or ``(name, version)``."""
        if policy not in codec.POLICY_TO_PROTO:
            raise ValueError(f"policy: must be one of {sorted(codec.POLICY_TO_PROTO)}, got {policy!r}")
        request = pb.SelectRequest(problem=as_proto(problem), policy=codec.POLICY_TO_PROTO[policy], top_k=top_k,
                                   families=[codec.family_to_proto(f) for f in families])
        if model:
            name, version = (model, "") if isinstance(model, str) else model
            request.model.CopyFrom(pb.ModelRef(name=name, version=version))
        response = self._unary(self._stub.Select, request, timeout)
        return Selection(
            candidates=tuple(Candidate(c.kernel, codec.FAMILY_FROM_PROTO.get(c.family, ""), c.predicted_us,
                                       c.measured_us if c.HasField("measured_us") else None)
                             for c in response.candidates),
            source=codec.SOURCE_NAMES.get(response.source, ""), model=(response.model.name, response.model.version),
            candidates_considered=response.candidates_considered, problem_key=response.problem_key,
            cached=response.cached)

    def run(self, problem: ProblemLike, inputs: tuple[np.ndarray, np.ndarray] | None = None, *, kernel: str = "",
            generate_inputs: bool = False, seed: int = 0, return_inputs: bool = False, bf16: str = "float32",
            shared_memory: bool = False, timeout: float | None = None) -> RunResult:
        """Run ``problem`` on (first, second) in the runner contract's order (fwd: input, weight;
        bwd_data: grad_output, weight; bwd_weight: input, grad_output), or on generated inputs.

        bf16 inputs may be uint16 bit patterns or float arrays (rounded to nearest even); the output
        comes back as float32 values, or as uint16 bits with ``bf16="bits"``.

        ``shared_memory=True`` (a client on the server's host, a server started with
        ``--allow-shared-memory``): the inputs go through a POSIX shared-memory segment of this
        client instead of the connection (:mod:`.shm`); the output still comes back over gRPC.
        Such calls on one client take turns (they share its segment).
        """
        message = as_proto(problem)
        request: pb.RunRequest | bytes = pb.RunRequest(problem=message, kernel=kernel, return_inputs=return_inputs)
        if generate_inputs or inputs is None:
            if inputs is not None:
                raise ValueError("inputs: give tensors or generate_inputs=True, not both")
            if shared_memory:
                raise ValueError("shared_memory: only for given inputs (generated ones are drawn on the server)")
            request.generate.seed = seed
            response = self._unary(self._run, request, timeout)
        elif shared_memory:
            with self._shm.lock:  # held through the call: the next write would overwrite these inputs
                request.shared_memory.CopyFrom(self._shm.write(*inputs, message.dtype or pb.DATA_TYPE_FP32))
                response = self._unary(self._run, request, timeout)
        else:
            first, second = inputs
            dtype = message.dtype or pb.DATA_TYPE_FP32  # unset: the server names the problem field
            request = codec.serialize_run_request(request, first, second, dtype)
            response = self._unary(self._run, request, timeout)

        def decode(tensor: pb.Tensor, field: str) -> np.ndarray:
            return codec.decode_tensor(tensor, field=field, bf16=bf16)

        returned = None
        if response.HasField("inputs"):
            returned = (decode(response.inputs.first, "inputs.first"), decode(response.inputs.second, "inputs.second"))
        return RunResult(decode(response.output, "output"), response.kernel, response.elapsed_us,
                         codec.TARGET_NAMES.get(response.executed_on, ""),
                         codec.SOURCE_NAMES.get(response.selection_source, ""), returned)

    def benchmark(self, problem: ProblemLike, *, kernels: Iterable[str] = (), top_k: int = 0,
                  families: Iterable[str] = (), repeats: int = 0,
                  timeout: float | None = None) -> Iterator[Measurement | BenchmarkSummary]:
        """Measure kernels on the server's GPU: yields a :class:`Measurement` per kernel as it
        completes, then one :class:`BenchmarkSummary`."""
        request = pb.BenchmarkRequest(problem=as_proto(problem), kernels=list(kernels), top_k=top_k,
                                      families=[codec.family_to_proto(f) for f in families], repeats=repeats)
        for event in self._stream(self._stub.Benchmark, request, timeout):
            if event.HasField("measurement"):
                m = event.measurement
                yield Measurement(m.kernel, m.median_us, m.min_us, codec.STATUS_NAMES.get(m.status, ""),
                                  m.relative_error, m.message, m.index, m.total, m.predicted_us, m.graph_us)
            else:
                s = event.summary
                yield BenchmarkSummary(s.oracle_kernel, s.oracle_us, s.selected_kernel, s.selected_us,
                                       s.selection_efficiency, codec.SOURCE_NAMES.get(s.selection_source, ""),
                                       (s.model.name, s.model.version), s.measured, s.failed, s.gpu_name)

    def list_kernels(self, *, direction: str | None = None, dtype: str | None = None, ndim: int = 0,
                     families: Iterable[str] = (), problem: ProblemLike | None = None,
                     include_unsupported: bool = False, timeout: float | None = None) -> list[dict[str, Any]]:
        """Kernels of the server, filtered; with ``problem`` only those that support it (or all,
        each with ``supported`` and ``reason``, with ``include_unsupported``)."""
        request = pb.ListKernelsRequest(ndim=ndim, families=[codec.family_to_proto(f) for f in families],
                                        include_unsupported=include_unsupported)
        if direction:
            request.direction = codec.direction_to_proto(direction)
        if dtype:
            request.dtype = codec.dtype_to_proto(dtype)
        if problem is not None:
            request.problem.CopyFrom(as_proto(problem))
        response = self._unary(self._stub.ListKernels, request, timeout)
        return [to_dict(kernel) for kernel in response.kernels]

    def list_models(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        return [to_dict(m) for m in self._unary(self._stub.ListModels, pb.ListModelsRequest(), timeout).models]

    def info(self, *, timeout: float | None = None) -> dict[str, Any]:
        """GPU, arch, versions, registry size and models of the server."""
        return to_dict(self._unary(self._stub.GetServerInfo, pb.GetServerInfoRequest(), timeout))

    def lift_quarantine(self, kernel: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Admin: return a quarantined kernel to selection (needs a token with the ``admin`` scope
        when the server authenticates). ``was_quarantined`` is false when it was not quarantined."""
        response = self._unary(self._stub.LiftQuarantine, pb.LiftQuarantineRequest(kernel=kernel), timeout)
        return {"kernel": kernel, "was_quarantined": response.was_quarantined, "reason": response.reason,
                "quarantined_kernels": response.quarantined_kernels}

    # ---- transport -------------------------------------------------------------------------------
    def _unary(self, method: Callable, request: Any, timeout: float | None) -> Any:
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        attempt = 0
        while True:
            try:
                return method(request, timeout=max(0.001, deadline - time.monotonic()), metadata=self._metadata)
            except grpc.RpcError as error:
                self._retry_or_raise(error, attempt, deadline)
            attempt += 1

    def _stream(self, method: Callable, request: Any, timeout: float | None) -> Iterator[Any]:
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        attempt = 0
        while True:
            received = False
            try:
                for item in method(request, timeout=max(0.001, deadline - time.monotonic()),
                                   metadata=self._metadata):
                    received = True
                    yield item
                return
            except grpc.RpcError as error:
                if received:  # part of the stream arrived: replaying it would repeat measurements
                    raise from_rpc_error(error) from None
                self._retry_or_raise(error, attempt, deadline)
            attempt += 1

    def _retry_or_raise(self, error: grpc.RpcError, attempt: int, deadline: float) -> None:
        """Sleep before the next attempt, or raise the typed error when it should not be retried."""
        typed = from_rpc_error(error)
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * random.uniform(0.5, 1.0)
        if typed.code != grpc.StatusCode.UNAVAILABLE or attempt >= self.retries or \
                time.monotonic() + delay >= deadline:
            raise typed from None
        time.sleep(delay)


# ---- helpers -------------------------------------------------------------------------------------
def _serialize_run(request: pb.RunRequest | bytes) -> bytes:
    return request if isinstance(request, bytes) else request.SerializeToString()


_ENUM_PREFIXES = ("DIRECTION_", "DATA_TYPE_", "FAMILY_", "MODEL_KIND_", "SELECTION_SOURCE_", "EXECUTION_TARGET_",
                  "MEASUREMENT_STATUS_", "LAYOUT_")
_SHORT = {"FORWARD": "fwd", "BACKWARD_DATA": "bwd_data", "BACKWARD_WEIGHT": "bwd_weight"}


def _short(value: Any) -> Any:
    if isinstance(value, str):
        for prefix in _ENUM_PREFIXES:
            if value.startswith(prefix):
                rest = value[len(prefix):]
                return _SHORT.get(rest, rest.lower())
    if isinstance(value, list):
        return [_short(v) for v in value]
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    return value


def to_dict(message: Any) -> dict[str, Any]:
    """A message as a plain dict: proto field names, every field present, enums spelled short
    (``fwd``, ``bf16``, ``igemm``), 64-bit integers as ints."""
    data = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)
    return _convert_int64(message, _short(data))


def _convert_int64(message: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(data)
    for field in message.DESCRIPTOR.fields:
        if field.name in out and field.type in (field.TYPE_INT64, field.TYPE_UINT64) and \
                not isinstance(out[field.name], list):
            out[field.name] = int(out[field.name])
    return out


__all__ = ["BenchmarkSummary", "Candidate", "Client", "Measurement", "RunResult", "Selection", "TileDispatchError",
           "resolve_target", "to_dict"]
