from __future__ import annotations

import numpy as np
import pytest

from tiledispatch.models import metrics


def test_pick_efficiency_and_ranks():
    times = np.array([10.0, 12.0, 20.0, 11.0, 30.0, 40.0, 50.0])
    timed = np.ones(7, dtype=bool)
    best = metrics.pick_from_scores(times, timed, np.array([1, 2, 3, 4, 5, 6, 7.0]))
    assert best == metrics.Pick(1.0, True, True)
    fifth = metrics.pick_index(times, timed, 4)  # 30 us: four faster kernels -> still top-5
    assert fifth.efficiency == pytest.approx(10 / 30) and not fifth.top1 and fifth.top5
    sixth = metrics.pick_index(times, timed, 5)
    assert not sixth.top5


def test_summary_percentiles():
    picks = [metrics.Pick(e, e == 1.0, True) for e in (1.0, 0.9, 0.8, 1.0, 0.5)]
    s = metrics.summarize(picks)
    assert s["mean"] == pytest.approx(0.84)
    assert s["min"] == 0.5 and s["median"] == 0.9
    assert s["p10"] == pytest.approx(np.percentile([1.0, 0.9, 0.8, 1.0, 0.5], 10))
    assert s["top1"] == pytest.approx(0.4)
