"""``tiledispatch serve``: the gRPC server process.

Start-up order: listen at once with the health service saying NOT_SERVING (so probes and clients
get a clear answer while loading: UNAVAILABLE), then load the tuning database, kernel catalog and
models and start one GPU worker per GPU in an executor, then switch health to SERVING. SIGTERM or
SIGINT switches health to NOT_SERVING, lets in-flight RPCs finish for ``--grace-s``, stops the
workers and closes the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from tiledispatch.native.arch import ArchSpec, arch_for_device_name, get_arch
from tiledispatch.v1 import tiledispatch_pb2_grpc as pb_grpc

from . import handlers, logs
from .auth import AuthConfigError, TokenAuth
from .catalog import Catalog
from .config import Settings, parse_settings
from .device import probe_gpus, software_versions
from .interceptors import AuthInterceptor
from .metrics import Metrics
from .predictors import ModelStore
from .service import Dispatcher, Environment
from .servicer import SERVICE_NAME, Servicer
from .tls import TlsConfigError, server_credentials
from .tuning_db import TuningDB
from .worker import WorkerPool

log = logging.getLogger("tiledispatch.server")

_HEALTH_SERVICES = ("", SERVICE_NAME)
#: The largest HTTP/2 frame (2^24 - 1 bytes).
_MAX_FRAME = (1 << 24) - 1


def build_dispatcher(settings: Settings, metrics: Metrics) -> Dispatcher:
    """Load everything the core needs (blocking: runs in an executor)."""
    indices = settings.gpu_indices()
    probed, cuda = ([], "")
    if indices is None or settings.arch == "auto":
        probed, cuda = probe_gpus()
    if indices is None:
        indices = [device.index for device in probed]
    spec: ArchSpec = (get_arch(settings.arch) if settings.arch != "auto" else
                      arch_for_device_name(probed[0].name, probed[0].capability) if probed else get_arch("sm_90"))
    db = TuningDB(settings.db)
    try:
        catalog = Catalog.load(settings.registry_dir, spec, settings.rule_set, db.quarantined(spec.name))
        models = ModelStore.load(settings.models_dir, spec)
        pool = None
        hellos: list[dict] = []
        if indices:
            pool = WorkerPool(indices, settings.worker_handler,
                              {"registry_dir": str(settings.registry_dir), "arch": spec.arch},
                              timeout_s=settings.kernel_timeout_s,
                              on_restart=lambda device: metrics.worker_restarts.labels(str(device)).inc())
            try:
                hellos = pool.start()
            except BaseException:
                pool.stop()
                raise
    except BaseException:
        db.close()
        raise
    versions = software_versions()
    first = hellos[0] if hellos else {}
    versions.update(cuda=first.get("cuda", cuda), driver=first.get("driver", ""))
    env = Environment(arch=spec.arch, device_spec=spec.name, gpu_name=first.get("name", ""), gpus=hellos,
                      versions=versions, max_message_bytes=settings.max_message_bytes,
                      cpu_reference_max_flops=settings.cpu_reference_max_gflop * 1e9)
    log.info("loaded", extra={"arch": spec.arch, "device_spec": spec.name, "gpus": [h.get("name") for h in hellos],
                              "kernels": len(catalog.configs), "catalog": catalog.source,
                              "models": [f"{m.name}/{m.version}" for m in models.all()],
                              "quarantined": catalog.quarantined_count, "db": str(settings.db)})
    return Dispatcher(env, catalog, models, db, metrics, pool, settings.cache_size)


async def serve(settings: Settings, *, on_listening: Callable[[int], None] | None = None,
                stop: asyncio.Event | None = None) -> int:
    """Run until ``stop`` is set (or SIGTERM/SIGINT); returns the process exit status."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    metrics = Metrics()
    try:
        credentials = server_credentials(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
        auth = TokenAuth.from_file(settings.auth_tokens_file) if settings.auth_tokens_file else None
    except (TlsConfigError, AuthConfigError, OSError) as error:
        log.error("bad security settings", extra={"error": str(error)})
        return 1
    # Request decoding is checked in the handlers themselves (handlers.register): without auth, no
    # interceptor at all, and grpc.aio skips its per-call interceptor pipeline.
    interceptors = [] if auth is None else [AuthInterceptor(auth, metrics)]
    fast = ThreadPoolExecutor(settings.threads, thread_name_prefix="td-fast")
    heavy = ThreadPoolExecutor(settings.threads, thread_name_prefix="td-heavy")
    limit = settings.max_message_bytes
    server = grpc.aio.server(interceptors=interceptors,
                             options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", limit),
                                      # A stream window as large as a message, and large frames: a
                                      # 64 MiB Run request then flows without waiting for window
                                      # updates (about 1.5x faster on loopback).
                                      ("grpc.http2.lookahead_bytes", limit),
                                      ("grpc.http2.max_frame_size", _MAX_FRAME),
                                      ("grpc.so_reuseport", 0)])  # a taken port must fail, not be shared
    servicer = Servicer(metrics, fast, heavy, settings.max_concurrency, settings.max_queue,
                        answer_cache_size=settings.cache_size, allow_shared_memory=settings.allow_shared_memory)
    handlers.register(servicer, server, pb_grpc.add_TileDispatchServiceServicer_to_server)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    for name in _HEALTH_SERVICES:
        await health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    reflection.enable_server_reflection((SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                                         reflection.SERVICE_NAME), server)
    address = f"{settings.host}:{settings.port}"
    try:
        port = (server.add_secure_port(address, credentials) if credentials is not None
                else server.add_insecure_port(address))
    except RuntimeError as error:
        log.error("cannot listen", extra={"address": f"{settings.host}:{settings.port}", "error": str(error)})
        return 1
    await server.start()
    stop_metrics = metrics.serve(settings.host, settings.metrics_port) if settings.metrics_port else None
    log.info("listening", extra={"address": f"{settings.host}:{port}", "metrics_port": settings.metrics_port,
                                 "tls": "mutual" if settings.tls_client_ca else "on" if credentials else "off",
                                 "auth": "tokens" if auth is not None else "off"})
    if on_listening:
        on_listening(port)
    for signum in (signal.SIGTERM, signal.SIGINT):
        # Not possible off the main thread (in-process tests) or without signals: then stop= stops it.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
    dispatcher: Dispatcher | None = None
    loading = stopping = None
    try:
        loading = loop.run_in_executor(heavy, build_dispatcher, settings, metrics)
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait((loading, stopping), return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set():
            try:
                dispatcher = await loading
            except Exception:
                log.exception("start-up failed")
                return 1
            servicer.dispatcher = dispatcher
            for name in _HEALTH_SERVICES:
                await health.set(name, health_pb2.HealthCheckResponse.SERVING)
            metrics.ready.set(1)
            log.info("serving", extra={"address": f"{settings.host}:{port}"})
            await stopping
        log.info("shutting down", extra={"grace_s": settings.grace_s})
    finally:
        servicer.closing = True
        if stopping is not None:
            stopping.cancel()
        metrics.ready.set(0)
        await health.enter_graceful_shutdown()
        await server.stop(settings.grace_s)
        if dispatcher is None and loading is not None and loading.done() and not loading.cancelled() \
                and loading.exception() is None:
            dispatcher = loading.result()  # finished loading just as the stop came
        if dispatcher is not None:
            if dispatcher.gpu is not None:
                dispatcher.gpu.stop()
            dispatcher.db.close()
        if stop_metrics:
            stop_metrics()
        fast.shutdown(wait=False, cancel_futures=True)
        heavy.shutdown(wait=False, cancel_futures=True)
        log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``tiledispatch serve``; ``argv[0]`` is the command name."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "serve":
        args = args[1:]
    settings = parse_settings(args)
    logs.configure(settings.log_level)
    try:
        return asyncio.run(serve(settings))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
