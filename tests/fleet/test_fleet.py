"""Three replicas behind the client's round_robin: the load spreads over them, a replica killed
mid-run costs no call (the ones in flight are retried elsewhere), and a benchmark sweep is sharded
over them through the Benchmark RPC. Loopback only; bounded in calls and time."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from bench.fleet_sweep import sweep
from tiledispatch.client import Client

from ..service.harness import free_port
from .conftest import REPLICAS, rpc_count

#: Small problems (cheap for the fake GPU and the CPU reference); batch varies so keys differ.
PROBLEMS = [dict(direction="fwd", dtype="bf16", batch=1 + i, groups=2, in_channels=8, out_channels=8,
                 input_size=[6, 6], filter_size=[3, 3], pad_begin=[1, 1], pad_end=[1, 1]) for i in range(9)]


class CountingClient(Client):
    """A Client that counts its retries (UNAVAILABLE answers it tried again)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.retried = 0
        self._count_lock = threading.Lock()

    def _retry_or_raise(self, error, attempt, deadline):
        super()._retry_or_raise(error, attempt, deadline)  # raises when it will not retry
        with self._count_lock:
            self.retried += 1


def _hammer(client: Client, stop: threading.Event, threads: int, log: dict) -> list[threading.Thread]:
    """``threads`` loops of Select and Run until ``stop``; successes and failures go to ``log``."""
    def loop(n: int) -> None:
        i = n
        while not stop.is_set():
            problem = PROBLEMS[i % len(PROBLEMS)]
            try:
                if i % 4 == 0:
                    client.run(problem, generate_inputs=True, timeout=20)
                else:
                    client.select(problem, top_k=3, timeout=20)
                log["ok"].append(time.monotonic())
            except Exception as error:  # every failure the caller would see
                log["failed"].append(repr(error))
            i += threads

    workers = [threading.Thread(target=loop, args=(n,), daemon=True) for n in range(threads)]
    for worker in workers:
        worker.start()
    return workers


def test_round_robin_spreads_the_load(fleet):
    calls = 300
    before = [rpc_count(s, "Select") for s in fleet]
    with Client([s.target for s in fleet]) as client:
        client.info()  # connect every subchannel first
        time.sleep(0.3)
        started = time.monotonic()
        for i in range(calls):
            client.select(PROBLEMS[i % len(PROBLEMS)], top_k=3)
        elapsed = time.monotonic() - started
    served = [rpc_count(s, "Select") - b for s, b in zip(fleet, before)]
    print(f"\nround_robin: {calls} Selects in {elapsed:.2f}s ({calls / elapsed:.0f}/s, one caller), "
          f"per replica {served}")
    assert sum(served) == calls
    assert min(served) >= calls // REPLICAS // 2, served  # round_robin: about a third each


def test_benchmark_sweep_sharded_over_replicas(fleet):
    before = [rpc_count(s, "Benchmark") for s in fleet]
    dead = f"127.0.0.1:{free_port()}"  # a replica that is gone: its share goes to the others
    started = time.monotonic()
    results = sweep([*(s.target for s in fleet), dead], PROBLEMS, top_k=3, timeout=60)
    elapsed = time.monotonic() - started
    assert [r.error for r in results] == [""] * len(PROBLEMS)
    assert all(r.summary and r.summary["measured"] == 3 and len(r.measurements) == 3 for r in results)
    assert all(r.summary["selection_efficiency"] > 0 for r in results)
    by_replica = {s.target: sum(r.replica == s.target for r in results) for s in fleet}
    assert dead not in {r.replica for r in results}
    assert all(count >= 1 for count in by_replica.values()), by_replica
    served = [rpc_count(s, "Benchmark") - b for s, b in zip(fleet, before)]
    assert served == list(by_replica.values())
    print(f"\nsweep: {len(PROBLEMS)} problems x top-3 in {elapsed:.2f}s, per replica {served}")


def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as handle:
            out += [int(p) for p in handle.read().split()]
    return out


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs /proc to find the worker processes")
def test_replica_killed_mid_run_costs_no_call(fleet):
    threads = 6
    victim = fleet[1]
    workers_of_victim = _children(victim.process.pid)
    log: dict = {"ok": [], "failed": []}
    stop = threading.Event()
    with CountingClient([s.target for s in fleet], retries=6, backoff_s=0.02) as client:
        client.info()
        time.sleep(0.3)
        loops = _hammer(client, stop, threads, log)
        time.sleep(1.5)
        before_kill = len(log["ok"])
        survivors_before = [rpc_count(s, "Select") for s in fleet if s is not victim]
        killed_at = time.monotonic()
        victim.process.send_signal(signal.SIGKILL)
        time.sleep(2.5)
        stop.set()
        for loop in loops:
            loop.join(30)
        retried = client.retried
    victim.process.wait(10)
    after_kill = sum(t > killed_at for t in log["ok"])
    survivors_after = [rpc_count(s, "Select") for s in fleet if s is not victim]
    print(f"\nkill: {before_kill} calls in 1.5 s before, {after_kill} in 2.5 s after the SIGKILL "
          f"({threads} callers), {retried} retries, {len(log['failed'])} failures")
    assert log["failed"] == []
    assert retried <= threads  # at most the calls in flight at the kill, each retried once
    assert after_kill > 0 and all(a > b for a, b in zip(survivors_after, survivors_before))
    deadline = time.monotonic() + 10  # the killed server's GPU worker sees EOF and exits
    while any(os.path.exists(f"/proc/{pid}") for pid in workers_of_victim) and time.monotonic() < deadline:
        time.sleep(0.1)
    lingering = [pid for pid in workers_of_victim if os.path.exists(f"/proc/{pid}")]
    for pid in lingering:
        os.kill(pid, signal.SIGKILL)
    assert lingering == [], "the killed replica's worker processes outlived it"
