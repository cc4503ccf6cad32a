"""Typed errors of the client: one class per status code the service uses, each carrying the code,
the server's message and, for INVALID_ARGUMENT, the offending field."""

from __future__ import annotations

import grpc

from tiledispatch.v1.codec import FIELD_METADATA_KEY


class TileDispatchError(Exception):
    """A call failed. ``code`` is the gRPC status code, ``message`` the server's details,
    ``field`` the request field at fault (when the server named one)."""

    def __init__(self, code: grpc.StatusCode, message: str, field: str = ""):
        self.code = code
        self.message = message
        self.field = field
        super().__init__(f"{code.name}: {message}")


class InvalidArgumentError(TileDispatchError):
    pass


class NotFoundError(TileDispatchError):
    pass


class FailedPreconditionError(TileDispatchError):
    pass


class ResourceExhaustedError(TileDispatchError):
    pass


class UnavailableError(TileDispatchError):
    pass


class UnimplementedError(TileDispatchError):
    pass


class DeadlineExceededError(TileDispatchError):
    pass


class InternalError(TileDispatchError):
    pass


class UnauthenticatedError(TileDispatchError):
    """No token, or one the server does not know."""


class PermissionDeniedError(TileDispatchError):
    """A known token without the scope the method needs."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
}


def from_rpc_error(error: grpc.RpcError) -> TileDispatchError:
    """The typed error for a failed call."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else str(error)) or ""
    field = ""
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == FIELD_METADATA_KEY:
            field = value
    return _BY_CODE.get(code, TileDispatchError)(code, details, field)
