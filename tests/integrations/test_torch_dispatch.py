"""The ``fastest``/``ours``/``pytorch`` dispatch of the custom ops, on CPU with an injected timer:
the decision and its cache, the INFO lines, the CUDA-graph capture guard, the policy switch, the
report, and that both implementations give the fake implementations' layout.

Most tests replace our kernel by a spy (``Runtime._launch``) that counts calls and answers with
PyTorch's result, so no Triton kernel runs; the one that runs ours uses the interpreter."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
nn = torch.nn
F = torch.nn.functional
LOGGER = "tiledispatch.integrations"


class FakeTimer:
    """Answers fixed times: ``ours_ms`` for the first call of each decision, ``pytorch_ms`` for the
    second (``decide`` times ours first); ``call_runs`` runs the implementation once too."""

    def __init__(self, ours_ms: float, pytorch_ms: float, call_runs: bool = False):
        self.times, self.call_runs, self.calls = (ours_ms, pytorch_ms), call_runs, 0

    def __call__(self, run, device):
        if self.call_runs:
            run()
        self.calls += 1
        return self.times[(self.calls - 1) % 2]


class OursSpy:
    """Stands in for our kernel: counts calls, answers PyTorch's result for the entry's problem."""

    def __init__(self):
        self.calls = 0

    def __call__(self, entry, first, second):
        from tiledispatch.integrations.torch_reference import reference

        self.calls += 1
        p = entry.problem
        x_shape = (p.batch, p.in_channels, *p.input_size)
        w_shape = (p.out_channels, p.in_channels // p.groups, *p.filter_size)
        return reference(p.direction, first, second, x_shape, w_shape, p.groups, p.stride, p.pad_begin, p.pad_end,
                         p.dilation)


@pytest.fixture
def fastest(runtime_factory, monkeypatch):
    """``fastest(ours_ms, pytorch_ms)``: a CPU runtime under ``fastest`` with a fake timer and our kernel spied."""
    monkeypatch.delenv("TILEDISPATCH_TARGET", raising=False)

    def install(ours_ms=1.0, pytorch_ms=2.0, spy=True, **settings):
        timer = FakeTimer(ours_ms, pytorch_ms, call_runs=not spy)
        runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="fastest", timer=timer,
                                  **settings)
        ours = OursSpy()
        if spy:
            monkeypatch.setattr(runtime, "_launch", ours)
        return runtime, timer, ours

    return install


def _conv():
    from tiledispatch.integrations.torch import TileConv2d

    torch.manual_seed(0)
    return TileConv2d(4, 6, 3, padding=1, groups=2)


def _train_step(conv, x):
    """Forward and backward: the three directions, one problem each."""
    x = x.clone().requires_grad_()
    conv.zero_grad()
    y = conv(x)
    y.square().sum().backward()
    return y, x.grad, conv.weight.grad


def _rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def _decision_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and " -> " in r.getMessage()]


# ---- the policy setting ------------------------------------------------------------------------------
@pytest.mark.parametrize(("setting", "env", "default", "spelled", "argument", "bad", "message"), [
    ("policy", "POLICY_ENV", "auto", ("Ours", "ours"), "pytorch", "quickest", "policy: must be one of"),
    ("cost", "COST_ENV", "total", (" Device ", "device"), "total", "host", "cost: must be one of"),
])
def test_setting_from_configure_env_and_default(setting, env, default, spelled, argument, bad, message, monkeypatch):
    from tiledispatch.integrations import torch_dispatch as dispatch
    from tiledispatch.integrations.torch_runtime import Runtime

    variable = getattr(dispatch, env)
    monkeypatch.delenv(variable, raising=False)
    assert getattr(Runtime(), setting) == default
    monkeypatch.setenv(variable, spelled[0])
    assert getattr(Runtime(), setting) == spelled[1]
    assert getattr(Runtime(**{setting: argument}), setting) == argument  # the argument wins over the environment
    monkeypatch.setenv(variable, bad)
    with pytest.raises(ValueError, match=message):
        Runtime()
    runtime = Runtime(**{setting: argument})
    with pytest.raises(ValueError, match=message):
        setattr(runtime, setting, "cudnn-only")


def test_auto_resolves_by_device():
    from tiledispatch.integrations import torch_dispatch as dispatch

    assert dispatch.resolve("auto", torch.device("cuda", 0)) == "fastest"
    assert dispatch.resolve("auto", torch.device("cpu")) == "ours"
    assert dispatch.resolve("pytorch", torch.device("cuda", 0)) == "pytorch"


# ---- deciding and caching ----------------------------------------------------------------------------
def test_pytorch_faster_is_decided_once_per_problem_then_dispatched(fastest, caplog):
    runtime, timer, ours = fastest(ours_ms=3.0, pytorch_ms=1.0)
    conv = _conv()
    x = torch.randn(2, 4, 5, 5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        _train_step(conv, x)
    assert timer.calls == 6 and ours.calls == 0  # 3 problems x 2 sides timed; the fake timer runs nothing
    report = runtime.dispatch_report()
    assert sorted(r["direction"] for r in report) == ["bwd_data", "bwd_weight", "fwd"]
    assert all(r["impl"] == "pytorch" and r["ours_ms"] == 3.0 and r["pytorch_ms"] == 1.0 for r in report)
    assert all(r["speedup"] == pytest.approx(1 / 3) and r["kernel"].startswith("gconv_") for r in report)
    lines = _decision_lines(caplog)
    assert len(lines) == 3
    for r in report:
        assert any(r["problem"] in line and r["kernel"] in line and "3.0000 ms" in line and "1.0000 ms" in line
                   and line.endswith("-> PyTorch (cost total)") for line in lines), (r, lines)

    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        y, gx, gw = _train_step(conv, x)
    assert timer.calls == 6 and ours.calls == 0 and not _decision_lines(caplog)  # cached: nothing timed again
    x_ref = x.clone().requires_grad_()
    y_ref = F.conv2d(x_ref, conv.weight, conv.bias, 1, 1, 1, 2)
    y_ref.square().sum().backward()
    assert _rel(y, y_ref) < 1e-6 and _rel(gx, x_ref.grad) < 1e-6


def test_ours_faster_is_decided_then_dispatched_to_ours(fastest):
    runtime, timer, ours = fastest(ours_ms=1.0, pytorch_ms=2.0)
    conv = _conv()
    x = torch.randn(2, 4, 5, 5)
    _train_step(conv, x)
    assert ours.calls == 3  # the calls that decided run the winner once (the fake timer ran nothing)
    assert {r["impl"] for r in runtime.dispatch_report()} == {"ours"}
    _train_step(conv, x)
    # + 2: the layer timed both ways once, on the 2nd step's forward (as decided 1.0 < PyTorch's own 2.0)
    assert ours.calls == 6 and timer.calls == 8
    [layer] = runtime.layer_report()
    assert layer["impls"] == ["ours"] * 3 and not layer["native"] and layer["grad_x"] and layer["grad_w"]
    _train_step(conv, x)
    assert ours.calls == 9 and timer.calls == 8


def test_a_tie_goes_to_ours(fastest):
    runtime, _, _ = fastest(ours_ms=1.5, pytorch_ms=1.5)
    _train_step(_conv(), torch.randn(1, 4, 4, 4))
    assert {r["impl"] for r in runtime.dispatch_report()} == {"ours"}


def test_every_shape_is_its_own_problem(fastest):
    runtime, timer, _ = fastest()
    conv = _conv()
    with torch.no_grad():
        conv(torch.randn(2, 4, 5, 5))
        conv(torch.randn(3, 4, 5, 5))
        conv(torch.randn(2, 4, 5, 5))  # decided on ours: its layer is timed both ways (2 more calls)
    assert timer.calls == 6 and len(runtime.dispatch_report()) == 2 and len(runtime.layer_report()) == 1


@pytest.mark.interpreter
def test_fastest_with_the_real_kernel_under_the_interpreter(fastest):
    """Nothing spied: the timer runs both sides (ours under the interpreter), ours is faster by fiat."""
    from tiledispatch.integrations.torch import dispatch_report

    runtime, timer, _ = fastest(ours_ms=1.0, pytorch_ms=2.0, spy=False)
    conv = _conv()
    x = torch.randn(2, 4, 5, 5)
    y, gx, gw = _train_step(conv, x)
    x_ref = x.clone().requires_grad_()
    y_ref = F.conv2d(x_ref, conv.weight, conv.bias, 1, 1, 1, 2)
    y_ref.square().sum().backward()
    assert _rel(y, y_ref) < 1e-5 and _rel(gx, x_ref.grad) < 1e-5 and _rel(gw, conv.weight.grad) < 1e-5
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert len(dispatch_report()) == 3 and {e.backend for e in runtime.entries()} == {"interpret"}


# ---- host cost -------------------------------------------------------------------------------------------
def test_host_cost_decides_host_bound_problems(fastest, caplog):
    """Ours 2 µs faster on the device but 22 µs slower on the host: PyTorch serves (a decision on
    device times alone would pick ours); the report and the INFO line carry both host times."""
    from tiledispatch.integrations.torch_dispatch import Timing

    ours, pytorch = Timing(0.010, 0.030), Timing(0.012, 0.008)
    runtime, timer, spy = fastest()
    runtime.timer = FakeTimer(ours, pytorch)
    with caplog.at_level(logging.INFO, logger=LOGGER), torch.no_grad():
        _conv()(torch.randn(1, 4, 4, 4))
    [report] = runtime.dispatch_report()
    assert report["ours_ms"] < report["pytorch_ms"]  # faster on the device ...
    assert report["impl"] == "pytorch" and spy.calls == 0  # ... yet PyTorch's, by 20 µs per call
    assert report["ours_host_ms"] == 0.030 and report["pytorch_host_ms"] == 0.008
    assert report["speedup"] == pytest.approx(0.020 / 0.040)
    [line] = _decision_lines(caplog)
    assert "ours 0.0100 ms + host 0.0300 ms" in line and "PyTorch 0.0120 ms + host 0.0080 ms" in line


def test_host_cost_changes_nothing_when_device_time_dominates(fastest):
    from tiledispatch.integrations.torch_dispatch import Timing

    runtime, _, spy = fastest()
    runtime.timer = FakeTimer(Timing(1.0, 0.030), Timing(1.5, 0.008))
    with torch.no_grad():
        _conv()(torch.randn(1, 4, 4, 4))
    assert [r["impl"] for r in runtime.dispatch_report()] == ["ours"] and spy.calls == 1


def test_decide_weighs_device_plus_host():
    from tiledispatch.integrations.torch_dispatch import Decision, Timing, decide

    cpu = torch.device("cpu")
    answers = iter([Timing(0.010, 0.030), Timing(0.012, 0.008)])
    decision = decide(lambda run, device: next(answers), None, None, cpu)
    assert decision.impl == "pytorch" and decision.ours_total_ms == pytest.approx(0.040)
    answers = iter([1.0, 2.0])  # plain numbers: device times, no host cost
    decision = decide(lambda run, device: next(answers), None, None, cpu)
    assert decision.impl == "ours" and decision.ours_host_ms == decision.pytorch_host_ms == 0.0
    assert Decision("ours", 1.0, 2.0, 0.0).speedup == 2.0  # positional construction as before


def test_decide_on_device_time_alone():
    from tiledispatch.integrations.torch_dispatch import Timing, decide

    cpu = torch.device("cpu")
    answers = iter([Timing(0.010, 0.030), Timing(0.012, 0.008)])
    decision = decide(lambda run, device: next(answers), None, None, cpu, "device")
    assert decision.impl == "ours" and decision.cost == "device"  # 2 µs faster on the device wins
    assert decision.speedup == pytest.approx(0.012 / 0.010)
    assert decision.under("total").impl == "pytorch" and decision.under("total").speedup == pytest.approx(0.5)
    assert decision.under("device") is decision


def test_changing_the_cost_rederives_the_decisions_without_timing(fastest, caplog):
    """A host-bound problem: PyTorch's under ``total``; switching to ``device`` (before a CUDA-graph
    capture) sends it to ours with no new timing, and back again."""
    from tiledispatch.integrations.torch_dispatch import Timing

    runtime, timer, spy = fastest()
    runtime.timer = FakeTimer(Timing(0.010, 0.030), Timing(0.012, 0.008))
    conv, x = _conv(), torch.randn(1, 4, 4, 4)
    with torch.no_grad():
        conv(x)
        assert spy.calls == 0 and [r["impl"] for r in runtime.dispatch_report()] == ["pytorch"]
        runtime.cost = "device"
        conv(x)  # the TileConv's kept resolution is dropped with the setting
        assert spy.calls == 1 and runtime.timer.calls == 2
        [report] = runtime.dispatch_report()
        assert report["impl"] == "ours" and report["cost"] == "device"
        runtime.cost = "total"
        conv(x)
    assert spy.calls == 1 and runtime.timer.calls == 2
    assert [r["impl"] for r in runtime.dispatch_report()] == ["pytorch"]


def test_a_device_cost_runtime_decides_on_device_time(fastest, caplog):
    from tiledispatch.integrations.torch_dispatch import Timing

    runtime, timer, spy = fastest(cost="device")
    runtime.timer = FakeTimer(Timing(0.010, 0.030), Timing(0.012, 0.008))
    with caplog.at_level(logging.INFO, logger=LOGGER), torch.no_grad():
        _conv()(torch.randn(1, 4, 4, 4))
    assert spy.calls == 1 and [r["impl"] for r in runtime.dispatch_report()] == ["ours"]
    [line] = _decision_lines(caplog)
    assert line.endswith("-> ours (cost device)")


# ---- layers timed both ways -------------------------------------------------------------------------------
def _decided_on_ours_then(fastest, layer_mixed, layer_native, **settings):
    """A runtime whose three directions are decided on ours (1.0 vs 2.0 ms) by one training step; then
    its timer answers ``layer_mixed`` and ``layer_native`` for the layer's own timing."""
    runtime, timer, spy = fastest(ours_ms=1.0, pytorch_ms=2.0, **settings)
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _train_step(conv, x)
    assert {r["impl"] for r in runtime.dispatch_report()} == {"ours"} and spy.calls == 3
    runtime.timer = FakeTimer(layer_mixed, layer_native)
    return runtime, spy, conv, x


def test_a_layer_whose_own_pytorch_path_is_cheaper_runs_pytorchs_convolution(fastest, caplog):
    """Every direction is faster on ours per call, but the layer as a whole (its autograd Function,
    one call per direction) costs more host time than PyTorch's own convolution and autograd, and the
    host time is the larger: a host-bound layer (ConvNeXt-tiny's 56x56 depthwise at batch 32, H200)."""
    from tiledispatch.integrations.torch_dispatch import Timing

    runtime, spy, conv, x = _decided_on_ours_then(fastest, Timing(0.288, 0.765), Timing(0.330, 0.440))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        y, gx, gw = _train_step(conv, x)
    assert runtime.timer.calls == 2 and spy.calls == 3  # timed once; PyTorch's own ran the step
    y_bias = conv(x.clone().requires_grad_())  # the bias inside PyTorch's own convolution: one node
    assert type(y_bias.grad_fn).__name__ == "ConvolutionBackward0"
    [layer] = runtime.layer_report()
    assert layer["native"] and layer["mixed_host_ms"] == 0.765 and layer["native_ms"] == 0.330
    [line] = [r.getMessage() for r in caplog.records if "layer " in r.getMessage()]
    assert "as decided 0.2880 ms + host 0.7650 ms, PyTorch's own 0.3300 ms + host 0.4400 ms -> PyTorch's own" in line
    x_ref = x.clone().requires_grad_()
    conv.zero_grad()
    y_ref = F.conv2d(x_ref, conv.weight, conv.bias, 1, 1, 1, 2)
    y_ref.square().sum().backward()
    assert _rel(y, y_ref) < 1e-6 and _rel(gx, x_ref.grad) < 1e-6 and _rel(gw, conv.weight.grad) < 1e-6
    _train_step(conv, x)
    assert runtime.timer.calls == 2 and spy.calls == 3  # kept: nothing timed again


def test_a_device_bound_layer_keeps_ours_although_its_host_time_is_longer(fastest):
    """The same layer at batch 128 (H200): as decided 0.841 ms device + 0.844 ms host, PyTorch's own
    1.151 + 0.414. The stream overlaps host and device work, so a layer costs the larger of the two
    (0.844 < 1.151): as decided, where the sum (1.685 > 1.565) would have sent it to PyTorch's own."""
    from tiledispatch.integrations.torch_dispatch import Timing, layer_cost_ms

    mixed, native = Timing(0.841, 0.844), Timing(1.151, 0.414)
    assert mixed.total_ms > native.total_ms and layer_cost_ms(mixed) < layer_cost_ms(native)
    runtime, spy, conv, x = _decided_on_ours_then(fastest, mixed, native)
    _train_step(conv, x)
    assert spy.calls == 6 and not runtime.layer_report()[0]["native"]


def test_layers_are_timed_with_a_longer_hold():
    from tiledispatch.integrations.torch_dispatch import LAYER_HOLD_CYCLES, EventTimer, decide_layer

    assert EventTimer().for_layers() == EventTimer(hold_cycles=LAYER_HOLD_CYCLES)
    assert EventTimer(hold_cycles=0).for_layers().hold_cycles == 0  # no hold asked: none added
    assert EventTimer(hold_cycles=10 * LAYER_HOLD_CYCLES).for_layers().hold_cycles == 10 * LAYER_HOLD_CYCLES
    runs = []
    decision = decide_layer(EventTimer(warmup=0, repeats=1), lambda: runs.append("mixed"),
                            lambda: runs.append("native"), torch.device("cpu"))
    assert runs == ["mixed", "native"] and decision.mixed.device_ms >= 0 and decision.seconds >= 0


def test_a_layer_is_not_timed_under_the_device_cost(fastest):
    """A replay pays no host time: the per-direction decisions stand, nothing more is timed."""
    from tiledispatch.integrations.torch_dispatch import Timing

    runtime, spy, conv, x = _decided_on_ours_then(fastest, Timing(0.288, 0.765), Timing(0.330, 0.440), cost="device")
    _train_step(conv, x)
    assert runtime.timer.calls == 0 and spy.calls == 6 and not runtime.layer_report()


def test_the_cost_setting_reapplies_the_layer_decisions(fastest):
    from tiledispatch.integrations.torch_dispatch import Timing

    runtime, spy, conv, x = _decided_on_ours_then(fastest, Timing(0.288, 0.765), Timing(0.330, 0.440))
    _train_step(conv, x)
    assert spy.calls == 3 and runtime.layer_report()[0]["native"]
    runtime.cost = "device"  # the layer's device times favour ours as decided: per direction again
    _train_step(conv, x)
    assert spy.calls == 6 and not runtime.layer_report()[0]["native"]
    runtime.cost = "total"
    _train_step(conv, x)
    assert spy.calls == 6 and runtime.timer.calls == 2
    runtime.clear()
    assert not runtime.layer_report()


def test_no_layer_is_timed_during_capture(fastest, monkeypatch):
    from tiledispatch.integrations import torch_dispatch as dispatch
    from tiledispatch.integrations.torch_dispatch import Timing

    runtime, spy, conv, x = _decided_on_ours_then(fastest, Timing(0.288, 0.765), Timing(0.330, 0.440))
    monkeypatch.setattr(dispatch, "is_capturing", lambda device: True)
    _train_step(conv, x)
    assert runtime.timer.calls == 0 and spy.calls == 6 and not runtime._serves  # as decided; nothing kept
    monkeypatch.setattr(dispatch, "is_capturing", lambda device: False)
    _train_step(conv, x)
    assert runtime.timer.calls == 2 and spy.calls == 6 and runtime.layer_report()[0]["native"]


def test_layer_timing_leaves_the_callers_gradients_alone(fastest):
    """The layer's timing runs forward and backward on detached copies: the module's .grad and the
    caller's graph see only the real step (the fake timer here runs each route once)."""
    runtime, _, conv, x = _decided_on_ours_then(fastest, 1.0, 2.0)

    class Running(FakeTimer):
        def __call__(self, run, device):
            run()
            return super().__call__(run, device)

    runtime.timer = Running(1.0, 2.0)
    conv.zero_grad()
    x_in = x.clone().requires_grad_()
    y = conv(x_in)
    assert runtime.timer.calls == 2 and conv.weight.grad is None and x_in.grad is None
    y.square().sum().backward()
    x_ref = x.clone().requires_grad_()
    w_ref = conv.weight.detach().clone().requires_grad_()
    F.conv2d(x_ref, w_ref, conv.bias.detach(), 1, 1, 1, 2).square().sum().backward()
    assert _rel(x_in.grad, x_ref.grad) < 1e-6 and _rel(conv.weight.grad, w_ref.grad) < 1e-6


class SequenceTimer:
    """Answers ``times`` in order, one per timed run (then the last again)."""

    def __init__(self, *times):
        self.times, self.calls = times, 0

    def __call__(self, run, device):
        self.calls += 1
        return self.times[min(self.calls, len(self.times)) - 1]


@pytest.mark.parametrize(("ours", "route"), [
    ((0.29, 0.20), "ours_cpp"),      # cheaper than both: the whole layer on ours, C++ path
    ((0.29, 0.90), "pytorch_own"),   # the C++ layer's host time is the largest: PyTorch's own
    ((0.33, 0.44), "pytorch_own"),   # a tie with PyTorch's own: the shorter path
])
def test_a_split_layer_is_also_timed_all_ours_on_the_cpp_path(fastest, monkeypatch, caplog, ours, route):
    """The forward is decided on PyTorch's (its kernel is faster than ours on the device), both backward
    directions on ours: as decided, the layer runs the split Python path. Where the C++ launch path
    can run every direction on our kernels, the layer is also timed that way and the cheapest of the
    three routes serves it: all ours on the C++ path means every direction on ours, its forward too."""
    from tiledispatch.integrations import torch_native
    from tiledispatch.integrations.torch_dispatch import Timing
    from tiledispatch.native.problem import Direction

    runtime, _, spy = fastest()
    runtime.timer = SequenceTimer(2.0, 1.0, 1.0, 2.0, 1.0, 2.0)  # fwd: PyTorch's; bwd_data, bwd_weight: ours
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _train_step(conv, x)
    assert [r["impl"] for r in runtime.dispatch_report()] == ["pytorch", "ours", "ours"] and spy.calls == 2
    plan_of = {Direction.FORWARD: 11, Direction.BACKWARD_DATA: 12, Direction.BACKWARD_WEIGHT: 13}
    monkeypatch.setattr(runtime, "_cpp_device", lambda x: 0)
    monkeypatch.setattr(runtime, "_cpp_plan", lambda entry, device: plan_of[entry.problem.direction])
    native_calls = []

    def fake_conv(x, weight, bias, plans):  # stands in for the C++ node: PyTorch's convolution, recorded
        native_calls.append(plans)
        return F.conv2d(x, weight, bias, 1, 1, 1, 2)

    monkeypatch.setattr(torch_native, "conv", fake_conv)
    runtime.timer = SequenceTimer(Timing(0.30, 0.80), Timing(0.33, 0.44), Timing(*ours))  # as decided, own, C++
    with caplog.at_level(logging.INFO, logger=LOGGER):
        y, gx, gw = _train_step(conv, x)
    assert runtime.timer.calls == 3
    [layer] = runtime.layer_report()
    assert (layer["route"], layer["ours_ms"], layer["ours_host_ms"]) == (route, *ours)
    assert layer["native"] == (route == "pytorch_own") and layer["impls"] == ["pytorch", "ours", "ours"]
    [line] = [r.getMessage() for r in caplog.records if "layer " in r.getMessage()]
    assert f"all ours (C++) {ours[0]:.4f} ms + host {ours[1]:.4f} ms -> " in line
    assert line.endswith("all ours (C++)" if route == "ours_cpp" else "PyTorch's own")
    # the step ran the route chosen (the layer's timing runs nothing here: the timer does not call it)
    assert native_calls == ([(11, 12, 13)] if route == "ours_cpp" else []) and spy.calls == 2
    x_ref = x.clone().requires_grad_()
    w_ref = conv.weight.detach().clone().requires_grad_()
    y_ref = F.conv2d(x_ref, w_ref, conv.bias.detach(), 1, 1, 1, 2)
    y_ref.square().sum().backward()
    assert _rel(y, y_ref) < 1e-6 and _rel(gx, x_ref.grad) < 1e-6 and _rel(gw, w_ref.grad) < 1e-6
    runtime.cost = "device"  # no layer routes under the device cost: the split per-direction decisions
    _train_step(conv, x)
    assert spy.calls == 4 and len(native_calls) == (1 if route == "ours_cpp" else 0)


def test_a_split_layer_the_cpp_path_cannot_run_whole_is_timed_two_ways(fastest, monkeypatch):
    """A plan the C++ path refuses (here the forward's): no all-ours route to time."""
    from tiledispatch.integrations.torch_dispatch import Timing
    from tiledispatch.native.problem import Direction

    runtime, _, spy = fastest()
    runtime.timer = SequenceTimer(2.0, 1.0, 1.0, 2.0, 1.0, 2.0)
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _train_step(conv, x)
    monkeypatch.setattr(runtime, "_cpp_device", lambda x: 0)
    monkeypatch.setattr(runtime, "_cpp_plan", lambda entry, device: None if entry.problem.direction
                        == Direction.FORWARD else 7)
    runtime.timer = SequenceTimer(Timing(0.30, 0.50), Timing(0.33, 0.44), Timing(0.01, 0.01))
    _train_step(conv, x)
    [layer] = runtime.layer_report()
    assert runtime.timer.calls == 2 and layer["ours_ms"] is None and layer["route"] == "pytorch_own"


def test_layer_routes_and_their_ties():
    from tiledispatch.integrations.torch_dispatch import LayerDecision, Timing

    mixed, native = Timing(0.5, 0.5), Timing(0.5, 0.4)
    assert LayerDecision(mixed, native, 0.0).route_for("total") == "pytorch_own"
    assert LayerDecision(mixed, native, 0.0, Timing(0.4, 0.5)).route_for("total") == "pytorch_own"  # tie: own
    assert LayerDecision(mixed, native, 0.0, Timing(0.3, 0.39)).route_for("total") == "ours_cpp"
    assert LayerDecision(mixed, Timing(0.6, 0.1), 0.0, Timing(0.5, 0.1)).route_for("total") == "ours_cpp"
    assert LayerDecision(Timing(0.4, 0.9), Timing(0.6, 0.1), 0.0, Timing(0.4, 0.1)).route_for("total") == "ours_cpp"
    assert LayerDecision(Timing(0.4, 0.1), Timing(0.6, 0.1), 0.0, Timing(0.4, 0.1)).route_for("total") == "ours_cpp"
    assert LayerDecision(Timing(0.3, 0.1), Timing(0.6, 0.1), 0.0, Timing(0.4, 0.1)).route_for("total") == "as_decided"
    # device cost: device times alone
    assert LayerDecision(Timing(0.3, 9.0), Timing(0.6, 0.1), 0.0, Timing(0.4, 0.1)).route_for("device") == "as_decided"


@pytest.mark.gpu
def test_event_timer_separates_host_from_device_time():
    """A call that spends 0.1 ms in Python before a tiny kernel: the host time has it, the device
    time (stream held by the sleep kernel while the host enqueues) does not."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import time

    from tiledispatch.integrations.torch_dispatch import EventTimer

    x = torch.zeros(1, device="cuda")

    def call():
        end = time.perf_counter() + 1e-4
        while time.perf_counter() < end:
            pass
        x.add_(1)

    timing = EventTimer()(call, x.device)
    assert timing.host_ms >= 0.1 and timing.device_ms < 0.05, timing
    unheld = EventTimer(hold_cycles=0)(call, x.device)  # without the hold the events see the host's gap
    assert unheld.device_ms >= 0.09, unheld


# ---- CUDA-graph capture --------------------------------------------------------------------------------
def test_nothing_is_timed_during_capture(fastest, monkeypatch, caplog):
    from tiledispatch.integrations import torch_dispatch

    runtime, timer, ours = fastest(ours_ms=3.0, pytorch_ms=1.0)
    conv = _conv()
    x = torch.randn(2, 4, 5, 5)
    monkeypatch.setattr(torch_dispatch, "is_capturing", lambda device: True)
    with caplog.at_level(logging.INFO, logger=LOGGER), torch.no_grad():
        conv(x)
        conv(x)
    assert timer.calls == 0 and ours.calls == 2 and not runtime.dispatch_report()  # ours, undecided
    assert len([r for r in caplog.records if "CUDA-graph capture" in r.getMessage()]) == 1

    monkeypatch.setattr(torch_dispatch, "is_capturing", lambda device: False)
    with torch.no_grad():
        conv(x)  # outside capture: decided now (PyTorch)
    assert timer.calls == 2 and ours.calls == 2 and runtime.dispatch_report()[0]["impl"] == "pytorch"

    monkeypatch.setattr(torch_dispatch, "is_capturing", lambda device: True)
    with torch.no_grad():
        conv(x)  # captured again: the cached decision serves it
    assert timer.calls == 2 and ours.calls == 2


def test_is_capturing_is_false_off_cuda():
    from tiledispatch.integrations.torch_dispatch import is_capturing

    assert is_capturing(torch.device("cpu")) is False  # and does not touch CUDA (a CPU build would raise)


# ---- switching the policy --------------------------------------------------------------------------------
def test_policy_switch_keeps_decisions(fastest):
    runtime, timer, ours = fastest(ours_ms=3.0, pytorch_ms=1.0)
    conv = _conv()
    x = torch.randn(2, 4, 5, 5)
    with torch.no_grad():
        conv(x)
        assert ours.calls == 0 and timer.calls == 2
        runtime.policy = "ours"
        conv(x)
        assert ours.calls == 1
        runtime.policy = "pytorch"
        conv(x)
        assert ours.calls == 1
        runtime.policy = "fastest"
        conv(x)
    assert ours.calls == 1 and timer.calls == 2 and len(runtime.dispatch_report()) == 1


def test_pytorch_policy_selects_nothing(runtime_factory, monkeypatch):
    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="pytorch")
    ours = OursSpy()
    monkeypatch.setattr(runtime, "_launch", ours)
    y, gx, gw = _train_step(_conv(), torch.randn(2, 4, 5, 5))
    assert ours.calls == 0 and not runtime.entries() and not runtime.dispatch_report()


def test_auto_on_cpu_runs_ours_without_timing(fastest):
    runtime, timer, ours = fastest()
    runtime.policy = "auto"
    _train_step(_conv(), torch.randn(2, 4, 5, 5))
    assert ours.calls == 3 and timer.calls == 0 and not runtime.dispatch_report()


def test_clear_forgets_decisions(fastest):
    runtime, timer, _ = fastest()
    with torch.no_grad():
        _conv()(torch.randn(1, 4, 4, 4))
    runtime.clear()
    assert not runtime.dispatch_report()
    with torch.no_grad():
        _conv()(torch.randn(1, 4, 4, 4))
    assert timer.calls == 4


# ---- layout and torch.compile --------------------------------------------------------------------------
def test_pytorch_results_have_the_fake_implementations_strides(fastest):
    """opcheck compares the real results' strides with the fake ones'; depthwise weights (C/G = 1) are
    where cuDNN-style results could differ (any stride on a size-1 dimension)."""
    from tiledispatch.integrations import torch_ops  # noqa: F401  (registers the ops)

    fastest(ours_ms=2.0, pytorch_ms=1.0)
    cl = torch.channels_last
    x = torch.randn(2, 4, 5, 5).contiguous(memory_format=cl)
    w = torch.randn(4, 1, 3, 3).contiguous(memory_format=cl)
    dy = torch.randn(2, 4, 5, 5)  # not channels-last: the result must still be
    params = ([1, 1], [1, 1], [1, 1], [1, 1], 4)
    ops = torch.ops.tiledispatch
    checks = ("test_schema", "test_faketensor")
    torch.library.opcheck(ops.conv_fwd.default, (x, w, *params), test_utils=checks)
    torch.library.opcheck(ops.conv_bwd_data.default, (dy, w, [5, 5], *params), test_utils=checks)
    torch.library.opcheck(ops.conv_bwd_weight.default, (x, dy, [3, 3], *params), test_utils=checks)
    dw = ops.conv_bwd_weight(x, dy, [3, 3], *params)
    assert dw.stride() == torch.empty(4, 1, 3, 3, memory_format=cl).stride()


def test_canonical_channels_last_copies_only_when_needed():
    from tiledispatch.integrations.torch_reference import canonical_channels_last

    loose = torch.empty(6, 1, 3, 3)  # contiguous: channels-last as far as is_contiguous can tell
    assert loose.is_contiguous(memory_format=torch.channels_last)
    assert canonical_channels_last(loose).stride() == (9, 1, 3, 1)
    tight = torch.randn(2, 3, 4, 5, 6).contiguous(memory_format=torch.channels_last_3d)
    assert canonical_channels_last(tight) is tight


@pytest.mark.parametrize(("pad_begin", "pad_end"), [((1, 1), (1, 1)), ((0, 1), (1, 2))],
                         ids=["symmetric", "asymmetric"])
def test_pytorchs_backward_directions_get_a_channels_last_shell_and_match_autograd(pad_begin, pad_end):
    """The operand convolution_backward reads only the shape of is allocated channels-last (a stride-0
    shell made cuDNN pick its NCHW kernels for depthwise layers); the gradients are autograd's."""
    from tiledispatch.integrations.torch_reference import _shell, backward_data, backward_weight, forward

    cl = torch.channels_last
    dy_like = torch.randn(2, 8, 5, 5, dtype=torch.float64)
    shell = _shell(dy_like, (2, 8, 7, 7))
    assert shell.is_contiguous(memory_format=cl) and not shell.is_contiguous() and shell.dtype == torch.float64
    assert _shell(dy_like, (2, 8, 3, 7, 7)).is_contiguous(memory_format=torch.channels_last_3d)
    torch.manual_seed(0)
    x = torch.randn(2, 8, 7, 6, dtype=torch.float64).contiguous(memory_format=cl).requires_grad_()
    w = torch.randn(8, 1, 3, 3, dtype=torch.float64).contiguous(memory_format=cl).requires_grad_()
    y = forward(x, w, 8, (2, 1), pad_begin, pad_end, (1, 1))
    dy = torch.randn_like(y)
    y.backward(dy)
    dx = backward_data(dy, w.detach(), tuple(x.shape), 8, (2, 1), pad_begin, pad_end, (1, 1))
    dw = backward_weight(x.detach(), dy, tuple(w.shape), 8, (2, 1), pad_begin, pad_end, (1, 1))
    assert torch.allclose(dx, x.grad) and torch.allclose(dw, w.grad)


def test_torch_compile_sees_the_same_ops_under_fastest(fastest):
    from tiledispatch.integrations.torch import swap_convs

    fastest(ours_ms=2.0, pytorch_ms=1.0)
    torch.manual_seed(0)
    model = swap_convs(nn.Sequential(nn.Conv2d(4, 8, 3, padding=1, groups=2), nn.ReLU(),
                                     nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)))
    x = torch.randn(2, 4, 6, 6)
    eager_x, compiled_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    model(eager_x).square().sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    graphs = []

    def recording_backend(gm, example_inputs):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        graphs.append(str(gm.graph))
        boxed = aot_autograd(fw_compiler=lambda g, _: make_boxed_func(g.forward),
                             bw_compiler=lambda g, _: make_boxed_func(g.forward))
        return boxed(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=recording_backend, fullgraph=True, dynamic=False)
    compiled(compiled_x).square().sum().backward()
    assert len(graphs) == 1 and graphs[0].count("tiledispatch.conv_fwd") == 2
    assert _rel(compiled_x.grad, eager_x.grad) < 1e-5
    for eager, param in zip(eager_grads, model.parameters()):
        assert _rel(param.grad, eager) < 1e-5


# ---- the default timer ---------------------------------------------------------------------------------
def test_event_timer_bounds_its_calls():
    from tiledispatch.integrations.torch_dispatch import EventTimer

    calls = []

    def run():
        calls.append(1)

    cpu = torch.device("cpu")
    timing = EventTimer(warmup=2, repeats=5, budget_ms=1e9)(run, cpu)
    assert timing.device_ms >= 0.0 and timing.host_ms == 0.0  # off CUDA the wall time is the device time
    assert len(calls) == 7
    calls.clear()
    EventTimer(warmup=1, repeats=5, budget_ms=0.0)(run, cpu)  # budget spent: one timed call still
    assert len(calls) == 2


# ---- settled on PyTorch: the module runs F.conv itself ------------------------------------------------
def _count_runs(runtime, monkeypatch):
    calls = []
    original = runtime.run

    def counting(direction, *args):
        calls.append(direction.value)
        return original(direction, *args)

    monkeypatch.setattr(runtime, "run", counting)
    return calls


def test_shapes_settled_on_pytorch_skip_the_custom_ops(fastest, monkeypatch):
    runtime, timer, ours = fastest(ours_ms=3.0, pytorch_ms=1.0)
    calls = _count_runs(runtime, monkeypatch)
    conv = _conv()
    x = torch.randn(2, 4, 5, 5)
    _train_step(conv, x)  # decides all three directions: PyTorch
    assert sorted(calls) == ["bwd_data", "bwd_weight", "fwd"]
    calls.clear()
    y, gx, gw = _train_step(conv, x)
    assert calls == [] and timer.calls == 6 and ours.calls == 0  # plain F.conv2d and its autograd
    x_ref = x.clone().requires_grad_()
    w_ref = conv.weight.detach().clone().requires_grad_()
    y_ref = F.conv2d(x_ref, w_ref, conv.bias, 1, 1, 1, 2)
    y_ref.square().sum().backward()
    assert _rel(y, y_ref) < 1e-6 and _rel(gx, x_ref.grad) < 1e-6 and _rel(gw, w_ref.grad) < 1e-6
    with torch.no_grad():
        conv(torch.randn(3, 4, 5, 5))  # a new batch size: a new problem, decided through the ops
    assert calls == ["fwd"]


def test_a_direction_settled_on_ours_keeps_every_direction_on_the_runtime(fastest, monkeypatch):
    """Split directions: the layer goes through the runtime per direction (EagerConv in eager mode;
    test_torch_eager.py), not through F.conv; inference needing only PyTorch's forward skips it."""
    runtime, timer, ours = fastest(ours_ms=3.0, pytorch_ms=1.0)
    calls = _count_runs(runtime, monkeypatch)
    conv = _conv()
    x = torch.randn(2, 4, 5, 5)
    _train_step(conv, x)
    from dataclasses import replace

    from tiledispatch.integrations.torch_dispatch import OURS
    key = next(k for k, e in runtime._entries.items() if e.problem.direction.value == "bwd_weight")
    runtime._entries[key] = replace(runtime._entries[key], decision=replace(runtime._entries[key].decision, impl=OURS))
    runtime.timer = FakeTimer(1.0, 2.0)  # the layer, timed both ways: as decided is faster
    calls.clear()
    _train_step(conv, x)
    assert sorted(calls) == ["bwd_data", "bwd_weight", "fwd"] and ours.calls == 1
    calls.clear()
    with torch.no_grad():  # inference needs only the forward, settled on PyTorch
        conv(x)
    assert calls == []


def test_pytorch_policy_runs_plain_convolutions(runtime_factory, monkeypatch):
    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="pytorch")
    calls = _count_runs(runtime, monkeypatch)
    _train_step(_conv(), torch.randn(2, 4, 5, 5))
    assert calls == []
