"""Rows know which build they timed: their own column, else the folder's kernel_builds.json; stale()
marks the rows of a known build other than the current one."""

from __future__ import annotations

import json

import pandas as pd

from tiledispatch.models import builds


def test_attach_prefers_the_rows_own_build_then_the_folder_file(tmp_path):
    (tmp_path / builds.BUILDS_FILE).write_text(json.dumps({"builds": {"a": "fa", "b": "fb"}}))
    frame = pd.DataFrame({"kernel": ["a", "b", "c"], "kernel_build": ["own", "", None]})
    assert builds.attach(frame, tmp_path)["kernel_build"].tolist() == ["own", "fb", ""]
    legacy = pd.DataFrame({"kernel": ["a", "c"]})  # shards written before the column existed
    assert builds.attach(legacy, tmp_path)["kernel_build"].tolist() == ["fa", ""]
    assert builds.attach(legacy, tmp_path / "nowhere")["kernel_build"].tolist() == ["", ""]


def test_stale_marks_known_builds_that_are_not_current():
    frame = pd.DataFrame({"kernel": ["a", "b", "c", "d"], "kernel_build": ["x", "y", "", "z"]})
    assert builds.stale(frame, {"a": "x", "b": "new", "c": "any"}).tolist() == [False, True, False, True]
