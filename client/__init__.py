"""Thin client of the tiledispatch service: grpcio, protobuf and numpy only (never torch, triton or
lightgbm), so any framework can depend on it.

>>> from tiledispatch.client import Client, Problem
>>> with Client("127.0.0.1:50051") as client:                                   # doctest: +SKIP
...     problem = Problem("fwd", "bf16", 32, 32, 128, 128, (56, 56), (3, 3), pad_begin=(1, 1), pad_end=(1, 1))
...     client.select(problem).best.kernel
"""

from .client import BenchmarkSummary, Candidate, Client, Measurement, RunResult, Selection, resolve_target
from .credentials import Tls
from .errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    TileDispatchError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)
from .problem import Problem

__all__ = ["BenchmarkSummary", "Candidate", "Client", "DeadlineExceededError", "FailedPreconditionError",
           "InternalError", "InvalidArgumentError", "Measurement", "NotFoundError", "PermissionDeniedError", "Problem",
           "ResourceExhaustedError", "RunResult", "Selection", "TileDispatchError", "Tls", "UnauthenticatedError",
           "UnavailableError", "UnimplementedError", "resolve_target"]
