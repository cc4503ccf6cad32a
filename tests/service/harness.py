"""Servers for the tests: in-process (a thread running the asyncio server) and as a subprocess
started exactly the way the README starts it (``tiledispatch serve ...``)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tiledispatch.server.config import Settings
from tiledispatch.server.main import serve

REPO = Path(__file__).resolve().parents[2]
_SCRIPT = Path(sys.executable).parent / "tiledispatch"
#: The installed ``tiledispatch`` command (the module form where no script was installed).
TILEDISPATCH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "tiledispatch.cli"]
FAKE_HANDLER = "tests.service.fake_gpu:FakeGpuHandler"
SERVICE = "tiledispatch.v1.TileDispatchService"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def health_status(port: int, service: str = SERVICE, timeout: float = 2.0) -> int | None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                             timeout=timeout).status
        except grpc.RpcError:
            return None


def wait_serving(port: int, timeout: float = 90.0, alive=lambda: True) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("server exited before SERVING")
        if health_status(port) == health_pb2.HealthCheckResponse.SERVING:
            return
        time.sleep(0.1)
    raise TimeoutError(f"server on port {port} not SERVING after {timeout}s")


def newest_models(tmp: Path) -> Path:
    """A models folder (``--models-dir``) with only the newest version of each shipped model, linked from
    ``models/artifacts``: every (dtype, direction) has one model name, so the server chooses exactly the
    models it chooses from the whole folder, without loading the older versions first (63 folders, about
    10 s of every server start on the 2-core CI machine). For servers whose tests are not about the model
    list; ``tiledispatch serve`` as the README starts it (tests/service/test_server_process.py) loads them all."""
    from tiledispatch.models.predictor import version_folders

    folder = tmp / "newest-models"
    if folder.exists():
        return folder
    for name, (newest, *_) in version_folders(REPO / "models" / "artifacts").items():
        (folder / name.name).mkdir(parents=True)
        (folder / name.name / newest.name).symlink_to(newest, target_is_directory=True)
    return folder


def settings_for(tmp: Path, **overrides) -> Settings:
    values = dict(host="127.0.0.1", port=free_port(), metrics_port=0, models_dir=tmp / "models",
                  registry_dir=tmp / "registry", db=tmp / "tuning.sqlite", arch="sm_90", gpus="none", threads=4,
                  grace_s=1.0)
    values.update(overrides)
    return Settings(**values)


@contextmanager
def in_process_server(settings: Settings) -> Iterator[tuple[int, dict]]:
    """Run the server in a thread; yields (port, state) where state["servicer"] etc. are not exposed:
    tests talk gRPC to it like any client."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    result: dict = {}

    def runner() -> None:
        asyncio.set_event_loop(loop)
        result["status"] = loop.run_until_complete(serve(settings, stop=stop))

    thread = threading.Thread(target=runner, name="test-server", daemon=True)
    thread.start()
    try:
        wait_serving(settings.port, alive=thread.is_alive)
        yield settings.port, result
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()


class ServerProcess:
    """``tiledispatch serve`` in a subprocess; stderr (JSON logs) goes to a file."""

    def __init__(self, tmp: Path, *args: str, env: dict | None = None, port: int | None = None,
                 metrics_port: int | None = None):
        self.port = port or free_port()
        self.metrics_port = metrics_port or free_port()
        self.log_path = tmp / f"server-{self.port}.log"
        self.args = [*TILEDISPATCH, "serve", "--port", str(self.port), "--metrics-port", str(self.metrics_port),
                     "--db", str(tmp / f"tuning-{self.port}.sqlite"), *args]
        python_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        self.env = {**os.environ, "TILEDISPATCH_HOME": str(tmp / "home"), "PYTHONPATH": python_path, **(env or {})}
        self.process: subprocess.Popen | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> ServerProcess:
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                        cwd=REPO)
        try:
            wait_serving(self.port, timeout, alive=lambda: self.process.poll() is None)
        except Exception:
            self.stop()
            raise RuntimeError(f"server failed to start; log:\n{self.log_path.read_text()[-4000:]}") from None
        return self

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
        return self.process.returncode

    def log(self) -> str:
        return self.log_path.read_text()
