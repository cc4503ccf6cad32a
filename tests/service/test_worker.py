"""GPU worker processes, exercised with a CPU handler: spawn, crash and hang isolation, restarts."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tiledispatch.server.errors import KernelFault
from tiledispatch.server.worker import WorkerError, WorkerPool

from .conftest import TINY
from .harness import FAKE_HANDLER

PAYLOAD = {"problem": {**TINY, "input_size": [5, 6], "filter_size": [3, 2], "stride": [2, 1], "dilation": [1, 2],
                       "pad_begin": [1, 0], "pad_end": [0, 2]}, "repeats": 0}


@pytest.fixture(scope="module")
def pool():
    restarts = []
    faults = "crash:k_crash,hang:k_hang,fatal:k_fatal,error:k_error"
    workers = WorkerPool([0], FAKE_HANDLER, {"faults": faults}, timeout_s=2.0, on_restart=restarts.append)
    hellos = workers.start()
    assert hellos[0]["name"] == "Fake GPU (tests)"
    workers.restarts = restarts
    yield workers
    workers.stop()


def measure(pool, kernel):
    return pool.call("measure", {**PAYLOAD, "kernel": kernel}, kernel)


def pid(pool):
    return pool.workers[0].wait_ready(60)["pid"]


def test_measure(pool):
    assert measure(pool, "k_ok")["status"] == "ok"


@pytest.mark.parametrize("kernel, words", [("k_crash", "crashed its GPU worker (exit status 11)"),
                                           ("k_hang", "hung"), ("k_fatal", "left the GPU unusable")])
def test_fault_kills_only_the_worker_which_restarts(pool, kernel, words):
    before, restarts = pid(pool), len(pool.restarts)
    with pytest.raises(KernelFault) as caught:
        measure(pool, kernel)
    assert caught.value.kernel == kernel and words in caught.value.message
    assert caught.value.field == "kernel" and "quarantined" in caught.value.message
    assert len(pool.restarts) == restarts + 1
    assert measure(pool, "k_ok")["status"] == "ok"  # the fresh worker serves the next call
    assert pid(pool) != before


def test_a_worker_killed_while_idle_is_replaced_without_blame(pool):
    before, restarts = pid(pool), len(pool.restarts)
    os.kill(before, signal.SIGKILL)
    pool.workers[0].process.join(10)
    assert measure(pool, "k_ok")["status"] == "ok"
    assert pid(pool) != before and len(pool.restarts) == restarts + 1


def test_handler_error_keeps_the_worker(pool):
    before = pid(pool)
    with pytest.raises(WorkerError, match="launch failed"):
        measure(pool, "k_error")
    assert pid(pool) == before


def test_stop_is_prompt():
    workers = WorkerPool([0, 1], FAKE_HANDLER, {}, timeout_s=2.0)
    workers.start()
    start = time.monotonic()
    workers.stop()
    assert time.monotonic() - start < 5
    assert all(not w.process.is_alive() for w in workers.workers)


def test_handler_that_cannot_start_is_reported():
    workers = WorkerPool([0], "tests.service.fake_gpu:NoSuchHandler", {}, timeout_s=2.0)
    with pytest.raises(RuntimeError, match="failed to start: AttributeError"):
        workers.start()
    workers.stop()
