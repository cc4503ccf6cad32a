"""Launchers with the seeds' runner contract, over torch tensors in NHWGC / GKYXC / NHWGK.

* forward:          ``forward(problem, config, x, w)      -> y``
* backward_data:    ``backward_data(problem, config, dy, w) -> dx``
* backward_weight:  ``backward_weight(problem, config, x, dy) -> dw``

Tensors may be given in the grouped shapes of :class:`ConvProblem` (``N, *spatial, G, C/G`` and
``G, K/G, *filter, C/G``), contiguous, or as PyTorch's own channels-last tensors, which are the
same bytes: an ``N, C, H, W`` activation in ``torch.channels_last`` (``N, C, D, H, W`` in
``channels_last_3d``) is ``N, H, W, G, C/G`` in memory, and a grouped-conv weight
``K, C/G, kH, kW`` in channels-last is ``G, K/G, kH, kW, C/G``. Either is used as it is, without a
copy. The output is allocated (in the caller's form of the first operand) or caller-provided.

Backends: ``compiled`` launches binaries from the registry's artifact cache (what the server and
the benchmark use); ``jit`` lets Triton compile on first use (development); ``interpret`` runs the
Triton interpreter on CPU tensors (needs ``TRITON_INTERPRET=1`` set before triton is imported).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum
from typing import Any

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import KernelTemplate, Launch, Program
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.support import is_supported

MAX_GRID_YZ = 65535


class LaunchError(ValueError):
    """A tensor or problem does not fit the kernel; the message names the argument and the rule."""


class Backend(str, Enum):
    COMPILED = "compiled"
    JIT = "jit"
    INTERPRET = "interpret"


def templates() -> dict[tuple[Direction, Family], KernelTemplate]:
    """Every kernel template, keyed by (direction, family). Imports triton on first call."""
    global _TEMPLATES
    if _TEMPLATES is None:
        from tiledispatch.native.kernels.direct import DirectBackwardData, DirectBackwardWeight, DirectForward
        from tiledispatch.native.kernels.igemm_bwd_data import IgemmBackwardData
        from tiledispatch.native.kernels.igemm_bwd_weight import IgemmBackwardWeight
        from tiledispatch.native.kernels.igemm_fwd import IgemmForward

        table: dict[tuple[Direction, Family], KernelTemplate] = {}
        for template in (IgemmForward(), IgemmBackwardData(), IgemmBackwardWeight(), DirectForward(),
                         DirectBackwardData(), DirectBackwardWeight()):
            for family in template.families:
                table[(template.direction, family)] = template
        _TEMPLATES = table
    return _TEMPLATES


_TEMPLATES: dict[tuple[Direction, Family], KernelTemplate] | None = None


def template_for(config: KernelConfig) -> KernelTemplate:
    try:
        return templates()[(config.direction, config.family)]
    except KeyError:
        raise LaunchError(f"family: no {config.family.value} kernel template for {config.direction.value}") from None


def torch_dtype(dtype: DType):
    import torch

    return {DType.BF16: torch.bfloat16, DType.FP16: torch.float16, DType.FP32: torch.float32}[dtype]


def as_grouped(name: str, tensor: Any, shape: tuple[int, ...], dtype: DType, *, weight: bool = False) -> Any:
    """A view of ``tensor`` with the grouped shape, or :class:`LaunchError` naming ``name``."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise LaunchError(f"{name}: must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype != torch_dtype(dtype):
        raise LaunchError(f"{name}: dtype must be {torch_dtype(dtype)} for a {dtype.value} problem, got {tensor.dtype}")
    if tuple(tensor.shape) == tuple(shape):
        if not tensor.is_contiguous():
            raise LaunchError(f"{name}: a grouped-shape tensor {list(shape)} must be contiguous")
        return tensor
    torch_shape = pytorch_shape(shape, weight=weight)
    if tuple(tensor.shape) == torch_shape:
        channels_last = tensor.permute(0, *range(2, tensor.dim()), 1)
        if not channels_last.is_contiguous():
            raise LaunchError(f"{name}: a PyTorch-shaped tensor {list(torch_shape)} must be channels-last "
                              "(tensor.to(memory_format=torch.channels_last) or channels_last_3d)")
        return channels_last.view(shape)
    raise LaunchError(f"{name}: shape must be {list(shape)} (grouped) or {list(torch_shape)} "
                      f"(PyTorch, channels-last), got {list(tensor.shape)}")


def pytorch_shape(grouped: tuple[int, ...], *, weight: bool) -> tuple[int, ...]:
    """How PyTorch names the same bytes: NHWGC → N,(G·C),H,W and GKYXC → (G·K),C,Y,X."""
    lead, spatial, groups, per_group = grouped[0], grouped[1:-2], grouped[-2], grouped[-1]
    if weight:  # G, K/G, *filter, C/G
        groups, per_out, spatial, per_group = grouped[0], grouped[1], grouped[2:-1], grouped[-1]
        return (groups * per_out, per_group, *spatial)
    return (lead, groups * per_group, *spatial)


_OPERANDS = {
    Direction.FORWARD: (("input", False), ("weight", True), ("output", False)),
    Direction.BACKWARD_DATA: (("grad_output", False), ("weight", True), ("grad_input", False)),
    Direction.BACKWARD_WEIGHT: (("input", False), ("grad_output", False), ("grad_weight", True)),
}


def run(problem: ConvProblem, config: KernelConfig, first: Any, second: Any, out: Any = None, *,
        backend: Backend | str = Backend.COMPILED, loader: Callable[[KernelConfig], dict[str, Any]] | None = None,
        check_support: bool = True) -> Any:
    """Run one kernel instance on one problem; returns the result tensor (``out`` if given)."""
    import torch

    backend = Backend(backend)
    if check_support:
        support = is_supported(problem, config)
        if not support:
            raise LaunchError(f"kernel {config.name} does not support this problem: {support.reason}")
    shapes = problem.operand_shapes
    names = _OPERANDS[problem.direction]
    a = as_grouped(names[0][0], first, shapes[0], problem.dtype, weight=names[0][1])
    b = as_grouped(names[1][0], second, shapes[1], problem.dtype, weight=names[1][1])
    if a.device != b.device:
        raise LaunchError(f"{names[1][0]}: must be on {a.device} like {names[0][0]}, got {b.device}")
    if out is None:
        result = torch.empty(shapes[2], dtype=a.dtype, device=a.device)
        returned = result
        if tuple(first.shape) != tuple(shapes[0]):  # the caller used PyTorch's shapes: answer in kind
            returned = _pytorch_view(result, names[2][1])
    else:
        result = as_grouped(names[2][0], out, shapes[2], problem.dtype, weight=names[2][1])
        returned = out
    if result.device != a.device:
        raise LaunchError(f"{names[2][0]}: must be on {a.device}, got {result.device}")
    want_cuda = backend is not Backend.INTERPRET
    if (a.device.type == "cuda") != want_cuda:
        raise LaunchError(f"{names[0][0]}: the {backend.value} backend needs "
                          f"{'CUDA' if want_cuda else 'CPU'} tensors, got {a.device}")
    for label, tensor in ((names[0][0], a), (names[1][0], b), (names[2][0], result)):
        if tensor.data_ptr() % 16:
            raise LaunchError(f"{label}: data must start 16-byte aligned (kernels are compiled for aligned pointers)")
    template = template_for(config)
    workspace_elements = template.workspace_elements(problem, config)
    workspace = (torch.empty(workspace_elements, dtype=torch.float32, device=a.device)
                 if workspace_elements else None)
    launches = template.plan(problem, config, a, b, result, workspace)
    programs = template.programs(config)
    binaries = loader(config) if backend is Backend.COMPILED else None
    for launch in launches:
        if launch.grid[1] > MAX_GRID_YZ or launch.grid[2] > MAX_GRID_YZ:
            raise LaunchError(f"groups: grid {launch.grid} exceeds {MAX_GRID_YZ} on its 2nd/3rd axis")
        if math.prod(launch.grid) == 0:
            continue
        for tensor in launch.zero_fill:
            tensor.zero_()
        _launch(programs[launch.program], launch, backend, binaries[launch.program] if binaries else None)
    return returned


def _pytorch_view(grouped: Any, weight: bool) -> Any:
    """The PyTorch channels-last face of a grouped tensor (same storage)."""
    shape = grouped.shape
    if weight:
        g, k, *spatial, c = shape
        return grouped.view(g * k, *spatial, c).permute(0, len(shape) - 2, *range(1, len(shape) - 2))
    n, *spatial, g, c = shape
    return grouped.view(n, *spatial, g * c).permute(0, len(shape) - 2, *range(1, len(shape) - 2))


def full_arguments(program: Program, launch: Launch) -> list[Any]:
    """Run-time arguments and constexpr values interleaved in the kernel's parameter order."""
    runtime = iter(launch.args)
    values = [program.constexprs[name] if name in program.constexprs else next(runtime)
              for name in program.fn.arg_names]
    if next(runtime, None) is not None:
        raise LaunchError(f"{program.fn.__name__}: more arguments than parameters")
    return values


def _launch(program: Program, launch: Launch, backend: Backend, binary: Any) -> None:
    if backend is Backend.COMPILED:
        binary[launch.grid](*full_arguments(program, launch))
        return
    program.fn[launch.grid](*launch.args, **program.constexprs, num_warps=program.num_warps,
                            num_stages=program.num_stages)


# The runner contract, one function per direction.
def forward(problem: ConvProblem, config: KernelConfig, x: Any, w: Any, y: Any = None, **options: Any) -> Any:
    _expect(problem, Direction.FORWARD)
    return run(problem, config, x, w, y, **options)


def backward_data(problem: ConvProblem, config: KernelConfig, dy: Any, w: Any, dx: Any = None, **options: Any) -> Any:
    _expect(problem, Direction.BACKWARD_DATA)
    return run(problem, config, dy, w, dx, **options)


def backward_weight(problem: ConvProblem, config: KernelConfig, x: Any, dy: Any, dw: Any = None,
                    **options: Any) -> Any:
    _expect(problem, Direction.BACKWARD_WEIGHT)
    return run(problem, config, x, dy, dw, **options)


def _expect(problem: ConvProblem, direction: Direction) -> None:
    if problem.direction is not direction:
        raise LaunchError(f"direction: this launcher runs {direction.value}, the problem is {problem.direction.value}")
