"""The runtime's steady-state fast path: per call key, a route (entry and implementation, the
policy and the decision applied) derived from the entries, dropped whenever they or the policy
change; a changed shape, stride or dtype misses it and goes through the full selection."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.integrations.test_torch_dispatch import OursSpy, _train_step

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
F = torch.nn.functional


def _conv(stride=1):
    from tiledispatch.integrations.torch import TileConv2d

    torch.manual_seed(0)
    return TileConv2d(4, 6, 3, stride=stride, padding=1, groups=2, bias=False)


@pytest.fixture
def spied(runtime_factory, monkeypatch):
    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32, torch.float16), policy="ours")
    ours = OursSpy()
    monkeypatch.setattr(runtime, "_launch", ours)
    full = []
    dispatch = runtime._dispatch

    def counting(call):
        full.append(call[0].value)
        return dispatch(call)

    monkeypatch.setattr(runtime, "_dispatch", counting)
    return runtime, ours, full


def test_steady_state_reuses_the_route_without_selection(spied, monkeypatch):
    runtime, ours, full = spied
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _train_step(conv, x)
    assert sorted(full) == ["bwd_data", "bwd_weight", "fwd"] and len(runtime._routes) == 3
    routed = {key: route[0] for key, route in runtime._routes.items()}
    assert all(runtime._entries[key] is entry for key, entry in routed.items())
    cached = runtime.selector.stats.cached
    full.clear()
    ours.calls = 0

    def no_selection(*args, **kwargs):
        raise AssertionError("entry() called on the fast path")

    monkeypatch.setattr(runtime, "entry", no_selection)
    _train_step(conv, x)
    assert full == [] and ours.calls == 3
    assert runtime.selector.stats.cached == cached + 3  # still counted as selection cache hits


@pytest.mark.parametrize("change", ["batch", "spatial", "stride", "dtype"])
def test_a_changed_shape_stride_or_dtype_misses_the_fast_path(spied, change):
    runtime, ours, full = spied
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _train_step(conv, x)
    full.clear()
    if change == "batch":
        x = torch.randn(3, 4, 5, 5)
    elif change == "spatial":
        x = torch.randn(2, 4, 7, 5)
    elif change == "stride":
        conv = _conv(stride=2)
    else:
        conv, x = conv.half(), x.half()
    _train_step(conv, x)
    assert sorted(full) == ["bwd_data", "bwd_weight", "fwd"]  # each direction through full selection
    assert len(runtime._routes) == 6 and len(runtime.entries()) == 6
    full.clear()
    _train_step(conv, x)
    assert full == []


def test_routes_follow_the_entries_and_the_policy(runtime_factory, monkeypatch):
    from tests.integrations.test_torch_dispatch import FakeTimer
    from tiledispatch.integrations.torch_dispatch import OURS, PYTORCH

    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="fastest", timer=FakeTimer(3.0, 1.0))
    ours = OursSpy()
    monkeypatch.setattr(runtime, "_launch", ours)
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _train_step(conv, x)  # decided: PyTorch everywhere
    assert {route[1] for route in runtime._routes.values()} == {False}
    assert type(conv(x.clone().requires_grad_()).grad_fn).__name__ == "ConvolutionBackward0"
    key = next(k for k, e in runtime._entries.items() if e.problem.direction.value == "bwd_data")
    runtime._entries[key] = replace(runtime._entries[key], decision=replace(runtime._entries[key].decision,
                                                                           impl=OURS))
    assert key not in runtime._routes and len(runtime._routes) == 2  # a changed entry drops its own route
    assert not runtime._serves  # and every pytorch_serves answer
    ours.calls = 0
    y = conv(x.clone().requires_grad_())
    assert type(y.grad_fn).__name__ == "EagerConvBackward"
    y.sum().backward()
    assert ours.calls == 1 and runtime._routes[key] == (runtime._entries[key], True)
    runtime.policy = "pytorch"
    assert not runtime._routes and not runtime._serves
    ours.calls = 0
    _train_step(conv, x)
    assert ours.calls == 0 and all(route == (None, False) for route in runtime._routes.values())
    runtime.policy = "ours"
    _train_step(conv, x)
    assert ours.calls == 3 and {route[1] for route in runtime._routes.values()} == {True}
    assert sorted(e.decision.impl for e in runtime.entries()) == [OURS, PYTORCH, PYTORCH]  # decisions are kept
    runtime.clear()
    assert not runtime._routes and not runtime.entries()


def test_fast_path_results_equal_the_full_path(spied):
    runtime, ours, full = spied
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    first = _train_step(conv, x)
    assert full
    full.clear()
    fast = _train_step(conv, x)
    assert full == []
    runtime._entries.forget()  # no routes: the full path again
    slow = _train_step(conv, x)
    assert sorted(full) == ["bwd_data", "bwd_weight", "fwd"]
    for a, b, c in zip(first, fast, slow):
        assert torch.equal(a, b) and torch.equal(b, c)
        assert a.stride() == b.stride() == c.stride()
    x_ref, w_ref = x.clone().requires_grad_(), conv.weight.detach().clone().requires_grad_()
    y_ref = F.conv2d(x_ref, w_ref, conv.bias, 1, 1, 1, 2)
    y_ref.square().sum().backward()
    assert torch.allclose(fast[0], y_ref, atol=1e-5) and torch.allclose(fast[1], x_ref.grad, atol=1e-5)


def test_module_parameters_are_recomputed_when_set(spied):
    runtime, ours, full = spied
    conv, x = _conv(), torch.randn(2, 4, 6, 6)
    assert tuple(conv(x).shape) == (2, 6, 6, 6)
    conv.stride = (2, 2)
    conv.padding = (0, 0)
    y = conv(x)
    assert tuple(y.shape) == (2, 6, 2, 2)
    assert torch.allclose(y, F.conv2d(x, conv.weight, conv.bias, 2, 0, 1, 2), atol=1e-6)


def test_plan_run_inline_acceptance_keeps_the_errors():
    from tests.kernels.cases import MODEL_CASES, model_case
    from tiledispatch.native import launch

    problem, config = model_case(MODEL_CASES[0][0])
    plan = launch.launch_plan(problem, config, "interpret")
    dtype = launch.torch_dtype(problem.dtype)
    x_shape = launch.pytorch_shape(problem.operand_shapes[0], weight=False)
    w_shape = launch.pytorch_shape(problem.operand_shapes[1], weight=True)
    weight = torch.empty(w_shape, dtype=dtype).contiguous(memory_format=torch.channels_last)
    with pytest.raises(launch.LaunchError, match="must be channels-last"):
        plan.run(torch.empty(x_shape, dtype=dtype), weight, check_support=False)
    with pytest.raises(launch.LaunchError, match="dtype must be"):
        plan.run(torch.empty(x_shape, dtype=torch.float64), weight, check_support=False)
    with pytest.raises(launch.LaunchError, match="must be a torch.Tensor"):
        plan.run(None, weight, check_support=False)
