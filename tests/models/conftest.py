"""Shared fixtures: the committed H200 measurements (real data, never fabricated)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "bench" / "results" / "2026-11-21_h200" / "raw"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "fixture-schema0-fwd" / "0"


@pytest.fixture(scope="session")
def frame():
    pytest.importorskip("pandas")
    from tiledispatch.models.dataset import read_rows

    rows, _ = read_rows([RAW / "dev_suite", RAW / "synthetic"])
    return rows


@pytest.fixture(scope="session")
def fwd_problems(frame):
    from tiledispatch.models.dataset import problem_rows

    return problem_rows(frame, direction="fwd", dtype="bf16")
