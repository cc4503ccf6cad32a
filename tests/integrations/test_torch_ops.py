"""The PyTorch integration on CPU: the custom ops' wiring (forward and both backward directions
through autograd) under the Triton interpreter on tiny shapes, their fake implementations under
``torch.compile``, and ``swap_convs`` on small models."""

from __future__ import annotations

import logging

import pytest

from tiledispatch.native.accuracy import RELATIVE_ERROR_LIMIT
from tiledispatch.native.problem import DType

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
nn = torch.nn
F = torch.nn.functional

DTYPES = {torch.float16: DType.FP16, torch.float32: DType.FP32}

# (label, ndim, Conv kwargs, input spatial size); odd channel counts, strides, dilation, 'same' with an
# even filter (asymmetric padding), depthwise with a multiplier.
CASES = [
    ("grouped_stride2", 2, dict(in_channels=6, out_channels=9, kernel_size=3, stride=2, padding=1, groups=3), (7, 6)),
    ("depthwise_dilated", 2, dict(in_channels=8, out_channels=8, kernel_size=3, padding=2, dilation=2, groups=8),
     (6, 5)),
    ("dw_multiplier_rect", 2, dict(in_channels=4, out_channels=8, kernel_size=(3, 1), padding=(1, 0), groups=4),
     (5, 4)),
    ("same_even_kernel", 2, dict(in_channels=4, out_channels=4, kernel_size=(2, 4), padding="same", groups=2),
     (5, 6)),
    ("grouped_3d", 3, dict(in_channels=4, out_channels=6, kernel_size=(2, 3, 3), stride=(1, 2, 1), padding=1,
                           groups=2), (3, 5, 4)),
]


def _rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_tile_conv_matches_float64_through_autograd(case, dtype, interpreted):
    from tiledispatch.integrations.torch import TileConv2d, TileConv3d

    _, ndim, kwargs, spatial = case
    base = (nn.Conv2d if ndim == 2 else nn.Conv3d)(**kwargs, bias=True)
    reference = base.double()
    tile = (TileConv2d if ndim == 2 else TileConv3d).from_conv(
        (nn.Conv2d if ndim == 2 else nn.Conv3d)(**kwargs, bias=True).to(dtype))
    with torch.no_grad():  # the same values in both (rounded to dtype once)
        tile.weight.copy_(reference.weight.to(dtype))
        tile.bias.copy_(reference.bias.to(dtype))
        reference.weight.copy_(tile.weight.double())
        reference.bias.copy_(tile.bias.double())
    x = torch.randn(3, kwargs["in_channels"], *spatial).to(dtype)
    x_ref = x.double().requires_grad_()
    x_tile = x.clone().requires_grad_()

    y_ref = reference(x_ref)
    y = tile(x_tile)
    assert y.dtype == dtype and y.shape == y_ref.shape
    assert y.is_contiguous(memory_format=torch.channels_last if ndim == 2 else torch.channels_last_3d)
    grad = torch.randn(y_ref.shape).to(dtype)
    y_ref.backward(grad.double())
    y.backward(grad)

    limit = RELATIVE_ERROR_LIMIT[DTYPES[dtype]]
    for name, ours, expected in (("output", y, y_ref), ("grad_input", x_tile.grad, x_ref.grad),
                                 ("grad_weight", tile.weight.grad, reference.weight.grad),
                                 ("grad_bias", tile.bias.grad, reference.bias.grad)):
        assert _rel(ours, expected) <= limit, f"{name}: relative error {_rel(ours, expected):.3g} > {limit}"
    from tiledispatch.integrations.torch import get_runtime

    entries = get_runtime().entries()
    assert sorted(e.problem.direction.value for e in entries) == ["bwd_data", "bwd_weight", "fwd"]
    # fp16 and bf16 models ship for sm_90, none for fp32: the analytic fallback chooses those.
    shipped = {torch.float32: "local:analytic", torch.float16: "local:lgbm-sm_90-fp16-"}[dtype]
    assert all(e.backend == "interpret" and e.choice.source.startswith(shipped) for e in entries)


@pytest.mark.interpreter
def test_opcheck_fake_and_autograd_registrations(interpreted):
    """torch.library.opcheck: schema, fake implementation vs real strides, autograd registration."""
    from tiledispatch.integrations import torch_ops  # noqa: F401  (registers the ops)

    cl = torch.channels_last
    x = torch.randn(2, 4, 5, 5).contiguous(memory_format=cl)
    w = torch.randn(6, 2, 3, 3).contiguous(memory_format=cl)
    params = ([1, 1], [1, 1], [1, 1], [1, 1], 2)
    dy = torch.randn(2, 6, 5, 5).contiguous(memory_format=cl)
    ops = torch.ops.tiledispatch
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(ops.conv_fwd.default, (x.requires_grad_(), w.requires_grad_(), *params[:4], 2),
                          test_utils=checks)
    torch.library.opcheck(ops.conv_bwd_data.default, (dy, w.detach(), [5, 5], *params[:4], 2), test_utils=checks)
    torch.library.opcheck(ops.conv_bwd_weight.default, (x.detach(), dy, [3, 3], *params[:4], 2), test_utils=checks)


def _small_model(dtype=torch.float32):
    return nn.Sequential(
        nn.Conv2d(4, 8, 3, padding=1, groups=2, bias=False), nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), nn.ReLU(),
        nn.Conv2d(8, 4, 1),  # dense: left to PyTorch by default
    ).to(dtype)


@pytest.mark.interpreter
def test_torch_compile_keeps_the_custom_ops_in_one_graph(interpreted):
    from tiledispatch.integrations.torch import swap_convs

    torch.manual_seed(0)
    model = swap_convs(_small_model())
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    x = torch.randn(2, 4, 6, 6)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=recording_backend, fullgraph=True)
    result = compiled(x)  # first: the modules' first call is traced (nothing eager cached before it)
    assert _rel(result, model(x)) < 1e-5
    assert len(graphs) == 1 and graphs[0].count("tiledispatch.conv_fwd") == 2


@pytest.mark.interpreter
def test_torch_compile_aot_eager_forward_and_backward(interpreted):
    """aot_eager traces forward and backward through the fake implementations, then runs the real ops."""
    from tiledispatch.integrations.torch import swap_convs

    torch.manual_seed(0)
    model = swap_convs(_small_model())
    x = torch.randn(2, 4, 6, 6)
    eager_x, compiled_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    model(eager_x).square().sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True, dynamic=False)
    compiled(compiled_x).square().sum().backward()
    assert _rel(compiled_x.grad, eager_x.grad) < 1e-5
    for eager, param in zip(eager_grads, model.parameters()):
        assert _rel(param.grad, eager) < 1e-5


class _Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        shared = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.a = shared
        self.b = shared                                                      # the same module twice
        self.grouped = nn.Conv2d(4, 8, 3, padding="same", groups=2)
        self.dense = nn.Conv2d(8, 8, 1)
        self.reflect = nn.Conv2d(8, 8, 3, padding=1, groups=8, padding_mode="reflect")
        self.video = nn.Conv3d(8, 8, 3, padding=1, groups=4, bias=False)

    def forward(self, x):
        x = self.reflect(self.dense(self.grouped(self.b(self.a(x)))))
        return self.video(x.unsqueeze(2).expand(-1, -1, 3, -1, -1))


def test_swap_convs_shares_parameters_and_state_dict():
    from tiledispatch.integrations.torch import TileConv2d, TileConv3d, restore_convs, swap_convs, swapped_convs

    model = _Mixed()
    before = {k: v.data_ptr() for k, v in model.state_dict().items()}
    swap_convs(model)
    assert type(model.a) is TileConv2d and model.a is model.b
    assert type(model.grouped) is TileConv2d and type(model.video) is TileConv3d
    assert type(model.dense) is nn.Conv2d                 # dense: only with include_dense
    assert type(model.reflect) is nn.Conv2d               # padding_mode 'reflect' is left alone
    assert {k: v.data_ptr() for k, v in model.state_dict().items()} == before
    assert swapped_convs(model) == ["a", "grouped", "video"]
    restore_convs(model)
    assert not swapped_convs(model) and type(model.grouped) is nn.Conv2d
    assert {k: v.data_ptr() for k, v in model.state_dict().items()} == before

    swap_convs(model, include_dense=True)
    assert type(model.dense) is TileConv2d and type(model.reflect) is nn.Conv2d
    restore_convs(model)
    swap_convs(model, predicate=lambda name, conv: name == "video")
    assert swapped_convs(model) == ["video"]


def test_cpu_tensors_run_pytorch_and_say_so_once(runtime_factory, caplog):
    from tiledispatch.integrations.torch import swap_convs

    runtime = runtime_factory()  # cpu="torch": the default
    torch.manual_seed(0)
    model = _Mixed()
    x = torch.randn(2, 4, 6, 6)
    expected = model(x)
    swap_convs(model)
    with caplog.at_level(logging.INFO, logger="tiledispatch.integrations"):
        out = model(x)
        model(x)
    assert _rel(out, expected) < 1e-6
    assert not runtime.entries()  # nothing selected: PyTorch ran every convolution
    lines = [r.getMessage() for r in caplog.records if "PyTorch's kernels" in r.getMessage()]
    assert len(lines) == 1, lines


def test_dtypes_outside_the_runtime_go_to_pytorch(interpreted):
    from tiledispatch.integrations.torch import tile_conv

    x, w = torch.randn(1, 4, 5, 5, dtype=torch.float64), torch.randn(4, 2, 3, 3, dtype=torch.float64)
    assert _rel(tile_conv(x, w, None, 1, 1, 1, 2), F.conv2d(x, w, None, 1, 1, 1, 2)) < 1e-12
    assert not interpreted.entries()


def test_padding_of():
    from tiledispatch.integrations.torch import padding_of

    assert padding_of("same", (2, 4), (1, 1)) == ((0, 1), (1, 2))
    assert padding_of("same", (3, 3), (2, 1)) == ((2, 1), (2, 1))
    assert padding_of("valid", (3, 3), (1, 1)) == ((0, 0), (0, 0))
    assert padding_of((1, 2), (3, 5), (1, 1)) == ((1, 2), (1, 2))


def test_conv_subclasses_keeping_forward_are_swapped():
    """torchvision's Conv3DSimple only changes __init__: it is swapped; a subclass with its own forward is not."""
    from tiledispatch.integrations.torch import TileConv3d, swap_convs

    class Simple(nn.Conv3d):
        def __init__(self, channels):
            super().__init__(channels, channels, 3, padding=1, groups=channels)

    class Custom(nn.Conv3d):
        def forward(self, x):
            return super().forward(x) * 2

    model = nn.Sequential(Simple(4), Custom(4, 4, 1, groups=2))
    swap_convs(model)
    assert type(model[0]) is TileConv3d and type(model[1]) is Custom


@pytest.mark.interpreter
def test_autocast_runs_fp32_modules_in_the_autocast_dtype(interpreted):
    from tiledispatch.integrations.torch import TileConv2d

    conv = TileConv2d(4, 6, 3, padding=1, groups=2)
    x = torch.randn(2, 4, 5, 5)
    with torch.autocast("cpu", dtype=torch.float16):
        y = conv(x)
    assert y.dtype == torch.float16
    assert [e.problem.dtype for e in interpreted.entries()] == [DType.FP16]
    expected = F.conv2d(x.half().double(), conv.weight.half().double(), conv.bias.half().double(), 1, 1, 1, 2)
    assert _rel(y, expected) <= RELATIVE_ERROR_LIMIT[DType.FP16]


def test_imports_have_no_side_effects():
    """tiledispatch.integrations imports nothing; the torch module neither touches CUDA nor the network."""
    import subprocess
    import sys

    code = ("import sys, tiledispatch.integrations; assert 'torch' not in sys.modules, 'torch imported'\n"
            "import tiledispatch.integrations.torch as t, torch\n"
            "assert not torch.cuda.is_initialized(); assert 'grpc' not in sys.modules, 'grpc imported'\n"
            "assert t.torch_ops.conv_fwd is not None and hasattr(torch.ops.tiledispatch, 'conv_bwd_weight')\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.interpreter
def test_kernels_chosen_by_a_running_service(runtime_factory, tmp_path):
    """Runtime(target=...): every direction's kernel comes from the service's Select."""
    from tests.service.harness import in_process_server, settings_for
    from tiledispatch.integrations.torch import TileConv2d

    with in_process_server(settings_for(tmp_path)) as (port, _):
        runtime = runtime_factory(cpu="interpret", dtypes=(torch.float16,), target=f"127.0.0.1:{port}",
                                  timeout_s=10.0)
        conv = TileConv2d(8, 8, 3, padding=1, groups=8, bias=False).half()
        x = torch.randn(2, 8, 6, 6).half().requires_grad_()
        y = conv(x)
        y.float().sum().backward()
    sources = sorted((e.problem.direction.value, e.choice.source.split(":")[0]) for e in runtime.entries())
    assert sources == [("bwd_data", "remote"), ("bwd_weight", "remote"), ("fwd", "remote")]
    expected = F.conv2d(x.detach().double(), conv.weight.double(), None, 1, 1, 1, 8)
    assert _rel(y, expected) <= RELATIVE_ERROR_LIMIT[DType.FP16]
    assert x.grad is not None and conv.weight.grad is not None
