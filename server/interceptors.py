"""gRPC server interceptors: request decoding that answers INVALID_ARGUMENT instead of INTERNAL
(applied once, at registration, by :mod:`.handlers`), and authentication (:mod:`.auth`) in front of
every method.

Both work by returning a replacement method handler, so a refused call never reaches the servicer:
nothing is decoded for a caller that failed authentication, and nothing runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc

from tiledispatch.v1 import tiledispatch_pb2 as pb

from .auth import AUTOTUNE_SCOPE, Decision, TokenAuth, method_scope
from .metrics import Metrics

log = logging.getLogger("tiledispatch.server.auth")

_SERVICE_PREFIX = "/tiledispatch.v1.TileDispatchService/"
_SELECT = _SERVICE_PREFIX + "Select"


def _short(method: str) -> str:
    return method.rsplit("/", 1)[-1]


def _wrap_behaviour(handler: grpc.RpcMethodHandler, wrap: Callable[[Callable], Callable]) -> grpc.RpcMethodHandler:
    """The handler with its one behaviour (whichever shape it has) replaced by ``wrap(behaviour)``."""
    for name in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
        behaviour = getattr(handler, name)
        if behaviour is not None:
            return handler._replace(**{name: wrap(behaviour)})
    return handler


# ---- decoding ------------------------------------------------------------------------------------
class _Undecodable:
    def __init__(self, error: Exception):
        self.error = error


def _safe(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as error:  # DecodeError and friends: answered below, not by gRPC as INTERNAL
            return _Undecodable(error)

    return decode


def decode_checked(handler: grpc.RpcMethodHandler | None, method: str) -> grpc.RpcMethodHandler | None:
    """``handler`` (of the full ``method`` path) answering INVALID_ARGUMENT for bytes that are not a
    valid request message (gRPC itself would say INTERNAL); other services' handlers as they are.

    :mod:`.handlers` applies it once, when the service is registered: as an interceptor it cost a
    coroutine and new closures on every call, and without any interceptor grpc.aio skips its
    interceptor pipeline altogether."""
    if handler is None or handler.request_streaming or handler.request_deserializer is None \
            or not method.startswith(_SERVICE_PREFIX):
        return handler
    short = _short(method)

    def wrap(behaviour: Callable) -> Callable:
        async def checked(request, context):
            if isinstance(request, _Undecodable):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"request: not a valid {short} request message ({request.error})")
            return await behaviour(request, context)

        if handler.response_streaming:
            async def checked_stream(request, context):
                if isinstance(request, _Undecodable):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                        f"request: not a valid {short} request message ({request.error})")
                return await _drain(behaviour(request, context), context)

            return checked_stream
        return checked

    return _wrap_behaviour(handler, wrap)._replace(request_deserializer=_safe(handler.request_deserializer))


class DecodeInterceptor(grpc.aio.ServerInterceptor):
    """:func:`decode_checked` as an interceptor, for handlers registered without :mod:`.handlers`."""

    async def intercept_service(self, continuation, details):
        return decode_checked(await continuation(details), details.method)


async def _drain(result: Any, context) -> None:
    """Run a server-streaming behaviour that is either a coroutine (writes through ``context``) or
    an async generator (yields responses)."""
    if hasattr(result, "__aiter__"):
        async for response in result:
            await context.write(response)
    else:
        await result


# ---- authentication ------------------------------------------------------------------------------
class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Applies :class:`~.auth.TokenAuth` to every call, by :data:`~.auth.METHOD_SCOPES`."""

    def __init__(self, auth: TokenAuth, metrics: Metrics | None = None):
        self._auth = auth
        self._metrics = metrics

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None:
            return None
        metadata = details.invocation_metadata
        decision = self._auth.check(method_scope(details.method), metadata)
        if not decision.allowed:
            return self._deny(handler, details.method, decision)
        if details.method == _SELECT:  # AUTOTUNE measures on the GPU: it needs the run scope
            def wrap(behaviour: Callable) -> Callable:
                async def select(request, context):
                    if isinstance(request, pb.SelectRequest) and request.policy == pb.SELECTION_POLICY_AUTOTUNE:
                        needed = self._auth.check(AUTOTUNE_SCOPE, metadata)
                        if not needed.allowed:
                            await self._refuse(context, details.method, needed)
                    return await behaviour(request, context)

                return select

            return _wrap_behaviour(handler, wrap)
        return handler

    def _deny(self, handler: grpc.RpcMethodHandler, method: str, decision: Decision) -> grpc.RpcMethodHandler:
        async def refuse(request, context):
            await self._refuse(context, method, decision)

        # The request is left as raw bytes: nothing from an unauthenticated caller is parsed.
        return _wrap_behaviour(handler, lambda _: refuse)._replace(request_deserializer=None)

    async def _refuse(self, context, method: str, decision: Decision) -> None:
        code = grpc.StatusCode[decision.code]
        if self._metrics is not None:
            self._metrics.auth_refused.labels(_short(method), code.name).inc()
        log.warning("rpc refused", extra={"method": _short(method), "code": code.name, "peer": context.peer(),
                                          "client": decision.principal.name if decision.principal else "",
                                          "details": decision.message})
        await context.abort(code, decision.message)
