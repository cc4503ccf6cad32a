"""GPU worker processes: one per GPU, started with ``spawn`` (never ``fork``: a forked CUDA context
is unusable, DESIGN §2), each owning its device and running one request at a time.

A kernel that crashes its worker (segfault, sticky CUDA error) or hangs past the timeout kills only
that worker: the pool restarts it and raises :class:`~.errors.KernelFault` naming the kernel, and the
caller quarantines the kernel. Requests to other workers carry on and the server stays SERVING.

Tensors do not go through the pipe: a top-level payload or answer value that is a numpy array or
bytes-like of at least :data:`SHM_MIN_BYTES` travels through shared memory (one ``in`` and one ``out``
segment per worker, owned by the parent, reused from call to call and replaced by a larger one when
a call needs more); the pipe carries only a reference to it. Such a value reaches the handler as a
numpy array over the shared segment, valid during the call (bytes-like values as ``uint8`` arrays),
and the handler's answer values come back to the caller as arrays of their own. The segments are
unlinked when their worker is stopped or restarted (the resource tracker unlinks them if the server
itself is killed). Their pages are reserved when they are created, so a /dev/shm too small for them
(a container's default is 64 MiB) is noticed then and the values go through the pipe instead (slower,
logged), never a SIGBUS mid-copy.

The work itself is done by a *handler* object built in the child from ``module:factory``
(``factory(device_index, options)``) with methods ``hello() -> dict`` and one per operation
(``run(payload) -> dict``, ``measure(payload) -> dict``). The GPU handler is
:mod:`tiledispatch.server.gpu_handler`; tests substitute a CPU one to exercise this machinery.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import logging
import multiprocessing
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from .errors import DeadlineExceeded, KernelFault, ServiceError

log = logging.getLogger("tiledispatch.server.worker")

#: Exit status a handler asks for when the device is unusable after an error (sticky CUDA error).
FATAL_EXIT = 70


class WorkerError(ServiceError):
    """A handler raised (the kernel failed to launch or run); the worker is still healthy."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(f"{kind}: {message}")


#: Payload and answer values at least this large (numpy arrays, bytes-like) travel through shared memory.
SHM_MIN_BYTES = 64 * 1024
#: Name prefix of the shared-memory segments (``/dev/shm/<prefix><server pid>-...`` on Linux).
SHM_PREFIX = "tiledispatch-"
_ALIGN = 64
_SEGMENT_QUANTUM = 1 << 20


@dataclass(frozen=True)
class ShmRef:
    """Where one value lies in a segment (what the pipe carries instead of the bytes)."""

    offset: int
    dtype: str
    shape: tuple[int, ...]


def _as_array(value: Any) -> np.ndarray | None:
    """``value`` as an array if it should travel through shared memory, else ``None``."""
    if isinstance(value, np.ndarray):
        array = value
        if array.dtype.hasobject or array.dtype.fields is not None:
            return None
    elif isinstance(value, (bytes, bytearray, memoryview)):
        try:
            array = np.frombuffer(value, dtype=np.uint8)
        except (ValueError, TypeError):  # a non-contiguous memoryview: let pickle take it
            return None
    else:
        return None
    return array if array.nbytes >= SHM_MIN_BYTES else None


def _layout(mapping: dict) -> tuple[dict[str, np.ndarray], list[int], int]:
    """The values of ``mapping`` that go to shared memory, their offsets and the bytes needed."""
    arrays: dict[str, np.ndarray] = {}
    offsets: list[int] = []
    end = 0
    for key, value in mapping.items():
        array = _as_array(value)
        if array is not None:
            arrays[key] = array
            offsets.append(end)
            end += -(-array.nbytes // _ALIGN) * _ALIGN
    return arrays, offsets, end


def _put(mapping: dict, arrays: dict[str, np.ndarray], offsets: list[int], buf: memoryview) -> dict:
    """Copy ``arrays`` into ``buf``; the mapping with a :class:`ShmRef` in place of each."""
    out = dict(mapping)
    for (key, array), offset in zip(arrays.items(), offsets):
        np.copyto(np.ndarray(array.shape, array.dtype, buffer=buf, offset=offset), array, casting="no")
        out[key] = ShmRef(offset, array.dtype.str, tuple(array.shape))
    return out


def _view(ref: ShmRef, buf: memoryview) -> np.ndarray:
    return np.ndarray(ref.shape, np.dtype(ref.dtype), buffer=buf, offset=ref.offset)


def _reserve(segment: shared_memory.SharedMemory, size: int) -> None:
    """Allocate the segment's pages now: a full /dev/shm then fails here with ENOSPC instead of
    killing the server with SIGBUS when a tensor is copied in."""
    fd = getattr(segment, "_fd", -1)
    if fd < 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            raise
        # EOPNOTSUPP and the like: a file system that cannot reserve; nothing to do


def _close(segment: shared_memory.SharedMemory | None, *, unlink: bool) -> None:
    if segment is None:
        return
    with contextlib.suppress(BufferError):  # a view still alive somewhere: the mapping goes with it
        segment.close()
    if unlink:
        with contextlib.suppress(FileNotFoundError):
            segment.unlink()


class _ChildSegments:
    """The child's side: segments attached by name (the parent creates and unlinks them)."""

    def __init__(self) -> None:
        self.attached: dict[str, shared_memory.SharedMemory] = {}

    def _attach(self, name: str) -> shared_memory.SharedMemory:
        segment = self.attached.get(name)
        if segment is None:
            segment = shared_memory.SharedMemory(name=name)
            self.attached[name] = segment
        return segment

    def _forget(self, keep: set[str]) -> None:
        for name in [n for n in self.attached if n not in keep]:
            _close(self.attached.pop(name), unlink=False)

    def unpack(self, payload: Any, segment_in: str | None, segment_out: str | None) -> Any:
        self._forget({n for n in (segment_in, segment_out) if n})  # replaced segments: let go of them
        if segment_in is None or not isinstance(payload, dict) or \
                not any(isinstance(value, ShmRef) for value in payload.values()):
            return payload
        buf = self._attach(segment_in).buf
        return {key: _view(value, buf) if isinstance(value, ShmRef) else value for key, value in payload.items()}

    def pack(self, answer: Any, segment_out: str | None, conn) -> tuple[Any, str | None]:
        """The answer with its large values in the ``out`` segment (asking the parent for a larger
        one first when it does not fit)."""
        if not isinstance(answer, dict):
            return answer, None
        arrays, offsets, needed = _layout(answer)
        if not arrays:
            return answer, None
        segment = self._attach(segment_out) if segment_out else None
        if segment is None or segment.size < needed:
            conn.send(("grow", needed))
            message = conn.recv()
            if not (isinstance(message, tuple) and message[0] == "segment" and message[1]):
                return answer, None  # the parent has no shared memory to give: the pipe carries it
            segment = self._attach(message[1])
            segment_out = message[1]
        return _put(answer, arrays, offsets, segment.buf), segment_out

    def close(self) -> None:
        self._forget(set())


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
    segments = _ChildSegments()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            segments.close()
            return
        op, payload, segment_in, segment_out = message
        try:
            answer = getattr(handler, op)(segments.unpack(payload, segment_in, segment_out))
            answer, used = segments.pack(answer, segment_out, conn)
            conn.send(("ok", (answer, used)))
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
        self.segments: dict[str, shared_memory.SharedMemory | None] = {"in": None, "out": None}
        self._serial = 0

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

    def _segment(self, role: str, nbytes: int) -> shared_memory.SharedMemory:
        """This worker's ``role`` segment, replaced by a larger one if it holds less than ``nbytes``."""
        segment = self.segments[role]
        if segment is None or segment.size < nbytes:
            _close(segment, unlink=True)
            self.segments[role] = None
            self._serial += 1
            name = f"{SHM_PREFIX}{os.getpid()}-{self.device}-{role}{self._serial}-{secrets.token_hex(4)}"
            size = max(_SEGMENT_QUANTUM, -(-nbytes // _SEGMENT_QUANTUM) * _SEGMENT_QUANTUM)
            segment = shared_memory.SharedMemory(name=name, create=True, size=size)
            try:
                _reserve(segment, size)
            except OSError:
                _close(segment, unlink=True)
                raise
            self.segments[role] = segment
        return segment

    def release_segments(self) -> None:
        """Unlink this worker's shared memory (the child is gone, or about to be)."""
        for role in self.segments:
            _close(self.segments[role], unlink=True)
            self.segments[role] = None

    def _pack(self, payload: Any) -> Any:
        if not isinstance(payload, dict):
            return payload
        arrays, offsets, needed = _layout(payload)
        if not arrays:
            return payload
        try:
            segment = self._segment("in", needed)
        except OSError as error:  # /dev/shm too small (a container's default 64 MiB): slower, still works
            log.warning("no shared memory for the GPU worker's tensors; they go through the pipe",
                        extra={"device": self.device, "bytes": needed, "error": str(error)})
            return payload
        return _put(payload, arrays, offsets, segment.buf)

    def _unpack(self, answer: Any, used: str | None) -> Any:
        segment = self.segments["out"]
        if used is None or segment is None or not isinstance(answer, dict):
            return answer
        return {key: _view(value, segment.buf).copy() if isinstance(value, ShmRef) else value
                for key, value in answer.items()}

    def _grow_out(self, nbytes: int) -> str | None:
        try:
            return self._segment("out", nbytes).name
        except OSError as error:
            log.warning("no shared memory for the GPU worker's answer; it comes through the pipe",
                        extra={"device": self.device, "bytes": nbytes, "error": str(error)})
            return None

    def call(self, op: str, payload: dict, timeout_s: float) -> Any:
        """The handler's answer; raises ``_Died`` when the process died or hung."""
        deadline = time.monotonic() + timeout_s
        payload = self._pack(payload)
        names = [segment.name if segment is not None else None for segment in self.segments.values()]
        try:
            self.conn.send((op, payload, *names))  # the current segments, used or not: the child keeps them mapped
            del payload  # the references only; the bytes are in the segment
            while True:
                if not self.conn.poll(max(0.0, deadline - time.monotonic())):
                    raise _Died(f"hung (no answer within {timeout_s:.0f}s)")
                kind, value = self.conn.recv()
                if kind != "grow":
                    break
                self.conn.send(("segment", self._grow_out(int(value))))
        except (EOFError, OSError, BrokenPipeError):
            self.process.join(timeout=5)
            raise _Died(f"crashed its GPU worker (exit status {self.process.exitcode})") from None
        if kind == "ok":
            return self._unpack(*value)
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
        self.release_segments()


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
