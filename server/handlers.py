"""The service's method handlers: the generated ones, with two transport shortcuts.

* Select's response serializer passes ``bytes`` through, so the servicer can answer a cached Select
  with stored serialized bytes (:mod:`.answers`).
* Every method answers INVALID_ARGUMENT for undecodable request bytes
  (:func:`.interceptors.decode_checked`, applied here once instead of by an interceptor per call).
* Run's request deserializer is :func:`~tiledispatch.v1.codec.parse_run_request`: the tensors' bytes
  stay views into the received request instead of being copied into the message and out of it again
  (two of the server's four copies of a 64 MiB input).

Capturing the generated handlers keeps every other method (and any method a regenerated file adds)
exactly as generated.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb

from .interceptors import decode_checked


def serialize_select(response: pb.SelectResponse | bytes) -> bytes:
    """The Select response serializer: stored answers are already bytes."""
    return response if isinstance(response, bytes) else response.SerializeToString()


class _Capture:
    """Stands in for the server while the generated code registers the handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}
        self.service = ""

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.service, self.handlers = service, dict(handlers)


def register(servicer, server, add_to_server: Callable) -> None:
    """``add_to_server(servicer, server)`` (the generated function) with the shortcuts above."""
    capture = _Capture()
    add_to_server(servicer, capture)
    handlers = capture.handlers
    handlers["Select"] = handlers["Select"]._replace(response_serializer=serialize_select)
    handlers["Run"] = handlers["Run"]._replace(request_deserializer=codec.parse_run_request)
    handlers = {name: decode_checked(handler, f"/{capture.service}/{name}") for name, handler in handlers.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(capture.service, handlers),))
    server.add_registered_method_handlers(capture.service, handlers)
