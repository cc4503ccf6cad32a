"""Servers for the hardening tests: in-process servers that may speak TLS, and helpers that look
at a server process from outside (its RSS and open file descriptors from /proc, its rows)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.service.harness import SERVICE
from tiledispatch.client import Tls
from tiledispatch.server.config import Settings
from tiledispatch.server.main import serve


def channel(port: int, tls: Tls | None = None) -> grpc.Channel:
    target = f"127.0.0.1:{port}"
    return grpc.secure_channel(target, tls.credentials()) if tls else grpc.insecure_channel(target)


def serving(port: int, tls: Tls | None = None, timeout: float = 2.0) -> bool:
    with channel(port, tls) as chan:
        try:
            status = health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(service=SERVICE),
                                                            timeout=timeout).status
        except grpc.RpcError:
            return False
    return status == health_pb2.HealthCheckResponse.SERVING


@contextlib.contextmanager
def running_server(settings: Settings, tls: Tls | None = None, timeout: float = 90.0) -> Iterator[int]:
    """The server in a thread of this process, reached over ``tls`` (``None``: plaintext)."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def runner() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(serve(settings, stop=stop))

    thread = threading.Thread(target=runner, name="hardening-server", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while not serving(settings.port, tls):
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not become SERVING")
            time.sleep(0.1)
        yield settings.port
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()


def metric(port: int, name: str) -> float:
    """Sum of every sample of a metric (all label sets) on a /metrics page."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def rows(db: Path, table: str = "measurements") -> int:
    """Rows of a table, read through a separate connection (as the training pipeline would)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def integrity(db: Path) -> str:
    with contextlib.closing(sqlite3.connect(str(db), timeout=30)) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def gpu_workers(pid: int) -> list[int]:
    """The spawned GPU worker processes of a server process."""
    found = []
    for child in children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "spawn_main" in cmdline:
            found.append(child)
    return found


def report_path(name: str) -> Path:
    """Where a hardening test writes its JSON report: ``bench/results/<name>`` when
    ``TILEDISPATCH_WRITE_REPORTS=1`` (a measuring run whose report is committed), else a temporary
    folder, so an ordinary test run leaves the committed reports alone."""
    import tempfile

    if os.environ.get("TILEDISPATCH_WRITE_REPORTS") == "1":
        return Path(__file__).resolve().parents[2] / "bench" / "results" / name
    return Path(tempfile.gettempdir()) / "tiledispatch-reports" / name
