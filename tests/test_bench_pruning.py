"""The oracle-only pruning bar of the tile-engine benchmark (no GPU needed: measuring is faked)."""

from __future__ import annotations

import pytest

from tiledispatch.native import bench
from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.rules import rule_set_configs

pytest.importorskip("torch")


def test_pruning_bar_is_the_best_event_time_not_the_graph_time(monkeypatch):
    """A small problem: every kernel's device time (graph) is 5 µs but each call costs 30 µs of host
    launch. The bar passed to the next kernel must be the 30 µs event time; with the graph time
    (5 µs), a 30 µs estimate exceeds 1.5 × 5 and every later kernel would be pruned."""
    configs = [c for c in rule_set_configs("tiny") if c.direction.value == "fwd"][:3]
    bars: list[float] = []

    def fake_measure(setup, config, loader, ceilings, settings, best_us=float("inf")):
        bars.append(best_us)
        return {"kernel": config.name, "status": "ok", "graph_us": 5.0, "event_median_us": 30.0}

    class Registry:
        builds = {config.name: f"build-{i}" for i, config in enumerate(configs)}

        def loader(self):
            return None

    monkeypatch.setattr(bench, "new_setup", lambda problem, settings: None)
    monkeypatch.setattr(bench, "measure_kernel", fake_measure)
    settings = bench.BenchSettings(cache_dir="unused", oracle_only=True, include_cudnn=False)
    rows = list(bench.measure_iter(None, configs, Registry(), None, settings))
    assert [r["kernel"] for r in rows] == [c.name for c in configs]
    assert [r["kernel_build"] for r in rows] == ["build-0", "build-1", "build-2"]  # the registry's, per row
    assert bars == [float("inf"), 30.0, 30.0]
    assert bench.PRUNE_FACTOR * bars[1] >= 30.0  # the same estimate would not be pruned


def test_prune_reference_is_the_event_median():
    name = rule_set_configs("tiny")[0].name
    assert parse_kernel_name(name)
    assert bench.prune_reference_us({"graph_us": 4.0, "event_median_us": 21.0}) == 21.0
