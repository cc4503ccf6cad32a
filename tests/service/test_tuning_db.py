"""The tuning database: durable settings, atomic writes, latest-per-kernel lookups, export."""

from __future__ import annotations

import io
import json
import sqlite3

import pytest

from tiledispatch.server.tuning_db import MeasurementRow, TuningDB


def row(kernel: str, time_us: float | None, status: str = "ok", key: str = "k1", device: str = "h200",
        graph: float | None = None) -> MeasurementRow:
    return MeasurementRow(problem_key=key, problem_json="{}", kernel=kernel, arch="sm_90", device=device,
                          gpu_name="NVIDIA H200", median_us=time_us, min_us=time_us, graph_us=graph, status=status,
                          relative_error=1e-3, error="", source="benchmark")


@pytest.fixture
def db(tmp_path):
    database = TuningDB(tmp_path / "sub" / "tuning.sqlite")
    yield database
    database.close()


def test_wal_and_full_sync(db):
    with sqlite3.connect(db.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_best_times_use_each_kernels_latest_measurement(db):
    db.record([row("a", 30.0), row("b", 20.0), row("c", 10.0)])
    db.record([row("c", None, status="wrong")])  # c turned wrong: it drops out
    db.record([row("b", 25.0, graph=5.0)])         # graph time wins where measured
    db.record([row("a", 1.0, key="other"), row("a", 1.0, device="h100_sxm")])
    best = db.best_times("k1", "h200")
    assert [(b.kernel, b.time_us) for b in best] == [("b", 5.0), ("a", 30.0)]
    assert db.best_times("missing", "h200") == []


def test_a_failed_batch_writes_nothing(db):
    db.record([row("a", 1.0)])
    with pytest.raises(sqlite3.IntegrityError):
        db.record([row("b", 1.0), row(None, 2.0)])  # NOT NULL kernel fails the second row
    assert db.count() == 1


def test_survives_reopen_and_quarantine_persists(tmp_path):
    path = tmp_path / "t.sqlite"
    first = TuningDB(path)
    first.record([row("a", 1.0)])
    first.quarantine("gconv_x", "h200", "crashed")
    first.close()
    again = TuningDB(path)
    assert again.count() == 1
    assert again.quarantined("h200") == {"gconv_x": "crashed"}
    assert again.quarantined("h100_sxm") == {}
    assert again.release("gconv_x", "h200") and again.quarantined("h200") == {}
    again.close()


def test_export(db):
    db.record([row("a", 1.0), row("b", 2.0, device="h100_sxm")])
    rows = list(db.export())
    assert [r["kernel"] for r in rows] == ["a", "b"] and rows[0]["gpu_name"] == "NVIDIA H200"
    assert [r["kernel"] for r in db.export(device="h100_sxm")] == ["b"]
    out = io.StringIO()
    assert db.export_jsonl(out) == 2
    assert json.loads(out.getvalue().splitlines()[0])["median_us"] == 1.0


def test_memory_database_exports_too():
    db = TuningDB(":memory:")
    db.record([row("a", 1.0)])
    assert [r["kernel"] for r in db.export()] == ["a"]
    db.close()


def built(kernel: str, time_us: float, build: str, status: str = "ok") -> MeasurementRow:
    return MeasurementRow(problem_key="k1", problem_json="{}", kernel=kernel, arch="sm_90", device="h200",
                          gpu_name="NVIDIA H200", median_us=time_us, min_us=time_us, graph_us=time_us, status=status,
                          relative_error=1e-3, error="", source="benchmark", kernel_build=build)


def test_only_measurements_of_the_builds_in_use_count(db):
    db.record([built("a", 10.0, "old"), built("b", 20.0, "b1"), row("c", 5.0)])  # c: no build recorded
    db.record([built("a", 40.0, "new"), built("b", 30.0, "b0")])                  # b's latest is another build
    current = {"a": "new", "b": "b1", "c": "c1"}
    assert [(b.kernel, b.time_us) for b in db.best_times("k1", "h200", current)] == [("b", 20.0), ("a", 40.0)]
    # a fault of the build in use drops it; without builds (no registry) every latest row counts, as before
    db.record([built("b", 0.0, "b1", status="fault")])
    assert [b.kernel for b in db.best_times("k1", "h200", current)] == ["a"]
    assert [b.kernel for b in db.best_times("k1", "h200")] == ["c", "a"]


def test_a_schema_1_file_gains_kernel_build_and_keeps_its_rows(tmp_path):
    path = tmp_path / "v1.sqlite"
    with sqlite3.connect(path) as conn:  # the schema-1 layout, one row
        conn.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "INSERT INTO meta VALUES ('schema_version', '1');"
            "CREATE TABLE measurements (id INTEGER PRIMARY KEY AUTOINCREMENT, problem_key TEXT NOT NULL,"
            " problem_json TEXT NOT NULL, kernel TEXT NOT NULL, arch TEXT NOT NULL, device TEXT NOT NULL,"
            " gpu_name TEXT NOT NULL, median_us REAL, min_us REAL, graph_us REAL, status TEXT NOT NULL,"
            " relative_error REAL, error TEXT NOT NULL DEFAULT '', source TEXT NOT NULL, measured_at REAL NOT NULL,"
            " server_version TEXT NOT NULL DEFAULT '');"
            "INSERT INTO measurements (problem_key, problem_json, kernel, arch, device, gpu_name, median_us, status,"
            " source, measured_at)"
            " VALUES ('k1', '{}', 'a', 'sm_90', 'h200', 'NVIDIA H200', 7.0, 'ok', 'benchmark', 1);")
    database = TuningDB(path)
    try:
        assert database._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "2"
        [old] = list(database.export())
        assert old["kernel_build"] == "" and old["median_us"] == 7.0
        assert [b.kernel for b in database.best_times("k1", "h200")] == ["a"]
        assert database.best_times("k1", "h200", {"a": "x"}) == []  # its build is not known: not evidence
        database.record([built("a", 9.0, "x")])
        assert [(b.kernel, b.time_us) for b in database.best_times("k1", "h200", {"a": "x"})] == [("a", 9.0)]
    finally:
        database.close()
