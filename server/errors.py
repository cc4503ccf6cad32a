"""Domain errors of the service, and their one mapping onto gRPC status codes.

The core (selection, runs, the tuning database) raises these and knows nothing of gRPC; the
servicer turns any exception into a status with :func:`to_status`, the only place codes are chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from tiledispatch.native.problem import ProblemError
from tiledispatch.v1.codec import FIELD_METADATA_KEY, TensorError

__all__ = ["FIELD_METADATA_KEY", "DeadlineExceeded", "FailedPrecondition", "InvalidArgument", "KernelFault",
           "NotFound", "ResourceExhausted", "ServiceError", "Unavailable", "Unimplemented", "to_status"]


class ServiceError(Exception):
    """Base of the domain errors: a message, and the request field at fault when there is one."""

    def __init__(self, message: str, *, field: str = ""):
        self.message = message
        self.field = field
        super().__init__(self.details)

    @property
    def details(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InvalidArgument(ServiceError):
    """A malformed problem, tensor or option; ``field`` names it."""


class NotFound(ServiceError):
    """An unknown kernel or model (or a problem never measured, under a database-only policy)."""


class FailedPrecondition(ServiceError):
    """The call needs something this server lacks, e.g. a GPU, or the kernel is quarantined."""


class ResourceExhausted(ServiceError):
    """A size or concurrency limit."""


class DeadlineExceeded(ServiceError):
    """The call's deadline passed while it waited (for a thread or a GPU worker): it did not run."""


class Unavailable(ServiceError):
    """Not ready yet (loading) or shutting down: the one error worth retrying."""


class Unimplemented(ServiceError):
    """A valid problem that no kernel supports (the generic families should make this impossible)."""


class KernelFault(ServiceError):
    """A kernel crashed or hung its GPU worker; it has been quarantined and the worker restarted."""

    def __init__(self, kernel: str, reason: str):
        self.kernel = kernel
        super().__init__(f"kernel {kernel} {reason}; it is quarantined and its worker restarted", field="kernel")


_CODES: dict[type[ServiceError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
    KernelFault: grpc.StatusCode.INTERNAL,
}


@dataclass(frozen=True)
class Status:
    code: grpc.StatusCode
    details: str
    field: str = ""


def invalid_problem(error: ProblemError, prefix: str = "problem") -> InvalidArgument:
    """Wrap a native validation error, naming the field as the request spells it (``problem.batch``)."""
    return InvalidArgument(error.rule, field=f"{prefix}.{error.field}" if prefix else error.field)


def to_status(error: BaseException) -> Status | None:
    """The status for a domain error; ``None`` for anything else (a bug: the caller logs it and
    answers INTERNAL without leaking internals)."""
    if isinstance(error, ProblemError):
        error = invalid_problem(error)
    elif isinstance(error, TensorError):
        error = InvalidArgument(error.rule, field=error.field)
    if isinstance(error, ServiceError):
        return Status(_code_of(error), error.details, error.field)
    return None


def _code_of(error: ServiceError) -> grpc.StatusCode:
    for cls, code in _CODES.items():  # subclasses of the domain errors keep their parent's code
        if isinstance(error, cls):
            return code
    return grpc.StatusCode.INTERNAL
