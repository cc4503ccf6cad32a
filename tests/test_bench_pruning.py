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

    def fake_measure(setup, config, loader, ceilings, settings, best_us=float("inf"), best_device_us=float("inf")):
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


def _measured(monkeypatch, event_estimate: float, device_estimate: float, best_us: float, best_device_us: float):
    """measure_kernel on a faked kernel (correct, 3-call event estimate, one-replay device estimate, full timing
    26.5 µs) with the given bars; returns the row and whether the device estimate was asked for."""
    from types import SimpleNamespace

    from tiledispatch.native import launch

    torch = pytest.importorskip("torch")
    asked = []
    monkeypatch.setattr(launch, "run", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(bench, "_quick_us", lambda call, sets: event_estimate)
    monkeypatch.setattr(bench, "_graph_quick_us", lambda call, sets: asked.append(1) or device_estimate)
    monkeypatch.setattr(bench, "_time_callable", lambda call, sets, settings, estimate: (52.7, 50.0, 26.5))
    monkeypatch.setattr(bench, "_row", lambda problem, ceilings, kernel, status, **kw: {"status": status, **kw})
    out = SimpleNamespace(fill_=lambda value: None)
    setup = SimpleNamespace(problem=SimpleNamespace(dtype=rule_set_configs("tiny")[0].dtype), out=[out], first=[None],
                            second=[None], sets=1, relative_error=lambda tensor: 0.0)
    config = rule_set_configs("tiny")[0]
    settings = bench.BenchSettings(cache_dir="unused", oracle_only=True, include_cudnn=False)
    row = bench.measure_kernel(setup, config, None, None, settings, best_us, best_device_us=best_device_us)
    return row, bool(asked)


def test_a_slow_launch_of_a_fast_kernel_is_timed_not_pruned(monkeypatch):
    """Session 28 (H200): dwrun_4x32x3_w2_s4_v4 read 69.6 µs by events beside a best of 37.4 µs (34.7 on the
    device) and was pruned, though it runs 26.5 µs: the device estimate keeps it."""
    row, asked = _measured(monkeypatch, 69.6, 26.5, 37.4, 34.7)
    assert asked and row["status"] == "ok" and row["graph"] == 26.5


def test_a_kernel_slow_on_the_device_too_is_pruned(monkeypatch):
    row, asked = _measured(monkeypatch, 69.6, 60.0, 37.4, 34.7)
    assert asked and row["status"] == "pruned" and row["event_median"] == 69.6
    assert "device estimate 60.0" in row["message"]


def test_a_kernel_under_the_event_bar_needs_no_device_estimate(monkeypatch):
    row, asked = _measured(monkeypatch, 40.0, 99.0, 37.4, 34.7)
    assert not asked and row["status"] == "ok"
