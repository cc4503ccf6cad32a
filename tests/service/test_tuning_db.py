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
