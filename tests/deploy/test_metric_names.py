"""The dashboard, the alert rules and the HPA use only metrics a real server exports, and the
image's health check answers from the gRPC health service."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import urllib.request

import pytest

from tiledispatch.client import Client

from ..service.harness import FAKE_HANDLER, ServerProcess, free_port, newest_models
from .conftest import REPO

PROBLEM = dict(direction="fwd", dtype="bf16", batch=2, groups=2, in_channels=8, out_channels=8, input_size=[6, 6],
               filter_size=[3, 3], pad_begin=[1, 1], pad_end=[1, 1])
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "summary": ("_sum", "_count", "_created", "")}


def _check_dashboard():
    spec = importlib.util.spec_from_file_location("check_dashboard", REPO / "deploy" / "ci" / "check_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def exported_series(exposition: str) -> set[str]:
    """Every series name a scrape can hold, from its ``# TYPE`` lines (labelled metrics are typed
    even before their first sample)."""
    names = set()
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, re.MULTILINE):
        base = family.removesuffix("_total") if kind == "counter" else family
        names |= {base + suffix for suffix in SUFFIXES.get(kind, ("",))}
    return names


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics")
    process = ServerProcess(tmp, "--gpus", "0", "--arch", "sm_90", "--worker-handler", FAKE_HANDLER, "--threads", "2",
                            "--grace-s", "1", "--models-dir", str(newest_models(tmp))).start()
    yield process
    process.stop()


def test_every_referenced_metric_is_exported(server):
    with Client(server.target) as client:  # some traffic, so labelled series have samples too
        client.select(PROBLEM)
        client.run(PROBLEM, generate_inputs=True)
        list(client.benchmark(PROBLEM, top_k=2))
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as answer:
        exported = exported_series(answer.read().decode())
    referenced = _check_dashboard().referenced_metrics()
    assert {"tiledispatch_rpc_requests_total", "tiledispatch_worker_restarts_total"} <= referenced
    assert referenced - exported == set(), f"not exported by the server: {sorted(referenced - exported)}"


def test_healthcheck_script(server):
    script = str(REPO / "deploy" / "docker" / "healthcheck.py")
    serving = subprocess.run([sys.executable, script, server.target], capture_output=True, text=True, timeout=30)
    assert serving.returncode == 0, serving.stderr
    nobody = subprocess.run([sys.executable, script, f"127.0.0.1:{free_port()}"], capture_output=True, text=True,
                            timeout=30)
    assert nobody.returncode == 1 and "UNAVAILABLE" in nobody.stderr
