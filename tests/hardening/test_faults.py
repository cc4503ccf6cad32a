"""Issue 7.4: faults. A GPU worker killed mid-Benchmark, a corrupt model, part of the artifact cache
deleted, the disk under the tuning database filled, the server SIGKILLed mid-write: each survived as
docs/security.md documents, and nothing already recorded is lost (rows counted before and after,
``PRAGMA integrity_check`` after)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.service.conftest import TINY
from tests.service.harness import FAKE_HANDLER, ServerProcess, free_port, newest_models, settings_for
from tiledispatch.client import Client, FailedPreconditionError, ResourceExhaustedError
from tiledispatch.client.errors import TileDispatchError
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.registry import manifest_path
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import supported_configs
from tiledispatch.server.tuning_db import DatabaseFull, MeasurementRow, TuningDB

from .servers import gpu_workers, integrity, metric, rows, running_server, serving

SLOW = "tests.hardening.slow_gpu:SlowGpuHandler"


def _supported(n: int) -> list[str]:
    problem = ConvProblem(**TINY)
    return sorted(c.name for c in supported_configs(problem, rule_set_configs(
        "default", "sm_90", directions=[problem.direction], dtypes=[problem.dtype], ndims=[problem.ndim])))[:n]


# ---- a GPU worker killed mid-Benchmark -----------------------------------------------------------
def test_worker_killed_mid_benchmark(tmp_path):
    server = ServerProcess(tmp_path, "--gpus", "0", "--worker-handler", SLOW, "--kernel-timeout-s", "20",
                           "--models-dir", str(newest_models(tmp_path)), env={"TILEDISPATCH_SLOW_GPU_S": "0.5"}).start()
    db = Path(server.args[server.args.index("--db") + 1])
    try:
        with Client(server.target, retries=0, timeout=120) as client:
            list(client.benchmark(TINY, top_k=1))
            before = rows(db)
            events, killed = [], []
            for event in client.benchmark({**TINY, "batch": 3}, top_k=4):
                events.append(event)
                if len(events) == 1:  # the second kernel is being measured now
                    time.sleep(0.1)
                    for pid in gpu_workers(server.process.pid):
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
            assert killed
            measurements, summary = events[:-1], events[-1]
            statuses = [m.status for m in measurements]
            assert len(measurements) == 4 and summary.measured == 4, statuses  # the stream went on
            assert statuses.count("fault") == 1 and statuses[1] == "fault", statuses
            assert "crashed its GPU worker" in measurements[1].message
            assert rows(db) == before + 4  # the fault is recorded too; nothing earlier lost
            assert serving(server.port)
            assert metric(server.metrics_port, "tiledispatch_worker_restarts_total") >= 1
            # The worker was killed from outside, not by the kernel: an operator lifts the quarantine.
            blamed = measurements[1].kernel
            assert {k["name"]: k for k in client.list_kernels(problem=TINY)}[blamed]["quarantined"]
            assert client.lift_quarantine(blamed)["was_quarantined"]
            assert client.run(TINY, kernel=blamed, generate_inputs=True).executed_on == "gpu"
        assert integrity(db) == "ok"
    finally:
        server.stop()


# ---- a corrupt model -----------------------------------------------------------------------------
def test_corrupt_model_is_reported_and_skipped(tmp_path):
    models = tmp_path / "models"
    for name, spec, model in (("broken", "{not json", b"\x00\xff garbage"),
                              ("truncated", '{"features": [', "tree\nversion=v4\nnum_class=1\n"),
                              ("empty", "", "")):
        folder = models / name / "1"
        folder.mkdir(parents=True)
        (folder / "feature_spec.json").write_text(spec)
        (folder / "model.txt").write_bytes(model if isinstance(model, bytes) else model.encode())
        (folder / "train_manifest.json").write_text("[")
    server = ServerProcess(tmp_path, "--gpus", "none", "--models-dir", str(models)).start()
    try:
        with Client(server.target, retries=0) as client:
            assert [m["name"] for m in client.list_models()] == ["analytic"]
            assert client.select(TINY).source == "analytic"
            assert client.run(TINY, generate_inputs=True).executed_on == "cpu_reference"
        log = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
        reported = [e for e in log if e["msg"] in ("model failed to load", "trained models found but no loader")]
        assert reported, "the corrupt models were not reported"
        assert serving(server.port)
    finally:
        assert server.stop() == 0


# ---- part of the artifact cache deleted ----------------------------------------------------------
@pytest.mark.parametrize("damage", ["manifest deleted", "manifest truncated"])
def test_damaged_registry_manifest_falls_back_to_the_rule_set(tmp_path, damage):
    registry = tmp_path / "registry"
    (registry / "artifacts" / "0123").mkdir(parents=True)
    path = manifest_path(registry, "sm_90")
    path.write_text(json.dumps({"kernels": {name: {"status": "ok"} for name in _supported(3)}}))
    if damage == "manifest deleted":
        path.unlink()
    else:
        path.write_text(path.read_text()[:25])
    with running_server(settings_for(tmp_path, registry_dir=registry)) as port, \
            Client(f"127.0.0.1:{port}", retries=0) as client:
        info = client.info()
        assert info["registry_source"] == "rule_set:default" and info["registry_size"] > 3
        assert client.select(TINY).candidates


def test_deleted_artifacts_give_a_clear_error_not_a_crash(tmp_path):
    registry = tmp_path / "registry"
    kernels = _supported(3)
    manifest_path(registry, "sm_90").parent.mkdir(parents=True)
    manifest_path(registry, "sm_90").write_text(json.dumps({"kernels": {k: {"status": "ok"} for k in kernels}}))
    (registry / "artifacts").mkdir()  # every kernel's artifacts gone
    settings = settings_for(tmp_path, registry_dir=registry, gpus="0",
                            worker_handler="tests.hardening.registry_gpu:RegistryGpuHandler", kernel_timeout_s=60.0)
    with running_server(settings) as port, Client(f"127.0.0.1:{port}", retries=0, timeout=120) as client:
        assert client.info()["registry_source"] == f"registry:{registry}" and client.info()["registry_size"] == 3
        with pytest.raises(FailedPreconditionError) as caught:
            client.run(TINY, kernel=kernels[0], generate_inputs=True)
        assert kernels[0] in caught.value.message and "rebuild the registry" in caught.value.message
        assert caught.value.field == "kernel"
        assert not any(k["quarantined"] for k in client.list_kernels(problem=TINY))  # not the kernel's fault
        assert serving(port) and client.select(TINY).candidates


# ---- the disk under the tuning database fills up -------------------------------------------------
@contextlib.contextmanager
def small_disk(path: Path, size: str = "384k"):
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip()}); "
                    "test_disk_full_simulated covers the same path")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC
    return filler


def test_disk_full_under_the_tuning_database(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        settings = settings_for(tmp_path, db=disk / "tuning.sqlite", gpus="0", worker_handler=FAKE_HANDLER,
                                kernel_timeout_s=10.0)
        with running_server(settings) as port, Client(f"127.0.0.1:{port}", retries=0, timeout=60) as client:
            for batch in (1, 2):
                list(client.benchmark({**TINY, "batch": batch}, top_k=2))
            recorded = rows(settings.db)
            assert recorded == 4
            filler = _fill(disk)
            acknowledged, refused = 0, None
            for batch in range(3, 60):
                try:
                    events = list(client.benchmark({**TINY, "batch": batch}, top_k=2))
                    acknowledged += len(events) - 1
                except ResourceExhaustedError as error:
                    refused = error
                    break
            assert refused is not None and "disk is full" in refused.message, "the full disk was never reported"
            assert serving(port) and client.select(TINY).candidates  # reads and selection go on
            assert rows(settings.db) == recorded + acknowledged  # every acknowledged row, no more
            filler.unlink()  # space again: writes resume
            list(client.benchmark({**TINY, "batch": 99}, top_k=2))
            assert rows(settings.db) == recorded + acknowledged + 2
        assert integrity(settings.db) == "ok"


def test_disk_full_simulated(tmp_path):
    """The same path without a mount: SQLite's page limit makes the file 'full' (SQLITE_FULL)."""
    db = TuningDB(tmp_path / "t.sqlite")
    row = MeasurementRow("k", "{}", "kern", "sm_90", "h200", "gpu", 1.0, 1.0, 1.0, "ok", 0.0, "", "benchmark")
    db.record([row] * 10)
    pages = db._conn.execute("PRAGMA page_count").fetchone()[0]
    db._conn.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(DatabaseFull, match="disk is full"):
        db.record([dataclasses.replace(row, error="x" * 50_000)] * 50)
    assert db.count() == 10  # rolled back as a whole; nothing stored lost
    db.record([row])  # a small write still fits
    assert db.count() == 11
    db.quarantine("kern", "h200", "x")  # the connection is usable after the failure
    db.close()
    assert integrity(tmp_path / "t.sqlite") == "ok"


# ---- SIGKILL mid-write ---------------------------------------------------------------------------
def test_sigkill_mid_write_loses_nothing_acknowledged(tmp_path):
    db = tmp_path / "kill.sqlite"
    server = ServerProcess(tmp_path, "--gpus", "0", "--worker-handler", FAKE_HANDLER, "--db", str(db),
                           "--models-dir", str(newest_models(tmp_path))).start()
    acknowledged = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def writer(i: int) -> None:
        with Client(server.target, retries=0, timeout=30) as client:
            batch = 1 + i
            while not stop.is_set():
                try:
                    for event in client.benchmark({**TINY, "batch": batch}, top_k=3):
                        if hasattr(event, "status"):
                            with lock:
                                acknowledged[0] += 1
                except TileDispatchError:
                    return
                batch += 4

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)
    seen_before = rows(db)
    workers = gpu_workers(server.process.pid)
    time.sleep(1.0)
    server.process.send_signal(signal.SIGKILL)  # mid-write: four clients are recording measurements
    server.process.wait(10)
    stop.set()
    for thread in threads:
        thread.join(30)
    server.stop()
    after = rows(db)
    assert seen_before > 0 and after >= seen_before, (seen_before, after)
    assert after >= acknowledged[0], (after, acknowledged[0])  # every measurement a client saw is stored
    assert integrity(db) == "ok"
    deadline = time.monotonic() + 15
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)  # orphaned workers see their pipe close and exit
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists() and
                Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"], "GPU workers outlived the server"
    again = ServerProcess(tmp_path, "--gpus", "none", "--db", str(db), "--models-dir", str(newest_models(tmp_path)),
                          port=free_port()).start()
    try:
        with Client(again.target, retries=0) as client:
            assert client.info()["tuning_db_rows"] == after
    finally:
        again.stop()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == after
