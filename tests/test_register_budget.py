"""bench/register_budget.py: a budgeted tile of ``tiny`` compiles (sm_90, on this CPU, in a child process: this
test process runs Triton's interpreter) to fewer registers at its shared-memory budget, without spilling, and
gains CTAs an SM; the tool's budget and ``register_cap`` agree there."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from bench.register_budget import ctas_by_registers  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# tiny's backward-data gmerge tile: 24 KiB of operands, nine 128-thread CTAs an SM by shared memory.
BUDGETED = "gconv_bwd_data_bf16_2d_gmerge_64x32x32_w4_s4_gm8_sk1_mg4_v8_i32"


def test_a_budgeted_tile_fits_its_budget_without_spilling(tmp_path):
    out = tmp_path / "survey.csv"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "register_budget.py"), "--kernel", BUDGETED,
                           "--workers", "1", "--out", str(out)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = [{k: int(v) if v.isdigit() else v for k, v in r.items()} for r in csv.DictReader(out.open())]
    assert row["program"] == "main" and row["spill_bytes"] == 0 and row["budget_error"] == ""
    assert row["ctas_by_shared"] == 9 and row["budget"] == row["register_cap"] == 56
    assert row["registers"] > row["budget"] >= row["budget_registers"] and row["budget_spill_bytes"] == 0
    assert ctas_by_registers(row["budget_registers"], 128) > row["ctas_by_registers"]


def test_registers_round_up_to_eight_a_thread():
    assert ctas_by_registers(128, 256) == 2 and ctas_by_registers(129, 256) == 1 and ctas_by_registers(56, 128) == 9
