"""The C++ launch path (``torch_native``) on the GPU, with the registry in ``$TILEDISPATCH_REGISTRY_DIR``.

* every family × direction × ndim × dtype the registry holds, up to two kernels each (4 and 8 warps
  where both exist), on fresh random problems with odd channel counts and on depthwise / grouped
  model layers: the plan packs and registers, and its C++ run gives bitwise the Python path's result
  (the same binaries and arguments; our kernels are deterministic), which is within DESIGN §4's
  limit of the float64 reference; the Python path writes into a NaN-poisoned output and the C++
  result is allocated where a NaN-filled block of its size was just freed;
* a swapped layer's steady-state training calls go through C++ (the runtime's Python path is not
  called) and give bitwise the Python path's output and gradients, bias included;
* under ``fastest``, a layer whose decisions split it and whose timing chose all ours on the C++ path
  runs every direction there, bitwise as policy ``ours`` runs it;
* operand errors are ValueErrors naming the operand and the rule (as the Python path's LaunchError);
  a gradient the node was not planned for, and double backward, are refused.

Run: ``TILEDISPATCH_REGISTRY_DIR=... pytest -m gpu tests/integrations/test_torch_native_gpu.py``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tiledispatch.native.accuracy import RELATIVE_ERROR_LIMIT
from tiledispatch.native.configs import Family
from tiledispatch.native.problem import ConvProblem, Direction, DType

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.gpu
DTYPES = (DType.BF16, DType.FP16)


@pytest.fixture(scope="module")
def registry():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    directory = os.environ.get("TILEDISPATCH_REGISTRY_DIR")
    if not directory or not Path(directory).exists():
        pytest.skip("needs a built registry in TILEDISPATCH_REGISTRY_DIR")
    from tiledispatch.native.registry import Registry

    return Registry.load(directory, "sm_90")


@pytest.fixture
def native(monkeypatch):
    """The extension, built (a failed build fails the test: on a GPU machine it must build)."""
    from tiledispatch.integrations import torch_native

    monkeypatch.delenv(torch_native.ENABLE_ENV, raising=False)
    for name in ("_extension", "_unavailable", "_tried"):
        monkeypatch.setattr(torch_native, name, getattr(torch_native, name))
    torch_native.reset()
    assert torch_native.extension() is not None, torch_native.status()
    return torch_native


def _problems(direction: Direction, dtype: DType, ndim: int, rng: random.Random) -> list[ConvProblem]:
    out = []
    for _ in range(3):
        cg, kg = rng.choice([(1, 1), (1, 1), (3, 5), (7, 2), (12, 20), (40, 33)])
        groups = rng.choice([2, 3, 5, 8]) if (cg, kg) != (1, 1) else rng.choice([8, 13, 96])
        filt = tuple(rng.choice([1, 3, 5, 7]) for _ in range(ndim))
        stride = tuple(rng.choice([1, 1, 2]) for _ in range(ndim))
        dilation = tuple(rng.choice([1, 1, 2]) for _ in range(ndim))
        size = tuple(rng.randint(7, 21) if ndim == 2 else rng.randint(3, 9) for _ in range(ndim))
        size = tuple(max(s, d * (f - 1) + 1) for s, d, f in zip(size, dilation, filt))
        out.append(ConvProblem(direction=direction, dtype=dtype, batch=rng.randint(1, 4), groups=groups,
                               in_channels=groups * cg, out_channels=groups * kg, input_size=size, filter_size=filt,
                               stride=stride, dilation=dilation, pad_begin=tuple(f // 2 for f in filt),
                               pad_end=tuple(rng.randint(0, f // 2) for f in filt)))
    # model layers: depthwise 3x3 / 7x7 stride 1, ResNeXt's grouped 3x3 (C/G = 4, 8; and its stride-2 kind, the
    # halo family's strided program in 2D forward), depthwise 5x5 stride 2 on 13 channels (the group-padded direct and
    # dwrow kernels: copies, the v8 binary, the copy back)
    spatial = (14, 14) if ndim == 2 else (4, 14, 14)
    for groups, cg, filt, step in ((96, 1, 3, 1), (96, 1, 7, 1), (32, 4, 3, 1), (32, 8, 3, 1), (32, 8, 3, 2),
                                   (13, 1, 5, 2)):
        f = (filt,) * ndim if ndim == 2 else (3, filt, filt)
        stride = (step,) * ndim if ndim == 2 else (1, step, step)
        out.append(ConvProblem(direction=direction, dtype=dtype, batch=4, groups=groups, in_channels=groups * cg,
                               out_channels=groups * cg, input_size=spatial, filter_size=f, stride=stride,
                               dilation=(1,) * ndim, pad_begin=tuple(x // 2 for x in f),
                               pad_end=tuple(x // 2 for x in f)))
    return out


def _pytorch_face(tensor, weight: bool):
    """The grouped-shape tensor's values as a PyTorch-shaped channels-last tensor (the same bytes)."""
    from tiledispatch.native import launch

    shape = launch.pytorch_shape(tuple(tensor.shape), weight=weight)
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    out = torch.empty(shape, dtype=tensor.dtype, device=tensor.device, memory_format=fmt)
    out.permute(0, *range(2, out.dim()), 1).view(tensor.shape).copy_(tensor)
    return out


@pytest.mark.parametrize("ndim", (2, 3))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
def test_every_family_runs_like_the_python_path(registry, native, direction, dtype, ndim):
    from tiledispatch.native import launch
    from tiledispatch.native.bench import torch_reference
    from tiledispatch.native.support import is_supported

    rng = random.Random(f"{direction}-{dtype}-{ndim}-{random.random()}")
    configs = [c for c in registry.configs if c.direction is direction and c.dtype is dtype and c.ndim == ndim]
    if not configs:
        pytest.skip(f"the registry holds no {direction.value} {dtype.value} {ndim}d kernel (e.g. the tiny rule set)")
    limit = RELATIVE_ERROR_LIMIT[dtype]
    ran: dict = {}
    failures = []
    for problem in _problems(direction, dtype, ndim, rng):
        torch_dtype = launch.torch_dtype(dtype)
        first = torch.randn(problem.operand_shapes[0], device="cuda", dtype=torch_dtype)
        second = torch.randn(problem.operand_shapes[1], device="cuda", dtype=torch_dtype)
        reference = torch_reference(problem, first, second)
        weights = [w for _, w in launch._OPERANDS[direction]]
        first_pt, second_pt = _pytorch_face(first, weights[0]), _pytorch_face(second, weights[1])
        picked: dict = {}
        for config in configs:  # per family: one kernel per warp count and program kind (gwalk: TMA walks; dwrow:
            # the scalar binary; igemm / gemm1x1 / direct / dwrow: channel- or group-padded copies)
            variant = (config.num_warps, config.family is Family.GWALK and config.num_stages > 1,
                       config.family is Family.DWROW and config.vec == 1, config.pad_channels)
            if len(picked.setdefault(config.family, {})) < 4 and variant not in picked[config.family] \
                    and is_supported(problem, config):
                picked[config.family][variant] = config
        for family, by_warps in picked.items():
            for config in by_warps.values():
                plan = launch.launch_plan(problem, config, "compiled", registry.loader())
                plan_id = native.plan_id(plan, 0)
                if plan_id is None:
                    failures.append(f"{config.name}: not runnable in C++: {native.status()['refused']}")
                    continue
                poisoned = torch.full(problem.operand_shapes[2], float("nan"), device="cuda", dtype=torch_dtype)
                python = launch.run(problem, config, first, second, poisoned, loader=registry.loader())
                poison = torch.full(launch.pytorch_shape(problem.operand_shapes[2], weight=weights[2]),
                                    float("nan"), device="cuda", dtype=torch_dtype)
                del poison  # its block, NaN-filled, is what the C++ run's result is allocated from
                result = native._extension.run(first_pt, second_pt, plan_id)
                torch.cuda.synchronize()
                grouped = result.permute(0, *range(2, result.dim()), 1).reshape(problem.operand_shapes[2])
                error = float(torch.linalg.vector_norm(grouped.double() - reference)
                              / torch.linalg.vector_norm(reference).clamp_min(1e-30))
                if not torch.equal(grouped, python):
                    failures.append(f"{config.name} on {problem.key}: C++ result differs from the Python path's")
                elif not error <= limit:
                    failures.append(f"{config.name} on {problem.key}: error {error:.3g} > {limit}")
                ran.setdefault(family, 0)
                ran[family] += 1
    print(f"\n{direction.value} {dtype.value} {ndim}d: C++ runs per family "
          + ", ".join(f"{f.value} {n}" for f, n in sorted(ran.items(), key=lambda kv: kv[0].value)))
    assert ran, "no kernel ran"
    assert not failures, "\n".join(failures)


def _layer_net():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(24, 24, 7, padding=3, groups=24, bias=True),
                         nn.Conv2d(24, 48, 3, stride=2, padding=1, groups=6, bias=False))


def _train_step(model, x, grad):
    for p in model.parameters():
        p.grad = None
    x = x.detach().requires_grad_(True)
    y = model(x)
    y.backward(grad)
    return [y.detach(), x.grad, *[p.grad for p in model.parameters()]]


def test_steady_state_calls_run_in_cpp_like_the_python_path(registry, native, runtime_factory, monkeypatch):
    import copy

    from tiledispatch.integrations.torch import swap_convs

    torch.manual_seed(0)
    cl = torch.channels_last
    base = _layer_net().cuda().to(torch.bfloat16, memory_format=cl)
    x = torch.randn(4, 24, 20, 20, device="cuda").to(torch.bfloat16).contiguous(memory_format=cl)
    grad = torch.randn(4, 48, 10, 10, device="cuda").to(torch.bfloat16).contiguous(memory_format=cl)
    results = {}
    for path in ("python", "cpp"):
        runtime = runtime_factory(policy="ours", registry_dir=os.environ["TILEDISPATCH_REGISTRY_DIR"])
        if path == "python":
            monkeypatch.setenv(native.ENABLE_ENV, "0")
        else:
            monkeypatch.delenv(native.ENABLE_ENV)
        native.reset()
        assert (native.extension() is None) == (path == "python")
        model = swap_convs(copy.deepcopy(base))
        for _ in range(2):
            _train_step(model, x, grad)  # selection, then the entries' new generation re-resolved
        calls = {"runtime": 0}
        run = runtime.run

        def counting(*args, _run=run, _calls=calls):
            _calls["runtime"] += 1
            return _run(*args)

        monkeypatch.setattr(runtime, "run", counting)
        results[path] = _train_step(model, x, grad)
        torch.cuda.synchronize()
        if path == "cpp":
            assert calls["runtime"] == 0, "a steady-state call went through the Python path"
            assert native.status()["plans"] == 6
        else:
            assert calls["runtime"] == 6
    # output, dX, dW of both convs: the same kernels, bitwise; the bias gradient (a sum over N and space,
    # PyTorch's sum_to_size in the Python path, grad.sum in C++) within bf16 rounding
    python, cpp = results["python"], results["cpp"]
    bias_index = 3  # [y, dx, dw0, db0, dw1]
    for index, (a, b) in enumerate(zip(python, cpp)):
        assert a.stride() == b.stride()
        if index == bias_index:
            assert torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2)
        else:
            assert torch.equal(a, b), index
    xs = x.detach().requires_grad_(True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(model(xs).float().square().sum(), xs, create_graph=True)[0].sum().backward()


def test_a_split_layer_on_the_all_ours_route_runs_in_cpp_like_policy_ours(registry, native, runtime_factory,
                                                                          monkeypatch):
    """Under ``fastest``, every forward decided on PyTorch's and every backward direction on ours (a
    scripted timer that still runs each timed call); the layers' timing then finds all ours on the C++
    path cheapest: the steady-state step runs every direction of both layers through C++ (the
    runtime's Python path is not called) and gives bitwise what policy ``ours`` gives."""
    import copy

    from tiledispatch.integrations.torch import swap_convs
    from tiledispatch.integrations.torch_dispatch import Timing

    class Scripted:
        def __init__(self, *times):
            self.times, self.calls = times, 0

        def __call__(self, run, device):
            run()
            self.calls += 1
            return self.times[self.calls - 1]

    torch.manual_seed(0)
    cl = torch.channels_last
    base = _layer_net().cuda().to(torch.bfloat16, memory_format=cl)
    x = torch.randn(4, 24, 20, 20, device="cuda").to(torch.bfloat16).contiguous(memory_format=cl)
    grad = torch.randn(4, 48, 10, 10, device="cuda").to(torch.bfloat16).contiguous(memory_format=cl)
    registry_dir = os.environ["TILEDISPATCH_REGISTRY_DIR"]
    runtime_factory(policy="ours", registry_dir=registry_dir)
    want = _train_step(swap_convs(copy.deepcopy(base)), x, grad)

    decisions = (2.0, 1.0) * 2 + (1.0, 2.0) * 4  # two forwards to PyTorch's, then four backward directions to ours
    layers = (Timing(0.3, 0.8), Timing(0.33, 0.44), Timing(0.2, 0.2)) * 2  # as decided, PyTorch's own, all ours
    runtime = runtime_factory(policy="fastest", registry_dir=registry_dir, timer=Scripted(*decisions, *layers))
    model = swap_convs(copy.deepcopy(base))
    for _ in range(3):
        _train_step(model, x, grad)  # decisions; the layers' timing; the new generation re-resolved
    assert [r["impl"] for r in runtime.dispatch_report()].count("pytorch") == 2
    assert [r["route"] for r in runtime.layer_report()] == ["ours_cpp", "ours_cpp"]
    calls = {"runtime": 0}
    run = runtime.run

    def counting(*args):
        calls["runtime"] += 1
        return run(*args)

    monkeypatch.setattr(runtime, "run", counting)
    got = _train_step(model, x, grad)
    torch.cuda.synchronize()
    assert calls["runtime"] == 0, "a steady-state call went through the Python path"
    for index, (a, b) in enumerate(zip(want, got)):
        assert torch.equal(a, b), index


def test_operand_errors_name_the_operand(registry, native):
    from tiledispatch.native import launch
    from tiledispatch.native.support import is_supported

    problem = ConvProblem.from_key("fwd|bf16|2d|n2|g8|c8|k8|in9x9|f3x3|s1x1|d1x1|pb1x1|pe1x1")
    config = next(c for c in registry.configs if c.direction is Direction.FORWARD and c.dtype is DType.BF16
                  and c.ndim == 2 and is_supported(problem, c))
    plan_id = native.plan_id(launch.launch_plan(problem, config, "compiled", registry.loader()), 0)
    x = torch.randn(2, 8, 9, 9, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    w = torch.randn(8, 1, 3, 3, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    with pytest.raises(ValueError, match="input: dtype must be BFloat16"):
        native._extension.run(x.float(), w, plan_id)
    with pytest.raises(ValueError, match=r"weight: shape must be \[8, 1, 3, 3\]"):
        native._extension.run(x, w[:4], plan_id)
    with pytest.raises(ValueError, match="input: must be on cuda:0"):
        native._extension.run(x.cpu(), w, plan_id)
    y = native._extension.run(x, w.contiguous(), plan_id)  # not channels-last: copied, then run
    assert torch.equal(y, native._extension.run(x, w, plan_id))
    xs = x.detach().requires_grad_(True)
    out = native._extension.conv(xs, w, None, plan_id, -1, -1)
    with pytest.raises(RuntimeError, match="input gradient was not planned"):
        out.sum().backward()
