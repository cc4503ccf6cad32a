"""The tuning database: every measurement the server takes, and the kernels it quarantined.

Embedded SQLite in WAL mode with ``synchronous=FULL``: each write is one transaction that is on
disk when the call returns, so nothing is lost on a crash or restart, and readers (the training
pipeline, ``export``) never block the server. One connection guarded by a lock: writes are rare
(a benchmark's rows) and reads are indexed point lookups.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ResourceExhausted

#: 2: measurements carry the build id of the kernel binaries they timed (``kernel_build``); a schema-1
#: file is migrated in place when opened (one transaction: the column is added, every old row keeps
#: an empty build, i.e. "not known").
SCHEMA_VERSION = 2
_SQLITE_FULL = 13

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS measurements (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    problem_key    TEXT NOT NULL,      -- ConvProblem.key
    problem_json   TEXT NOT NULL,      -- ConvProblem.to_json()
    kernel         TEXT NOT NULL,      -- canonical kernel name
    arch           TEXT NOT NULL,      -- compute target, e.g. sm_90
    device         TEXT NOT NULL,      -- device spec the lookups key on, e.g. h200
    gpu_name       TEXT NOT NULL,      -- what the driver reported, e.g. NVIDIA H200
    median_us      REAL,
    min_us         REAL,
    graph_us       REAL,               -- CUDA-graph replay time per launch (device time)
    status         TEXT NOT NULL,      -- ok | error | wrong | fault
    relative_error REAL,
    error          TEXT NOT NULL DEFAULT '',
    source         TEXT NOT NULL,      -- benchmark | autotune
    measured_at    REAL NOT NULL,      -- unix seconds
    server_version TEXT NOT NULL DEFAULT '',
    kernel_build   TEXT NOT NULL DEFAULT ''  -- native.registry.build_id of the binaries timed ('' unknown)
);
CREATE INDEX IF NOT EXISTS measurements_lookup ON measurements (problem_key, device, kernel, id);
CREATE TABLE IF NOT EXISTS quarantine (
    kernel  TEXT NOT NULL,
    device  TEXT NOT NULL,
    reason  TEXT NOT NULL,
    since   REAL NOT NULL,
    PRIMARY KEY (kernel, device)
);
"""


class DatabaseFull(ResourceExhausted):
    """The disk (or file system) under the database is full: the write was rolled back, nothing
    already stored is lost, reads keep working; writes succeed again once there is space."""


@dataclass(frozen=True)
class MeasurementRow:
    """One measurement as stored."""

    problem_key: str
    problem_json: str
    kernel: str
    arch: str
    device: str
    gpu_name: str
    median_us: float | None
    min_us: float | None
    graph_us: float | None
    status: str
    relative_error: float | None
    error: str
    source: str
    measured_at: float = 0.0
    server_version: str = ""
    kernel_build: str = ""


@dataclass(frozen=True)
class BestTime:
    kernel: str
    time_us: float       # graph time where measured, else the per-call median
    measured_at: float


class TuningDB:
    """Thread-safe access to one database file."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: no implicit transactions; every write below opens its own.
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.executescript(_SCHEMA)
            self._conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                               (str(SCHEMA_VERSION),))
            found = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        if int(found) > SCHEMA_VERSION:
            raise RuntimeError(f"{path}: tuning database schema {found} is newer than this server's {SCHEMA_VERSION}")
        if int(found) < 2:
            self._migrate_to_2()

    def _migrate_to_2(self) -> None:
        """Schema 1 → 2: add ``kernel_build`` (old rows: '' = not known), in one transaction."""
        with self._lock, self._write():
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(measurements)")}
            if "kernel_build" not in columns:
                self._conn.execute("ALTER TABLE measurements ADD COLUMN kernel_build TEXT NOT NULL DEFAULT ''")
            self._conn.execute("UPDATE meta SET value='2' WHERE key='schema_version'")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ---- writes (one transaction each) ----------------------------------------------------------
    def record(self, rows: Iterable[MeasurementRow]) -> int:
        """Store measurements atomically (all or none); returns how many."""
        now = time.time()
        values = [(r.problem_key, r.problem_json, r.kernel, r.arch, r.device, r.gpu_name, r.median_us, r.min_us,
                   r.graph_us, r.status, r.relative_error, r.error, r.source, r.measured_at or now, r.server_version,
                   r.kernel_build)
                  for r in rows]
        if not values:
            return 0
        with self._lock, self._write():
            self._conn.executemany(
                "INSERT INTO measurements (problem_key, problem_json, kernel, arch, device, gpu_name, median_us,"
                " min_us, graph_us, status, relative_error, error, source, measured_at, server_version, kernel_build)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
        return len(values)

    def quarantine(self, kernel: str, device: str, reason: str) -> None:
        with self._lock, self._write():
            self._conn.execute("INSERT OR REPLACE INTO quarantine (kernel, device, reason, since) VALUES (?, ?, ?, ?)",
                               (kernel, device, reason, time.time()))

    def release(self, kernel: str, device: str) -> bool:
        """Lift a quarantine (an operator's decision after a fix); True if there was one."""
        with self._lock, self._write():
            cursor = self._conn.execute("DELETE FROM quarantine WHERE kernel=? AND device=?", (kernel, device))
        return cursor.rowcount > 0

    # ---- reads ---------------------------------------------------------------------------------
    def best_times(self, problem_key: str, device: str, builds: dict[str, str] | None = None) -> list[BestTime]:
        """Kernels measured for this exact problem on this device, fastest first.

        Each kernel counts by its latest measurement, so a kernel that turned wrong or faulted after
        an earlier good run drops out. Times are device times (graph replay) where measured. With
        ``builds`` (kernel name -> the build id of the binaries in use), only measurements of those
        builds count: a kernel whose code changed since it was timed, or timed before builds were
        recorded, has no measurement until it is timed again (the old rows stay, for export).
        """
        # The latest row per kernel, or per (kernel, build) when builds decide: one row each, by the index.
        group = "kernel" if builds is None else "kernel, kernel_build"
        with self._lock:
            rows = self._conn.execute(
                "SELECT m.kernel, COALESCE(m.graph_us, m.median_us), m.measured_at, m.status, m.kernel_build"
                " FROM measurements m JOIN (SELECT MAX(id) AS id FROM measurements WHERE problem_key=? AND device=?"
                f" GROUP BY {group}) latest ON latest.id = m.id", (problem_key, device)).fetchall()
        best = [BestTime(kernel, time_us, measured_at) for kernel, time_us, measured_at, status, build in rows
                if (builds is None or (build and builds.get(kernel) == build))
                and status == "ok" and time_us is not None]
        return sorted(best, key=lambda b: (b.time_us, b.kernel))

    def quarantined(self, device: str) -> dict[str, str]:
        with self._lock:
            rows = self._conn.execute("SELECT kernel, reason FROM quarantine WHERE device=?", (device,)).fetchall()
        return dict(rows)

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])

    def export(self, *, device: str | None = None, since: float | None = None) -> Iterator[dict[str, Any]]:
        """Every stored measurement as a dict (oldest first), optionally for one device or since a time.

        Reads through a separate connection, so a long export does not hold up the server.
        """
        query = "SELECT * FROM measurements WHERE 1=1"
        params: list[Any] = []
        if device is not None:
            query += " AND device=?"
            params.append(device)
        if since is not None:
            query += " AND measured_at>=?"
            params.append(since)
        if str(self.path) == ":memory:":  # tests: no second connection can see it
            with self._lock:
                cursor = self._conn.execute(query + " ORDER BY id", params)
                names = [column[0] for column in cursor.description]
                rows = cursor.fetchall()
            yield from (dict(zip(names, row)) for row in rows)
            return
        reader = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            reader.row_factory = sqlite3.Row
            for row in reader.execute(query + " ORDER BY id", params):
                yield dict(row)
        finally:
            reader.close()

    def export_jsonl(self, stream, **filters: Any) -> int:
        """Write :meth:`export` as JSON lines; returns the row count."""
        count = 0
        for row in self.export(**filters):
            stream.write(json.dumps(row, sort_keys=True) + "\n")
            count += 1
        return count

    # ---- helpers -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _write(self):
        """One write transaction; a full disk becomes :class:`DatabaseFull` (RESOURCE_EXHAUSTED)."""
        try:
            with _Transaction(self._conn):
                yield
        except sqlite3.Error as error:
            if getattr(error, "sqlite_errorcode", None) == _SQLITE_FULL or "full" in str(error).lower():
                raise DatabaseFull(f"tuning database {self.path}: the disk is full ({error}); the write was rolled "
                                   "back, stored rows are intact") from None
            raise


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error (takes the write lock up front, so two
    servers sharing a file serialise instead of failing half-way). A failed COMMIT (full disk) is
    rolled back too, so the connection is never left inside a transaction."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            try:
                self._conn.execute("COMMIT")
                return
            except sqlite3.Error:
                self._rollback()
                raise
        self._rollback()

    def _rollback(self) -> None:
        if self._conn.in_transaction:  # SQLite may already have rolled back (e.g. SQLITE_FULL)
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

