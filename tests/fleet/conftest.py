"""A fleet of three ``tiledispatch serve`` processes on loopback, each with one fake-GPU worker
(tests/service/fake_gpu.py), started the way the README starts the service."""

from __future__ import annotations

import re
import threading
import urllib.request

import pytest

from ..service.harness import FAKE_HANDLER, ServerProcess, newest_models

REPLICAS = 3
_SAMPLE = re.compile(r'^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.MULTILINE)


def scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as answer:
        return answer.read().decode()


def rpc_count(server: ServerProcess, method: str, code: str = "OK") -> int:
    """``tiledispatch_rpc_requests_total{method, code}`` of one replica."""
    for match in _SAMPLE.finditer(scrape(server)):
        if match["name"] == "tiledispatch_rpc_requests_total" and \
                f'method="{method}"' in match["labels"] and f'code="{code}"' in match["labels"]:
            return int(float(match["value"]))
    return 0


def start_all(servers: list[ServerProcess]) -> None:
    """Start the servers concurrently (each start waits for SERVING)."""
    errors: list[BaseException] = []

    def start(server: ServerProcess) -> None:
        try:
            server.start(timeout=120)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        for server in servers:
            server.stop()
        raise errors[0]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Three replicas: a list of ServerProcess (a test may kill one: it is the module's last)."""
    tmp = tmp_path_factory.mktemp("fleet")
    servers = [ServerProcess(tmp, "--gpus", "0", "--arch", "sm_90", "--worker-handler", FAKE_HANDLER,
                             "--threads", "4", "--grace-s", "1", "--models-dir", str(newest_models(tmp)))
               for _ in range(REPLICAS)]
    start_all(servers)
    yield servers
    for server in servers:
        server.stop()
