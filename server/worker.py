"""GPU worker processes: one per GPU, started with ``spawn`` (never ``fork``: a forked CUDA context
is unusable, DESIGN §2), each owning its device and running one request at a time.

A kernel that crashes its worker (segfault, sticky CUDA error) or hangs past the timeout kills only
that worker: the pool restarts it and raises :class:`~.errors.KernelFault` naming the kernel, and the
caller quarantines the kernel. Requests to other workers carry on and the server stays SERVING.

The work itself is done by a *handler* object built in the child from ``module:factory``
(``factory(device_index, options)``) with methods ``hello() -> dict`` and one per operation
(``run(payload) -> dict``, ``measure(payload) -> dict``). The GPU handler is
:mod:`tiledispatch.server.gpu_handler`; tests substitute a CPU one to exercise this machinery.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from .errors import DeadlineExceeded, KernelFault, ServiceError

log = logging.getLogger("tiledispatch.server.worker")

#: Exit status a handler asks for when the device is unusable after an error (sticky CUDA error).
FATAL_EXIT = 70


class WorkerError(ServiceError):
    """A handler raised (the kernel failed to launch or run); the worker is still healthy."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(f"{kind}: {message}")


def _load_factory(spec: str) -> Callable[[int, dict], Any]:
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def worker_main(conn, device: int, handler_spec: str, options: dict) -> None:
    """Child process entry point: build the handler, say hello, then serve until told to stop."""
    try:
        handler = _load_factory(handler_spec)(device, options)
        conn.send(("hello", handler.hello()))
    except BaseException as error:  # report why, then exit: the parent logs it and gives up on the device
        conn.send(("init_error", f"{type(error).__name__}: {error}"))
        return
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        op, payload = message
        try:
            conn.send(("ok", getattr(handler, op)(payload)))
        except Exception as error:
            fatal = bool(getattr(handler, "is_fatal", lambda e: False)(error))
            conn.send(("fatal" if fatal else "error", (type(error).__name__, str(error))))
            if fatal:  # the device context is broken: only a fresh process can use it again
                conn.close()
                os._exit(FATAL_EXIT)


class _Worker:
    """One child process and the parent's end of its pipe."""

    def __init__(self, context, device: int, handler_spec: str, options: dict):
        self._context = context
        self.device = device
        self._handler_spec = handler_spec
        self._options = options
        self.hello: dict | None = None
        self.process = None
        self.conn = None

    def start(self) -> None:
        parent, child = self._context.Pipe()
        self.process = self._context.Process(target=worker_main, name=f"tiledispatch-gpu{self.device}",
                                             args=(child, self.device, self._handler_spec, self._options),
                                             daemon=True)
        self.process.start()
        child.close()  # the parent keeps only its end, so a dead child reads as EOF
        self.conn = parent
        self.hello = None

    def wait_ready(self, timeout_s: float) -> dict:
        if self.hello is None:
            if not self.conn.poll(timeout_s):
                raise TimeoutError(f"GPU worker {self.device} did not start within {timeout_s:.0f}s")
            try:
                kind, value = self.conn.recv()
            except EOFError:
                self.process.join(5)
                raise RuntimeError(f"GPU worker {self.device} exited while starting (status "
                                   f"{self.process.exitcode})") from None
            if kind != "hello":
                raise RuntimeError(f"GPU worker {self.device} failed to start: {value}")
            self.hello = value
        return self.hello

    def call(self, op: str, payload: dict, timeout_s: float) -> Any:
        """The handler's answer; raises ``_Died`` when the process died or hung."""
        try:
            self.conn.send((op, payload))
            if not self.conn.poll(timeout_s):
                raise _Died(f"hung (no answer within {timeout_s:.0f}s)")
            kind, value = self.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self.process.join(timeout=5)
            raise _Died(f"crashed its GPU worker (exit status {self.process.exitcode})") from None
        if kind == "ok":
            return value
        if kind == "fatal":
            raise _Died(f"left the GPU unusable ({value[0]}: {value[1]})")
        raise WorkerError(*value)

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError):  # already gone
            self.conn.send(None)
        self.process.join(timeout_s)
        self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.terminate()
            self.process.join(2)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(2)
        if self.conn is not None:
            self.conn.close()


class _Died(Exception):
    pass


class WorkerPool:
    """Hands each request to an idle worker; restarts a worker its kernel killed."""

    def __init__(self, devices: list[int], handler_spec: str, options: dict, *, timeout_s: float = 120.0,
                 startup_timeout_s: float = 600.0, on_restart: Callable[[int], None] | None = None):
        self._context = multiprocessing.get_context("spawn")
        self.workers = [_Worker(self._context, device, handler_spec, options) for device in devices]
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self._on_restart = on_restart
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._closed = threading.Event()

    @property
    def size(self) -> int:
        return len(self.workers)

    def start(self) -> list[dict]:
        """Start every worker and wait for each hello (device name, versions); blocking."""
        for worker in self.workers:
            worker.start()
        hellos = [worker.wait_ready(self.startup_timeout_s) for worker in self.workers]
        for worker in self.workers:
            self._idle.put(worker)
        return hellos

    def call(self, op: str, payload: dict, kernel: str, *, deadline: float | None = None) -> Any:
        """Run ``op`` on some worker. ``KernelFault`` if ``kernel`` killed or hung it.

        ``deadline`` (a ``time.monotonic()`` instant) bounds the wait for an idle worker: a call still
        queued when it passes is dropped with :class:`DeadlineExceeded` and never reaches the GPU.
        A call already running is not interrupted (its time is bounded by ``timeout_s``).
        """
        try:
            if deadline is None:
                worker = self._idle.get()
            else:
                worker = self._idle.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise DeadlineExceeded(f"the call's deadline passed while it waited for a GPU worker ({kernel} "
                                   "did not run)") from None
        if deadline is not None and time.monotonic() >= deadline:
            self._idle.put(worker)
            raise DeadlineExceeded(f"the call's deadline passed while it waited for a GPU worker ({kernel} "
                                   "did not run)")
        try:
            if not worker.process.is_alive():  # died while idle (e.g. killed): not this kernel's fault
                log.warning("GPU worker found dead; restarting", extra={"device": worker.device})
                self._restart(worker)
            worker.wait_ready(self.startup_timeout_s)  # a restarted worker may still be importing
            return worker.call(op, payload, self.timeout_s)
        except _Died as died:
            log.error("GPU worker lost", extra={"device": worker.device, "kernel": kernel, "reason": str(died)})
            self._restart(worker)
            raise KernelFault(kernel, str(died)) from None
        finally:
            if not self._closed.is_set():
                self._idle.put(worker)

    def _restart(self, worker: _Worker) -> None:
        worker.kill()
        if self._closed.is_set():
            return
        worker.start()  # returns at once; the next call waits for its hello
        if self._on_restart:
            self._on_restart(worker.device)

    def stop(self) -> None:
        self._closed.set()
        deadline = time.monotonic() + 10
        for worker in self.workers:
            worker.stop(max(0.1, deadline - time.monotonic()))
