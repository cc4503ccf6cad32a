"""The oracle-only pruning bar of the tile-engine benchmark (no GPU needed: measuring is faked)."""

from __future__ import annotations

import pytest

from tiledispatch.native import bench
from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.rules import rule_set_configs

pytest.importorskip("torch")


def _bars(monkeypatch, times: list[tuple[float, float]]) -> list[float]:
    """The pruning bar each kernel of a faked problem is measured against; kernel i times (graph µs, event µs)."""
    configs = [c for c in rule_set_configs("tiny") if c.direction.value == "fwd"][:len(times)]
    bars: list[float] = []

    def fake_measure(setup, config, loader, ceilings, settings, best_us=float("inf")):
        bars.append(best_us)
        graph, event = times[len(bars) - 1]
        return {"kernel": config.name, "status": "ok", "graph_us": graph, "event_median_us": event}

    class Registry:
        builds = {config.name: f"build-{i}" for i, config in enumerate(configs)}

        def loader(self):
            return None

    monkeypatch.setattr(bench, "new_setup", lambda problem, settings: None)
    monkeypatch.setattr(bench, "measure_kernel", fake_measure)
    settings = bench.BenchSettings(cache_dir="unused", oracle_only=True, include_cudnn=False)
    rows = list(bench.measure_iter(None, configs, Registry(), None, settings))
    assert [r["kernel"] for r in rows] == [c.name for c in configs]
    assert [r["kernel_build"] for r in rows] == [f"build-{i}" for i in range(len(configs))]  # the registry's
    return bars


def test_pruning_bar_is_the_best_event_time_not_the_graph_time(monkeypatch):
    """A problem whose kernels run 28 µs on the device under 30 µs calls: the bar passed to the next kernel is the
    30 µs event time (the 3-call estimate's unit); with the graph time (28 µs) a 43 µs estimate would be pruned."""
    bars = _bars(monkeypatch, [(28.0, 30.0), (29.0, 31.0), (28.5, 30.5)])
    assert bars == [float("inf"), 30.0, 30.0]
    assert bench.PRUNE_FACTOR * bars[1] >= 43.0 > bench.PRUNE_FACTOR * 28.0


def test_a_launch_bound_problem_is_never_pruned(monkeypatch):
    """5 µs on the device under 30 µs calls: a kernel whose launch takes longer would look 1.5× slower and be
    pruned though it may run faster; once a timed kernel shows this, every later kernel is timed in full."""
    bars = _bars(monkeypatch, [(40.0, 45.0), (5.0, 30.0), (28.0, 30.0)])
    assert bars == [float("inf"), 45.0, float("inf")]


def test_prune_reference_is_the_event_median_where_the_device_dominates():
    name = rule_set_configs("tiny")[0].name
    assert parse_kernel_name(name)
    assert bench.prune_reference_us({"graph_us": 14.0, "event_median_us": 21.0}) == 21.0
    assert bench.prune_reference_us({"graph_us": 10.5, "event_median_us": 21.0}) == 21.0  # half: still the device's
    assert bench.prune_reference_us({"graph_us": 4.0, "event_median_us": 21.0}) == float("inf")
