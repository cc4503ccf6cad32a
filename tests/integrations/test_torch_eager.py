"""Eager mode without the custom ops' dispatcher: swapped layers call the runtime through
``torch_ops.EagerConv`` (a hand-written autograd Function) per direction, ours or PyTorch's as the
policy and its decisions say; traced code (``torch.compile``, fake tensors, ``make_fx``) keeps the
custom ops. On CPU: our kernel spied (``Runtime._launch``) or run under the Triton interpreter."""

from __future__ import annotations

import pytest

from tests.integrations.test_torch_dispatch import OursSpy, _count_runs

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
nn = torch.nn
F = torch.nn.functional

EAGER = "EagerConvBackward"
CUSTOM_OP = "GeneratedBackwardFor_tiledispatch_conv_fwd_defaultBackward"


def _conv(bias=False):
    from tiledispatch.integrations.torch import TileConv2d

    torch.manual_seed(0)
    return TileConv2d(4, 6, 3, padding=1, groups=2, bias=bias)


def _rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def _settle(runtime, impl_by_direction):
    """Decide every entry of ``runtime`` as ``impl_by_direction[direction]`` says."""
    from dataclasses import replace

    from tiledispatch.integrations.torch_dispatch import Decision

    for key, entry in list(runtime._entries.items()):
        impl = impl_by_direction[entry.problem.direction.value]
        runtime._entries[key] = replace(entry, decision=Decision(impl, 1.0, 1.0, 0.0))


@pytest.fixture
def spied(runtime_factory, monkeypatch):
    """A CPU runtime (policy ``ours``) whose kernel is a spy answering PyTorch's result."""
    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="ours")
    ours = OursSpy()
    monkeypatch.setattr(runtime, "_launch", ours)
    return runtime, ours


def test_eager_training_step_uses_the_function_not_the_custom_ops(spied, monkeypatch):
    runtime, ours = spied
    calls = _count_runs(runtime, monkeypatch)
    conv = _conv()
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    y = conv(x)
    assert type(y.grad_fn).__name__ == EAGER
    y.square().sum().backward()
    assert sorted(calls) == ["bwd_data", "bwd_weight", "fwd"] and ours.calls == 3
    x_ref, w_ref = x.detach().clone().requires_grad_(), conv.weight.detach().clone().requires_grad_()
    F.conv2d(x_ref, w_ref, None, 1, 1, 1, 2).square().sum().backward()
    assert _rel(x.grad, x_ref.grad) < 1e-6 and _rel(conv.weight.grad, w_ref.grad) < 1e-6


def test_only_the_needed_backward_directions_run(spied, monkeypatch):
    runtime, _ = spied
    calls = _count_runs(runtime, monkeypatch)
    conv = _conv()
    conv(torch.randn(2, 4, 5, 5)).sum().backward()  # the input needs no gradient
    assert sorted(calls) == ["bwd_weight", "fwd"]
    calls.clear()
    conv.weight.requires_grad_(False)
    conv(torch.randn(2, 4, 5, 5, requires_grad=True)).sum().backward()  # a frozen layer
    assert sorted(calls) == ["bwd_data", "fwd"]


def test_inference_builds_no_autograd_node(spied, monkeypatch):
    runtime, ours = spied
    calls = _count_runs(runtime, monkeypatch)
    with torch.no_grad():
        y = _conv()(torch.randn(2, 4, 5, 5))
    assert y.grad_fn is None and calls == ["fwd"] and ours.calls == 1


def test_split_decisions_run_each_direction_on_its_choice(runtime_factory, monkeypatch):
    """fwd and bwd_weight settled on PyTorch, bwd_data on ours (the split the H200 run saw most):
    the layer runs through the Function; only bwd_data reaches our kernel."""
    from tests.integrations.test_torch_dispatch import FakeTimer

    runtime = runtime_factory(cpu="interpret", dtypes=(torch.float32,), policy="fastest",
                              timer=FakeTimer(1.0, 2.0))
    ours = OursSpy()
    monkeypatch.setattr(runtime, "_launch", ours)
    conv = _conv()
    x = torch.randn(2, 4, 5, 5)
    conv(x.clone().requires_grad_()).sum().backward()  # creates (and decides) the three problems
    _settle(runtime, {"fwd": "pytorch", "bwd_data": "ours", "bwd_weight": "pytorch"})
    calls = _count_runs(runtime, monkeypatch)
    ours.calls = 0
    conv.zero_grad()
    x_in = x.clone().requires_grad_()
    y = conv(x_in)
    assert type(y.grad_fn).__name__ == EAGER
    y.square().sum().backward()
    assert sorted(calls) == ["bwd_data", "bwd_weight", "fwd"] and ours.calls == 1
    x_ref, w_ref = x.clone().requires_grad_(), conv.weight.detach().clone().requires_grad_()
    F.conv2d(x_ref, w_ref, None, 1, 1, 1, 2).square().sum().backward()
    assert _rel(y, F.conv2d(x, w_ref, None, 1, 1, 1, 2)) < 1e-6
    assert _rel(x_in.grad, x_ref.grad) < 1e-6 and _rel(conv.weight.grad, w_ref.grad) < 1e-6
    _settle(runtime, {"fwd": "pytorch", "bwd_data": "pytorch", "bwd_weight": "pytorch"})
    assert type(conv(x.clone().requires_grad_()).grad_fn).__name__ == "ConvolutionBackward0"  # plain F.conv2d


def test_fake_tensors_keep_the_custom_ops(spied):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tiledispatch.integrations.torch import tile_conv

    runtime, ours = spied
    with FakeTensorMode():
        x = torch.empty(2, 4, 5, 5)
        w = torch.empty(6, 2, 3, 3)
        y = tile_conv(x, w, None, 1, 1, 1, 2)
    assert tuple(y.shape) == (2, 6, 5, 5) and y.is_contiguous(memory_format=torch.channels_last)
    assert ours.calls == 0 and not runtime.entries()  # the fake implementation answered


def test_make_fx_records_the_custom_op(spied):
    from torch.fx.experimental.proxy_tensor import make_fx

    from tiledispatch.integrations.torch import tile_conv

    graph = make_fx(lambda x, w: tile_conv(x, w, None, 1, 1, 1, 2), tracing_mode="fake")(
        torch.randn(2, 4, 5, 5), torch.randn(6, 2, 3, 3))
    assert "tiledispatch.conv_fwd" in str(graph.graph)


@pytest.mark.interpreter
@pytest.mark.parametrize("grads", ["both", "input", "weight"])
def test_function_and_custom_ops_give_the_same_results(interpreted, monkeypatch, grads):
    """Our kernels under the interpreter, the layer once through EagerConv and once through the
    custom ops (forced): identical outputs and gradients."""
    from tiledispatch.integrations import torch as integration

    conv = _conv(bias=True)
    conv.weight.requires_grad_(grads != "input")
    torch.manual_seed(1)
    x = torch.randn(2, 4, 5, 5)
    grad = torch.randn(2, 6, 5, 5)
    results = []
    for eager in (True, False):
        if not eager:
            monkeypatch.setattr(integration, "_eager", lambda x, w: False)
        conv.zero_grad()
        x_in = x.clone().requires_grad_(grads != "weight")
        y = conv(x_in)
        assert type(y.grad_fn.next_functions[0][0]).__name__ == (EAGER if eager else CUSTOM_OP)
        y.backward(grad)
        results.append((y.detach(), x_in.grad, conv.weight.grad, conv.bias.grad))
    for ours, theirs in zip(*results):
        assert (ours is None) == (theirs is None)
        if ours is not None:
            assert torch.equal(ours, theirs)
