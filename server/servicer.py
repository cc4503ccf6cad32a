"""The gRPC servicer of ``tiledispatch.v1.TileDispatchService``: thin by design.

Each RPC converts its request (:mod:`.convert`), calls the core (:mod:`.service`) in an executor
thread, converts the answer, and maps any error to a status once (:mod:`.errors`). It also keeps
the cross-cutting rules in one place: UNAVAILABLE until the core is loaded, RESOURCE_EXHAUSTED past
``--max-concurrency`` RPCs in flight or ``--max-queue`` heavy calls (Run, Benchmark, AUTOTUNE:
running or queued for a thread or GPU worker), the call's deadline carried to where it waits
(:mod:`.deadlines`: work whose caller's deadline passed in a queue is dropped, not run), and RPC
count/latency metrics by method and code.

Transport shortcuts (:mod:`.handlers`): a cached Select is answered with stored serialized bytes
(:mod:`.answers`), and Run's tensors arrive as views into the received request, or, for a local
client where ``--allow-shared-memory`` permits, in its shared-memory segment (:mod:`.shm_inputs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import grpc

from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb
from tiledispatch.v1 import tiledispatch_pb2_grpc as pb_grpc

from . import convert, deadlines
from .answers import Answer, AnswerCache
from .errors import FIELD_METADATA_KEY, InvalidArgument, ResourceExhausted, Unavailable, to_status
from .metrics import Metrics
from .service import Dispatcher

log = logging.getLogger("tiledispatch.server.rpc")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TileDispatchService"].full_name
#: Longest status message sent: details may quote the request (a 100k-entry shape), and status
#: messages travel as headers, which clients cap (16 KiB by default).
MAX_DETAILS_CHARS = 2048


class Servicer(pb_grpc.TileDispatchServiceServicer):
    def __init__(self, metrics: Metrics, fast: Executor, heavy: Executor, max_concurrency: int,
                 max_queue: int | None = None, answer_cache_size: int = 4096, allow_shared_memory: bool = False):
        self.dispatcher: Dispatcher | None = None  # set when loading finishes
        self.closing = False
        self._metrics = metrics
        self._fast = fast      # selection, listings, info: short calls
        self._heavy = heavy    # runs and benchmarks: may take seconds, must not starve the short ones
        self._max_concurrency = max_concurrency
        self._max_queue = max_queue if max_queue is not None else max_concurrency
        self._inflight = 0     # touched only on the event loop: no lock
        self._answers = AnswerCache(answer_cache_size)
        self._allow_shared_memory = allow_shared_memory  # Run inputs in a local client's segment
        self._heavy_inflight = 0

    # ---- RPCs ------------------------------------------------------------------------------------
    async def Select(self, request: pb.SelectRequest, context) -> pb.SelectResponse | bytes:
        parsed: list = []  # the query, parsed once for the inline lookup and the thread
        heavy = request.policy == pb.SELECTION_POLICY_AUTOTUNE

        def work(core: Dispatcher) -> pb.SelectResponse:
            query = parsed[0] if parsed else convert.select_query(request)
            return convert.select_response(core.select(query), query.top_k)

        def cached(core: Dispatcher) -> bytes | None:
            # A request seen before: its stored answer, no parsing (see .answers).
            key = request.SerializeToString()
            generation = core.selection_generation  # read before the lookup: a clear after it wins
            answer = self._answers.get(key, generation)
            if answer is not None:
                self._metrics.cache_lookup(True)
                answer.counter.inc()
                return answer.data
            query = convert.select_query(request)
            parsed.append(query)
            selection = core.select_cached(query)
            if selection is None:
                return None
            data = convert.select_response(selection, query.top_k).SerializeToString()
            counter = self._metrics.selections.labels(selection.source.value,
                                                      f"{selection.model_name}/{selection.model_version}")
            self._answers.put(key, Answer(generation, data, counter))
            return data

        return await self._unary("Select", context, self._heavy if heavy else self._fast, work, heavy=heavy,
                                 inline=None if heavy else cached)

    async def Run(self, request: pb.RunRequest | codec.ParsedRunRequest, context) -> pb.RunResponse:
        peer = context.peer()

        def work(core: Dispatcher) -> pb.RunResponse:
            query = convert.run_query(request, allow_shared_memory=self._allow_shared_memory, peer=peer)
            return convert.run_response(core.run(query), query.problem.dtype)

        return await self._unary("Run", context, self._heavy, work, heavy=True)

    async def LiftQuarantine(self, request: pb.LiftQuarantineRequest, context) -> pb.LiftQuarantineResponse:
        def work(core: Dispatcher) -> pb.LiftQuarantineResponse:
            if not request.kernel:
                raise InvalidArgument("is required", field="kernel")
            lifted = core.lift_quarantine(request.kernel)
            return pb.LiftQuarantineResponse(was_quarantined=lifted.was_quarantined, reason=lifted.reason,
                                             quarantined_kernels=lifted.quarantined_kernels)

        return await self._unary("LiftQuarantine", context, self._fast, work)

    async def ListKernels(self, request: pb.ListKernelsRequest, context) -> pb.ListKernelsResponse:
        def work(core: Dispatcher) -> pb.ListKernelsResponse:
            return convert.list_kernels_response(core.list_kernels(convert.list_kernels_query(request)),
                                                 core.catalog.source)

        return await self._unary("ListKernels", context, self._fast, work)

    async def ListModels(self, request: pb.ListModelsRequest, context) -> pb.ListModelsResponse:
        return await self._unary("ListModels", context, self._fast,
                                 lambda core: convert.list_models_response(core.list_models()))

    async def GetServerInfo(self, request: pb.GetServerInfoRequest, context) -> pb.GetServerInfoResponse:
        return await self._unary("GetServerInfo", context, self._fast,
                                 lambda core: convert.server_info_response(core.info()))

    async def Benchmark(self, request: pb.BenchmarkRequest, context) -> None:
        loop = asyncio.get_running_loop()
        events = None

        async def stream(core: Dispatcher) -> None:
            nonlocal events
            deadline = _deadline(context)
            # Validation and the GPU check happen in benchmark() itself, before any event.
            events = await loop.run_in_executor(self._heavy, _within(deadline, lambda: core.benchmark(
                convert.benchmark_query(request))))
            while (event := await loop.run_in_executor(self._heavy, _within(deadline, next), events, None)) \
                    is not None:
                await context.write(convert.benchmark_event(event))

        try:
            await self._guarded("Benchmark", context, stream, heavy=True)
        finally:
            if events is not None:
                # Stop measuring if the client went away; ValueError: the generator is still running in
                # its thread (it ends after the current kernel).
                with contextlib.suppress(ValueError):
                    events.close()

    # ---- the shared wrapper ----------------------------------------------------------------------
    async def _unary(self, method: str, context, executor: Executor, work: Callable[[Dispatcher], Any], *,
                     heavy: bool = False, inline: Callable[[Dispatcher], Any] | None = None) -> Any:
        """``work`` on ``executor`` under the guard; ``inline`` (a cache lookup of a few tens of µs)
        first runs on the event loop, and its answer, when not ``None``, skips the thread hop."""
        loop = asyncio.get_running_loop()
        result = None

        async def call(core: Dispatcher) -> None:
            nonlocal result
            if inline is not None:
                result = inline(core)
                if result is not None:
                    return
            result = await loop.run_in_executor(executor, _within(_deadline(context), work), core)

        await self._guarded(method, context, call, heavy=heavy)
        return result

    async def _guarded(self, method: str, context, body, *, heavy: bool = False) -> None:
        """Admission, error mapping and metrics around one RPC."""
        start = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            core = self._admit(heavy)
            self._inflight += 1
            self._heavy_inflight += heavy
            self._metrics.inflight.inc()
            try:
                await body(core)
            finally:
                self._inflight -= 1
                self._heavy_inflight -= heavy
                self._metrics.inflight.dec()
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            status = to_status(error)
            if status is None:
                log.exception("unexpected error", extra={"method": method})
                code, details, field = grpc.StatusCode.INTERNAL, f"internal error ({type(error).__name__})", ""
            else:
                code, details, field = status.code, status.details, status.field
                log.info("rpc failed", extra={"method": method, "code": code.name, "details": details})
            metadata = ((FIELD_METADATA_KEY, _clip(field, 256)),) if field else ()
            await context.abort(code, _clip(details, MAX_DETAILS_CHARS), trailing_metadata=metadata)
        finally:
            elapsed = time.perf_counter() - start
            self._metrics.rpc_requests.labels(method, code.name).inc()
            self._metrics.rpc_latency.labels(method, code.name).observe(elapsed)
            log.debug("rpc", extra={"method": method, "code": code.name, "ms": round(elapsed * 1e3, 3)})

    def _admit(self, heavy: bool = False) -> Dispatcher:
        if self.closing:
            raise Unavailable("server is shutting down")
        if self.dispatcher is None:
            raise Unavailable("server is starting: loading the kernel registry and models")
        if self._inflight >= self._max_concurrency:
            self._metrics.shed.labels("max_concurrency").inc()
            raise ResourceExhausted(f"{self._inflight} requests in flight, the limit is {self._max_concurrency} "
                                    "(--max-concurrency); retry later")
        if heavy and self._heavy_inflight >= self._max_queue:
            self._metrics.shed.labels("max_queue").inc()
            raise ResourceExhausted(f"{self._heavy_inflight} Run/Benchmark/AUTOTUNE calls admitted (running or "
                                    f"queued), the limit is {self._max_queue} (--max-queue); retry later")
        return self.dispatcher


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 20] + f"... ({len(text)} chars)"


def _deadline(context) -> float | None:
    """The call's deadline as a ``time.monotonic()`` instant (``None``: the client set none)."""
    left = context.time_remaining()
    return None if left is None else time.monotonic() + left


def _within(deadline: float | None, work: Callable[..., Any]) -> Callable[..., Any]:
    """``work`` run under the call's deadline: dropped if the deadline passed while it sat in the
    executor's queue, and visible to the GPU worker pool as it waits for a worker."""
    @functools.wraps(work)
    def run(*args: Any) -> Any:
        with deadlines.scope(deadline):
            deadlines.check("a thread")
            return work(*args)

    return run
