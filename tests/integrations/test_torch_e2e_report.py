"""``bench/torch_e2e.py``'s pure-Python figures and tables (no GPU): per-run summaries and speedups
over cuDNN with runs missing (a CUDA-graph capture that failed), the ``--cuda-graph`` extras
(device-only flips of ``fastest`` decisions, eager-over-graph ratios) and the separate markdown
table of graph replays."""

from __future__ import annotations

import contextlib

import pytest

pytest.importorskip("torch")

from bench import torch_e2e as e2e  # noqa: E402  (imports torch)


def _run(median: float) -> dict:
    return {"median_ms": median, "min_ms": median, "rounds_ms": [median]}


@pytest.mark.parametrize(("times", "expected"), [
    ({"cudnn": [4.0, 2.0, 3.0], "ours": [1.5, 1.5, 9.0], "fastest": [2.0]}, (2.0, 1.5)),
    ({"cudnn": [3.0], "fastest": [1.5]}, (None, 2.0)),      # ours' capture failed
    ({"ours": [1.0], "fastest": [1.0]}, (None, None)),      # cuDNN's capture failed
    ({"cudnn": [3.0], "ours": [], "fastest": [3.0]}, (None, 1.0)),  # no rounds: not a run
], ids=["all", "no-ours", "no-cudnn", "empty"])
def test_summarize_medians_and_speedups_over_cudnn(times, expected):
    out = e2e.summarize(times)
    assert (out["speedup"], out["speedup_fastest"]) == expected  # (exact in binary: medians 1.5 ... 4.0)
    for label, values in times.items():
        if values:
            assert out[label]["median_ms"] == sorted(values)[len(values) // 2]
            assert out[label]["min_ms"] == min(values) and out[label]["rounds_ms"] == values
        else:
            assert label not in out


def test_summarize_is_what_eager_mode_reported():
    out = e2e.summarize({"cudnn": [10.0, 12.0, 11.0], "ours": [8.0, 8.5, 9.0], "fastest": [7.0, 7.0, 7.5]})
    assert out["speedup"] == pytest.approx(11.0 / 8.5) and out["speedup_fastest"] == pytest.approx(11.0 / 7.0)


def test_paired_speedup_cancels_the_drift_between_rounds():
    """The host slows down from round to round, and one of ours' rounds is disturbed: the medians'
    ratio says the swapped run is slower, each round's pair says it is 10 % faster."""
    cudnn, ours = [10.0, 20.0, 30.0, 40.0, 50.0], [10 / 1.1, 20 / 1.1, 90.0, 40 / 1.1, 50 / 1.1]
    out = e2e.summarize({"cudnn": cudnn, "ours": ours, "fastest": cudnn})
    assert out["speedup"] == pytest.approx(30 / (40 / 1.1)) and out["speedup"] < 1
    assert out["ours"]["paired_speedup"] == pytest.approx(1.1) and out["fastest"]["paired_speedup"] == 1.0
    assert "paired_speedup" not in out["cudnn"]
    assert e2e.paired_speedup([], []) is None


@pytest.mark.parametrize(("decisions", "expected"), [
    ([], {"to_ours": 0, "to_pytorch": 0}),
    ([("ours", 1.0, 2.0), ("pytorch", 3.0, 2.0)], {"to_ours": 0, "to_pytorch": 0}),  # device agrees
    ([("pytorch", 1.0, 2.0)], {"to_ours": 1, "to_pytorch": 0}),   # host cost sent a device-faster problem to cuDNN
    ([("ours", 2.0, 1.0), ("ours", 3.0, 1.0)], {"to_ours": 0, "to_pytorch": 2}),
    ([("pytorch", 2.0, 2.0)], {"to_ours": 1, "to_pytorch": 0}),   # a device tie goes to ours
], ids=["none", "agree", "to-ours", "to-pytorch", "tie"])
def test_device_only_flips(decisions, expected):
    report = [{"impl": impl, "ours_ms": ours, "pytorch_ms": pytorch} for impl, ours, pytorch in decisions]
    assert e2e.device_only_flips(report) == expected


def test_eager_over_graph_only_for_runs_measured_both_ways():
    eager = {"train": {"cudnn": _run(12.0), "ours": _run(16.0), "fastest": _run(15.0), "speedup": 0.75},
             "forward": {"cudnn": _run(4.0), "ours": _run(6.0), "fastest": _run(5.0)}}
    graph = {"train": {"cudnn": _run(8.0), "fastest": _run(7.5)}, "forward": {}}
    assert e2e.eager_over_graph(eager, graph) == {"train": {"cudnn": 1.5, "fastest": 2.0}, "forward": {}}


def _result(model="mobilenet_v2", batch=32, graph=None, grouped=True) -> dict:
    """An eager result as run_case writes it, trimmed to what the markdown reads."""
    step = {"cudnn": _run(10.0), "ours": _run(12.0), "fastest": _run(9.0), "speedup": 10 / 12,
            "speedup_fastest": 10 / 9}
    result = {"model": model, "batch": batch, "mostly_grouped": grouped, "swapped_convs": 17, "convs": 52,
              "forward": dict(step), "train": dict(step),
              "selection": {"problems": 30, "selection_first_call_s": 0.1, "selection_first_call_mean_ms": 3.0,
                            "by_source": {"local:analytic": 30}, "deciding_s": 1.0, "first_step_s": 5.0,
                            "second_step_s": 0.03, "cached_lookup_mean_us": 2.0},
              "dispatch": {"problems": 30, "to_ours": 20, "to_pytorch": 10,
                           "layers": {d: {"ours": 10, "pytorch": 7, "undecided": 0} for d in e2e.DIRECTIONS}}}
    if graph is not None:
        result["graph"] = graph
    return result


def _graph(**changes) -> dict:
    graph = {"warmup_steps": 3, "errors": {}, "undecided_problems": 0,
             "our_calls_captured": {"cudnn": {"train": 0, "forward": 0}, "ours": {"train": 51, "forward": 17},
                                    "fastest": {"train": 30, "forward": 9},
                                    "fastest_device": {"train": 25, "forward": 8}},
             "device_only_flips": {"to_ours": 2, "to_pytorch": 1},
             "forward": e2e.summarize({"cudnn": [2.0], "ours": [1.6], "fastest": [1.0], "fastest_device": [0.8]}),
             "train": e2e.summarize({"cudnn": [8.0], "ours": [10.0], "fastest": [6.4], "fastest_device": [5.0]})}
    graph["eager_over_graph"] = e2e.eager_over_graph(_result(), graph)
    graph.update(changes)
    return graph


def _cells(line: str) -> list[str]:
    assert line.startswith("| ") and line.endswith(" |"), line
    return [cell.strip() for cell in line[1:-1].split("|")]


def _table(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    start = lines.index("## CUDA-graph replay (device-bound)")
    rows = [line for line in lines[start:] if line.startswith("| ")]
    return _cells(rows[0]), [_cells(row) for row in rows[1:]]


def test_no_graph_table_without_graph_figures():
    assert e2e.graph_table([_result()]) == []
    assert "CUDA-graph" not in e2e._markdown(_report([_result()]))


def test_graph_table_row():
    lines = e2e.graph_table([_result(graph=_graph())])
    header, rows = _table(lines)
    assert len(header) == 20 and header[-1] == "notes"
    (row,) = rows
    assert row[:2] == ["mobilenet_v2", "32"]
    # forward: cuDNN, ours, fastest, fastest (device) times; speedups of the three swapped runs
    assert row[2:9] == ["2.00", "1.60", "1.00", "0.80", "1.25", "2.00", "2.50"]
    assert row[9:16] == ["8.00", "10.00", "6.40", "5.00", "0.80", "1.25", "1.60"]  # training
    assert row[16] == "1.25 / 1.20 / 1.41"                             # eager / graph: 10/8, 12/10, 9/6.4
    assert row[17] == "51 / 30 / 25" and row[18] == "2 / 1" and row[19] == ""
    assert lines[-1].startswith("Target under CUDA graphs")
    assert "ours: 0 of 1 met, fastest: 1 of 1 met, fastest_device: 1 of 1 met" in lines[-1]


def test_graph_table_with_a_failed_capture():
    error = "RuntimeError: CUDA error: operation not permitted when stream is capturing | more\n second line"
    graph = _graph(errors={"ours train": error}, undecided_problems=2,
                   train=e2e.summarize({"cudnn": [8.0], "fastest": [6.4]}),
                   our_calls_captured={"cudnn": {"train": 0, "forward": 0}, "ours": {"forward": 17},
                                       "fastest": {"train": 30, "forward": 9}})
    graph["eager_over_graph"] = e2e.eager_over_graph(_result(), graph)
    header, (row,) = _table(e2e.graph_table([_result(graph=graph)]))
    assert len(row) == len(header)
    assert row[9:16] == ["8.00", "—", "6.40", "—", "—", "1.25", "—"]
    assert row[16] == "1.25 / — / 1.41" and row[17] == "— / 30 / —"
    assert "ours train: RuntimeError: CUDA error: operation not permitted" in row[19]
    assert "|" not in row[19] and "\n" not in row[19] and "2 problems undecided at capture" in row[19]


def test_graph_target_leaves_out_cases_cudnn_could_not_capture():
    error = "RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph capture"
    uncapturable = _graph(errors={"cudnn train": error, "ours train": error}, train={}, forward={})
    lines = e2e.graph_table([_result("mvit_v2_s", 4, graph=uncapturable), _result(graph=_graph())])
    assert "ours: 0 of 1 met, fastest: 1 of 1 met, fastest_device: 1 of 1 met." in lines[-1]
    assert lines[-1].endswith("Not comparable (cuDNN's own training step could not be captured): mvit_v2_s batch 4.")
    only = e2e.graph_table([_result("mvit_v2_s", 16, graph=uncapturable)])
    assert "ours: 0 of 0 met" in only[-1] and "mvit_v2_s batch 16" in only[-1]


def test_graph_table_with_a_case_whose_graph_part_failed():
    lines = e2e.graph_table([_result(graph={"error": "OutOfMemoryError: CUDA out of memory"}),
                             _result("convnext_tiny", 128, graph=_graph())])
    header, rows = _table(lines)
    assert [len(row) for row in rows] == [len(header)] * 2
    assert rows[0][:2] == ["mobilenet_v2", "32"] and rows[0][-1] == "OutOfMemoryError: CUDA out of memory"
    assert all(cell == "" for cell in rows[0][2:-1])
    assert "fastest: 1 of 1 met" in lines[-1]  # the failed case is not counted


@pytest.mark.parametrize(("limit", "text", "expected"), [
    (160, "a | b", "a / b"),
    (160, "one\n  two\tthree", "one two three"),
    (5, "abcdefgh", "abcd…"),
    (5, "abcde", "abcde"),
])
def test_table_cells_are_one_line_without_pipes(limit, text, expected):
    assert e2e._cell(text, limit) == expected


def _report(results: list[dict]) -> dict:
    return {"environment": {"gpu": "NVIDIA H100", "date": "2026-01-01T00:00:00+00:00", "torch": "2.11", "cuda": "13.0",
                            "cudnn": 91900, "triton": "3.6.0", "git_commit": "0" * 40},
            "settings": {"memory_format": "channels_last", "kernels": "JIT", "selection": "local",
                         "timer": "EventTimer()", "rounds": 5, "steps": 10, "cuda_graph": True},
            "results": results}


def test_markdown_keeps_the_eager_tables_and_adds_the_graph_table_last():
    text = e2e._markdown(_report([_result(graph=_graph()), _result("r3d_18", 8, grouped=False),
                                  {"model": "mvit_v2_s", "batch": 16, "error": "out of memory: ..."}]))
    eager = text.index("| model | batch | swapped / convs |")
    graph = text.index("## CUDA-graph replay (device-bound)")
    assert eager < text.index("## Selection") < text.index("## Dispatch under `fastest`") < graph
    assert "Target (training step faster than cuDNN" in text[:graph]
    assert text.rstrip().endswith("fastest: 1 of 1 met, fastest_device: 1 of 1 met.")


def test_graph_summary_line():
    assert e2e.graph_summary({"error": "boom"}) == "boom"
    line = e2e.graph_summary(_graph(errors={"ours train": "RuntimeError: x"}))
    assert line.startswith("forward replay speedup ours / fastest / fastest (device) 1.25 / 2.00 / 2.50, train "
                           "replay speedup ours / fastest / fastest (device) 0.80 / 1.25 / 1.60")
    assert line.endswith("capture failed: ours train: RuntimeError: x")


# ---- _graph_mode's orchestration, with torch.cuda's streams, graphs and events faked on CPU -----------------
class _FakeCuda:
    """Enough of ``torch.cuda`` for :func:`bench.torch_e2e._graph_mode` on CPU: a "capture" runs the
    step once (eagerly), a replay only counts; capture number ``fail_at`` (0-based) raises like a
    capture that failed; every timed interval is 1 ms."""

    def __init__(self, fail_at: int | None = None):
        self.fail_at, self.captures, self.replays, self.capturing = fail_at, 0, {}, False

    def install(self, monkeypatch, torch) -> None:
        fake = self

        class Stream:
            def wait_stream(self, other):
                pass

            def synchronize(self):
                pass

        class CUDAGraph:
            def __init__(self):
                self.index = None

            def replay(self):
                fake.replays[self.index] = fake.replays.get(self.index, 0) + 1

        class Graph:
            def __init__(self, graph, pool=None, stream=None):
                assert pool is not None and stream is not None  # one pool, the warm-up's stream
                self.graph = graph

            def __enter__(self):
                self.graph.index = fake.captures
                fake.captures += 1
                if self.graph.index == fake.fail_at:
                    raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
                fake.capturing = True

            def __exit__(self, *exc):
                fake.capturing = False

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                pass

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return 1.0

        stream = Stream()
        for name, value in {"Stream": Stream, "CUDAGraph": CUDAGraph, "graph": Graph, "Event": Event,
                            "current_stream": lambda: stream, "set_stream": lambda s: None,
                            "stream": lambda s: contextlib.nullcontext(), "synchronize": lambda: None,
                            "graph_pool_handle": lambda: object()}.items():
            monkeypatch.setattr(torch.cuda, name, value)


def _cpu_case(torch):
    """A tiny CPU model pair (cuDNN's stand-in and its swapped copy) with static input and labels."""
    import copy

    from tiledispatch.integrations.torch import swap_convs

    nn = torch.nn
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Conv2d(4, 8, 3, groups=2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
    return plain, swap_convs(copy.deepcopy(plain)), torch.randn(2, 4, 6, 6), torch.tensor([0, 2])


@pytest.mark.parametrize("fail_at", [None, 2], ids=["all-captured", "ours-train-fails"])
def test_graph_mode_captures_every_run_and_records_a_failed_capture(fail_at, runtime_factory, monkeypatch):
    import argparse

    import torch

    runtime = runtime_factory()
    fake = _FakeCuda(fail_at)
    fake.install(monkeypatch, torch)
    cudnn, ours, x, labels = _cpu_case(torch)
    seen = []  # (run, model in training, captured, grads all zero) of each warm-up and captured step
    for model in (cudnn, ours):
        model.register_forward_pre_hook(lambda m, args: seen.append(
            ("cudnn" if m is cudnn else f"{runtime.policy}/{runtime.cost}", m.training, fake.capturing,
             all(p.grad is None or not p.grad.any() for p in m.parameters()))))
    args = argparse.Namespace(warmup=1, rounds=3, steps=4)
    eager = {kind: {label: _run(2.0) for label in e2e.GRAPH_RUNS} for kind in e2e.STEP_KINDS}
    result = e2e._graph_mode(cudnn, ours, x, labels, eager, args)

    assert fake.captures == 8 and result["warmup_steps"] == 2  # at least 2: the 2nd zeroes every .grad
    failed = fail_at is not None
    captured = [(run, training) for run, training, capturing, _ in seen if capturing]
    runs = ("cudnn", "ours/total", "fastest/total", "fastest/device")  # GRAPH_RUNS as policy/cost
    expected = [(run, training) for run in runs for training in (True, False)]
    assert captured == [c for i, c in enumerate(expected) if i != fail_at]  # each run under its own policy
    assert len(seen) == len(captured) + 8 * 2  # 2 warm-up steps before each capture
    assert runtime.cost == "total"  # set back after the device-cost run
    assert all(zeroed for _, training, capturing, zeroed in seen if capturing and training)
    assert result["errors"] == ({"ours train": "RuntimeError: CUDA error: operation not permitted when stream is "
                                               "capturing"} if failed else {})
    timed = [i for i in range(8) if i != fail_at]
    assert fake.replays == {i: args.warmup + args.rounds * args.steps for i in timed}
    assert result["our_calls_captured"]["cudnn"] == {"train": 0, "forward": 0}
    assert ("train" in result["our_calls_captured"]["ours"]) is not failed
    assert result["train"]["speedup"] == (None if failed else 1.0) and result["train"]["speedup_fastest"] == 1.0
    assert result["train"]["speedup_fastest_device"] == 1.0
    assert result["forward"]["speedup"] == 1.0
    assert result["train"]["cudnn"]["median_ms"] == 1.0 / args.steps  # per replay
    ratio = 2.0 / (1.0 / args.steps)
    assert result["eager_over_graph"]["train"] == ({"cudnn": ratio, "fastest": ratio, "fastest_device": ratio} if failed
                                                   else {label: ratio for label in e2e.GRAPH_RUNS})
    assert result["undecided_problems"] == 0 and result["device_only_flips"] == {"to_ours": 0, "to_pytorch": 0}
    assert "_launch" not in vars(runtime)  # the capture's call counter is gone


@pytest.mark.parametrize(("call", "waits"), [
    ("cudaStreamSynchronize", True), ("cudaDeviceSynchronize", True), ("cuEventSynchronize", True),
    ("cudaMalloc", True), ("cuMemAlloc_v2", True), ("cudaFree", True), ("cudaMemcpy", True),
    ("cuMemcpyDtoH_v2", True), ("cuLaunchKernel", False), ("cudaLaunchKernel", False),
    ("cudaMemcpyAsync", False), ("cudaEventRecord", False)])
def test_host_calls_that_wait_for_the_device(call, waits):
    assert e2e._waits(call) is waits


def test_profile_table_shows_the_host_side():
    profile = {"wall_ms": 17.0, "host_ms": 16.5, "device_busy_ms": 12.0, "waiting_calls_per_step": 18.0,
               "gc_ms_per_step": 0.25, "kernels_per_step": 300, "kinds_ms": {"ours": 1.5, "other": 9.0},
               "top": [{"kernel": "_dwroll_kernel", "kind": "ours", "calls_per_step": 18, "ms_per_step": 1.5}],
               "host_calls": [{"call": "cuLaunchKernel", "calls_per_step": 54.0, "us_per_step": 300.0, "waits": False},
                              {"call": "cudaStreamSynchronize", "calls_per_step": 18.0, "us_per_step": 4000.0,
                               "waits": True}]}
    lines = e2e._profile_table([{**_result(), "profile": {"ours": profile}}])
    header = next(line for line in lines if line.startswith("| model | batch | run |"))
    row = next(line for line in lines if line.startswith("| mobilenet_v2 | 32 | ours |"))
    cells = dict(zip(_cells(header), _cells(row)))
    assert cells["host ms"] == "16.50" and cells["waiting calls / step"] == "18.00" and cells["GC ms / step"] == "0.25"
    assert cells["ours ms"] == "1.50" and cells["kernels / step"] == "300"
    assert "| `cudaStreamSynchronize` | 18.0 | 4000 | yes |" in lines
    assert "| `cuLaunchKernel` | 54.0 | 300 |  |" in lines


def test_dispatch_summary_counts_layers_run_by_pytorchs_own_convolution(runtime_factory, monkeypatch):
    """Every direction decided on ours, then the layer timed both ways: PyTorch's own is cheaper, so the
    layer's calls count as cuDNN in every direction, and the table says how many layers that was."""
    import torch

    from tests.integrations.test_torch_dispatch import FakeTimer, OursSpy
    from tiledispatch.integrations.torch_dispatch import Timing

    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="fastest", timer=FakeTimer(1.0, 2.0))
    monkeypatch.setattr(runtime, "_launch", OursSpy())
    _, ours, x, labels = _cpu_case(torch)

    def step():
        ours.zero_grad()
        torch.nn.functional.cross_entropy(ours(x), labels).backward()

    step()  # the input needs no gradient: forward and backward-weight decided
    summary = e2e._dispatch_summary(ours, x)
    assert summary["to_ours"] == 2 and summary["layers_native"] == 0
    assert summary["layers"]["bwd_data"] == {"ours": 0, "pytorch": 0, "undecided": 1}
    assert all(summary["layers"][d] == {"ours": 1, "pytorch": 0, "undecided": 0} for d in ("fwd", "bwd_weight"))
    runtime.timer = FakeTimer(Timing(0.288, 0.765), Timing(0.330, 0.440))
    step()
    summary = e2e._dispatch_summary(ours, x)
    assert summary["to_ours"] == 2 and summary["layers_timed"] == 1 and summary["layers_native"] == 1
    assert all(summary["layers"][d] == {"ours": 0, "pytorch": 1, "undecided": 0} for d in e2e.DIRECTIONS)
    row = next(line for line in e2e._dispatch_table([{**_result(), "dispatch": summary}])
               if line.startswith("| mobilenet_v2"))
    assert _cells(row)[-6:] == ["0 / 1", "0 / 1", "0 / 1", "1", "1", "0"]


def test_dispatch_summary_counts_a_layer_on_the_all_ours_cpp_route_as_ours(runtime_factory, monkeypatch):
    """The forward decided on cuDNN, backward-weight on ours; the layer's timing finds all ours on the
    C++ path cheapest: its calls count as ours in every direction."""
    import torch

    from tests.integrations.test_torch_dispatch import OursSpy, SequenceTimer
    from tiledispatch.integrations import torch_native
    from tiledispatch.integrations.torch_dispatch import Timing

    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="fastest",
                              timer=SequenceTimer(2.0, 1.0, 1.0, 2.0))  # fwd: cuDNN; bwd_weight: ours
    monkeypatch.setattr(runtime, "_launch", OursSpy())
    _, ours, x, labels = _cpu_case(torch)

    def step():
        ours.zero_grad()
        torch.nn.functional.cross_entropy(ours(x), labels).backward()

    step()
    monkeypatch.setattr(runtime, "_cpp_device", lambda x: 0)
    monkeypatch.setattr(runtime, "_cpp_plan", lambda entry, device: 5)
    conv = next(m for m in ours.modules() if hasattr(m, "groups") and m.groups > 1)
    monkeypatch.setattr(torch_native, "conv", lambda x, w, b, plans: torch.nn.functional.conv2d(
        x, w, b, conv.stride, conv.padding, conv.dilation, conv.groups))
    runtime.timer = SequenceTimer(Timing(0.3, 0.8), Timing(0.33, 0.44), Timing(0.2, 0.2))
    step()
    summary = e2e._dispatch_summary(ours, x)
    assert summary["to_ours"] == 1 and summary["layers_ours_cpp"] == 1 and summary["layers_native"] == 0
    assert all(summary["layers"][d]["ours"] == 1 for d in ("fwd", "bwd_weight"))
    row = next(line for line in e2e._dispatch_table([{**_result(), "dispatch": summary}])
               if line.startswith("| mobilenet_v2"))
    assert _cells(row)[-3:] == ["1", "0", "1"]


def test_spread_table_shows_round_extremes_minima_speedups_and_paired_wins():
    spread_table = e2e.spread_table

    result = {"model": "m", "batch": 32, "train": {"cudnn": {"rounds_ms": [10.0, 14.0, 12.0]},
                                                   "ours": {"rounds_ms": [9.0, 15.0, 11.0]},
                                                   "fastest": {"rounds_ms": [11.0, 13.0, 12.5]}}}
    lines = spread_table([result])
    # paired: ours 10/9, 14/15, 12/11 -> median 1.09; fastest 10/11, 14/13, 12/12.5 -> median 0.96
    assert lines[-1] == ("| m | 32 | 10.00 – 14.00 | 9.00 – 15.00 | 11.00 – 13.00 | 1.11 | 0.91 | 1.09 | 0.96 | "
                         "2 of 3 | 1 of 3 |")
    assert spread_table([{"model": "m", "batch": 1, "train": {"cudnn": {"median_ms": 1.0}}}]) == []
