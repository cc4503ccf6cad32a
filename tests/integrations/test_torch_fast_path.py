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
    runtime.timer = FakeTimer(1.0, 2.0)  # the layer, timed both ways: as decided is faster
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
    assert tuple(conv(x).shape) == (2, 6, 6, 6)  # the entries made: the module keeps this call's resolution
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


# ---- the module's fast path: a TileConv keeps what tile_conv decided per call key ------------------------
def _runs(runtime, monkeypatch):
    """Directions reaching ``runtime.run`` (the module's PyTorch path reaches none)."""
    from tests.integrations.test_torch_dispatch import _count_runs

    return _count_runs(runtime, monkeypatch)


def _forward(conv, x, grad=True):
    with torch.set_grad_enabled(grad):
        return conv(x)


def test_steady_state_module_calls_skip_the_resolution(spied, monkeypatch):
    from tiledispatch.integrations import torch as integration

    runtime, ours, _ = spied
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _train_step(conv, x)  # makes the entries (a new generation: what the module resolved is dropped)
    first = _train_step(conv, x)
    with torch.no_grad():
        conv(x)

    def resolved_again(*args, **kwargs):
        raise AssertionError("resolved again on the fast path")

    monkeypatch.setattr(integration, "tile_conv", resolved_again)
    monkeypatch.setattr(integration, "_resolve", resolved_again)
    monkeypatch.setattr(runtime, "accepts", resolved_again)
    monkeypatch.setattr(runtime, "pytorch_serves", resolved_again)
    ours.calls = 0
    again = _train_step(conv, x)
    with torch.no_grad():
        conv(x)
    assert ours.calls == 4
    for a, b in zip(first, again):
        assert torch.equal(a, b) and a.stride() == b.stride()


@pytest.mark.parametrize("grad", [True, False])
def test_a_policy_change_between_calls_is_followed(spied, monkeypatch, grad):
    runtime, ours, _ = spied
    calls = _runs(runtime, monkeypatch)
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _forward(conv, x, grad)
    assert calls == ["fwd"] and ours.calls == 1
    runtime.policy = "pytorch"  # every direction on PyTorch: the module runs F.conv2d itself
    calls.clear()
    y = _forward(conv, x, grad)
    assert calls == [] and ours.calls == 1
    assert (type(y.grad_fn).__name__ == "ConvolutionBackward0") if grad else y.grad_fn is None
    runtime.policy = "ours"
    y = _forward(conv, x, grad)
    assert calls == ["fwd"] and ours.calls == 2
    assert (type(y.grad_fn).__name__ == "EagerConvBackward") if grad else y.grad_fn is None


def test_cleared_runtime_caches_are_followed(runtime_factory, monkeypatch):
    from tests.integrations.test_torch_dispatch import FakeTimer

    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="fastest", timer=FakeTimer(3.0, 1.0))
    monkeypatch.setattr(runtime, "_launch", OursSpy())
    calls = _runs(runtime, monkeypatch)
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _train_step(conv, x)  # decided: PyTorch everywhere, the module runs F.conv2d from now on
    calls.clear()
    _train_step(conv, x)
    assert calls == [] and runtime.timer.calls == 6
    runtime.clear()  # decisions forgotten: the next step goes through the runtime and decides again
    _train_step(conv, x)
    assert sorted(calls) == ["bwd_data", "bwd_weight", "fwd"] and runtime.timer.calls == 12


def test_changed_settings_and_a_new_runtime_are_followed(spied, runtime_factory, monkeypatch):
    runtime, ours, _ = spied
    calls = _runs(runtime, monkeypatch)
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _forward(conv, x, grad=False)
    runtime.dtypes = (torch.float16,)  # fp32 no longer ours: PyTorch's own convolution
    _forward(conv, x, grad=False)
    assert calls == ["fwd"] and ours.calls == 1
    runtime.dtypes = (torch.float32,)
    runtime.cpu = "torch"  # CPU tensors no longer ours
    _forward(conv, x, grad=False)
    assert calls == ["fwd"] and ours.calls == 1
    runtime.cpu = "interpret"
    _forward(conv, x, grad=False)
    assert calls == ["fwd", "fwd"] and ours.calls == 2
    other = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="pytorch")
    other._entries.generation = runtime._entries.generation  # only the runtime's identity tells them apart
    theirs = _runs(other, monkeypatch)
    _forward(conv, x, grad=False)
    assert theirs == [] and ours.calls == 2  # the module follows configure(): F.conv2d under "pytorch"


def test_grad_mode_and_requires_grad_switches_are_followed(runtime_factory, monkeypatch):
    """fwd and bwd_weight settled on PyTorch, bwd_data on ours: whether the module runs F.conv2d or
    EagerConv depends on which gradients flow, on every call."""
    from tests.integrations.test_torch_dispatch import FakeTimer
    from tests.integrations.test_torch_eager import _settle

    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="fastest", timer=FakeTimer(1.0, 2.0))
    monkeypatch.setattr(runtime, "_launch", OursSpy())
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _train_step(conv, x)
    _settle(runtime, {"fwd": "pytorch", "bwd_data": "ours", "bwd_weight": "pytorch"})
    needs_x = x.clone().requires_grad_()
    assert type(conv(needs_x).grad_fn).__name__ == "EagerConvBackward"  # bwd_data is ours
    with torch.no_grad():
        assert conv(needs_x).grad_fn is None
    assert type(conv(x).grad_fn).__name__ == "ConvolutionBackward0"  # only bwd_weight: all PyTorch
    assert type(conv(needs_x).grad_fn).__name__ == "EagerConvBackward"
    conv.weight.requires_grad_(False)
    assert type(conv(needs_x).grad_fn).__name__ == "EagerConvBackward"
    assert conv(x).grad_fn is None
    conv.weight.requires_grad_(True)
    assert type(conv(x).grad_fn).__name__ == "ConvolutionBackward0"


def test_a_new_input_shape_or_dtype_is_resolved_on_its_own(runtime_factory, monkeypatch):
    from tests.integrations.test_torch_dispatch import FakeTimer

    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32, torch.float64), policy="fastest",
                              timer=FakeTimer(3.0, 1.0))
    monkeypatch.setattr(runtime, "_launch", OursSpy())
    calls = _runs(runtime, monkeypatch)
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _forward(conv, x, grad=False)
    _forward(conv, x, grad=False)
    assert calls == ["fwd"]  # decided PyTorch: the second call ran F.conv2d
    _forward(conv, torch.randn(3, 4, 5, 5), grad=False)
    _forward(conv, torch.randn(2, 4, 7, 7), grad=False)
    _forward(conv.double(), x.double(), grad=False)
    assert calls == ["fwd"] * 4  # each a new problem, decided through the runtime
    _forward(conv, torch.randn(3, 4, 5, 5).double(), grad=False)
    assert len(calls) == 5


def test_autocast_is_applied_on_every_call(runtime_factory, monkeypatch):
    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32, torch.bfloat16), policy="ours")
    seen = []
    ours = OursSpy()

    def spy(entry, first, second):
        seen.append(first.dtype)
        return ours(entry, first, second)

    monkeypatch.setattr(runtime, "_launch", spy)
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    assert _forward(conv, x, grad=False).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _forward(conv, x, grad=False).dtype == torch.bfloat16
    assert _forward(conv, x, grad=False).dtype == torch.float32
    assert seen == [torch.float32, torch.bfloat16, torch.float32]


def test_dispatch_modes_keep_the_custom_ops_after_eager_calls(spied):
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils._python_dispatch import TorchDispatchMode

    runtime, ours, _ = spied
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _train_step(conv, x)
    seen = []

    class Recording(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Recording():
        conv(x)
    assert any("tiledispatch.conv_fwd" in name for name in seen)
    weight = conv.weight.detach()
    graph = make_fx(lambda x, w: torch.func.functional_call(conv, {"weight": w}, (x,)), tracing_mode="fake")(x, weight)
    assert "tiledispatch.conv_fwd" in str(graph.graph)


def test_changed_groups_are_passed_on(spied, monkeypatch):
    runtime, _, _ = spied
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    _forward(conv, x, grad=False)
    groups = []

    def recording(direction, first, second, x_shape, w_shape, groups_, *params):
        groups.append(groups_)
        return torch.empty(0)

    monkeypatch.setattr(runtime, "run", recording)
    _forward(conv, x, grad=False)
    conv.groups = 1
    _forward(conv, x, grad=False)
    assert groups == [2, 1]


def test_copies_and_pickles_of_a_called_module_start_without_resolved_calls(spied):
    import copy
    import io

    runtime, ours, _ = spied
    conv, x = _conv(), torch.randn(2, 4, 5, 5)
    expected = _train_step(conv, x)
    assert conv.__dict__["_tile_calls"].runtime is runtime
    buffer = io.BytesIO()
    torch.save(conv, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(conv), torch.load(buffer, weights_only=False)):
        calls = other.__dict__["_tile_calls"]
        assert not calls and calls.runtime is None
        ours.calls = 0
        for a, b in zip(expected, _train_step(other, x)):
            assert torch.equal(a, b)
        assert ours.calls == 3 and other.__dict__["_tile_calls"].runtime is runtime


def test_double_backward_is_refused(spied):
    conv = _conv()
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    y = conv(x)
    assert type(y.grad_fn).__name__ == "EagerConvBackward"
    grad = torch.randn_like(y, requires_grad=True)
    grad_x, = torch.autograd.grad(y, x, grad, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        grad_x.sum().backward()


def test_other_devices_take_tile_conv_on_every_call(spied, monkeypatch):
    """Autocast on devices the cheap check does not see (MPS) must still cast: tensors on devices
    other than CPU and CUDA go through tile_conv every time (meta tensors stand in for them here;
    tile_conv's autocast check refuses their device, as it always did)."""
    from tiledispatch.integrations import torch as integration

    tile_conv, seen = integration.tile_conv, []

    def counting(x, *args):
        seen.append(x.device.type)
        return tile_conv(x, *args)

    monkeypatch.setattr(integration, "tile_conv", counting)
    conv, meta = _conv(), _conv().to("meta")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="autocast"):
            _forward(meta, torch.empty(2, 4, 5, 5, device="meta"), grad=False)
    assert seen == ["meta", "meta"]
    for _ in range(2):
        _forward(conv, torch.randn(2, 4, 5, 5), grad=False)
    assert seen == ["meta", "meta"]  # CPU: the fast path
