"""Fixtures of the service tests: servers (in-process and subprocess) and small problems."""

from __future__ import annotations

import os

import pytest

from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import supported_configs

from .harness import FAKE_HANDLER, ServerProcess, free_port, in_process_server, settings_for

#: A tiny grouped problem with odd sizes and asymmetric pads: cheap for the CPU reference.
TINY = dict(direction="fwd", dtype="bf16", batch=2, groups=3, in_channels=6, out_channels=9, input_size=(5, 6),
            filter_size=(3, 2), stride=(2, 1), dilation=(1, 2), pad_begin=(1, 0), pad_end=(0, 2))


@pytest.fixture
def tiny_problem() -> ConvProblem:
    return ConvProblem(**TINY)


@pytest.fixture(scope="module")
def cpu_server(tmp_path_factory):
    """An in-process server without a GPU: (port, settings)."""
    settings = settings_for(tmp_path_factory.mktemp("cpu"))
    with in_process_server(settings) as (port, _):
        yield port, settings


def crashing_kernel() -> str:
    """A kernel that supports TINY but is not its first choice: the fake GPU crashes on it."""
    problem = ConvProblem(**TINY)
    configs = supported_configs(problem, rule_set_configs("default", "sm_90", directions=[problem.direction],
                                                          dtypes=[problem.dtype], ndims=[problem.ndim]))
    return sorted(c.name for c in configs)[-1]


@pytest.fixture(scope="module")
def fake_gpu_server(tmp_path_factory):
    """An in-process server with one worker whose handler fakes a GPU on the CPU (and crashes on
    :func:`crashing_kernel`)."""
    settings = settings_for(tmp_path_factory.mktemp("fakegpu"), gpus="0", worker_handler=FAKE_HANDLER,
                            kernel_timeout_s=5.0, metrics_port=free_port())
    previous = os.environ.get("TILEDISPATCH_FAKE_FAULTS")
    os.environ["TILEDISPATCH_FAKE_FAULTS"] = f"crash:{crashing_kernel()}"  # read by the spawned worker
    try:
        with in_process_server(settings) as (port, _):
            yield port, settings
    finally:
        if previous is None:
            os.environ.pop("TILEDISPATCH_FAKE_FAULTS", None)
        else:
            os.environ["TILEDISPATCH_FAKE_FAULTS"] = previous


@pytest.fixture(scope="session")
def server_process(tmp_path_factory):
    """``tiledispatch serve`` as the README starts it (default --gpus auto: probes and finds none here)."""
    server = ServerProcess(tmp_path_factory.mktemp("proc"), "--max-message-mb", "4").start()
    yield server
    server.stop()
