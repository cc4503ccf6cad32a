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

Launch plans: whatever ``run`` needs that depends only on (problem, config, backend, loader) is a
:class:`LaunchPlan`, built once per process and kept in an LRU (:func:`launch_plan`): the support
check, the operand shapes, the program table and binaries, every launch's grid and its argument
list (constexprs interleaved, tensors as :class:`TensorRef` slots), the workspace size. It is made
by running the template's ``plan()`` once on ``meta`` placeholders of the operands and noting which
placeholder (or view of one) each tensor argument is. A call then only checks its tensors (dtype,
shape, contiguity, device, alignment: the same :class:`LaunchError` messages), allocates the
output and workspace, and binds data pointers: compiled launches get ``data_ptr() + offset``
integers in the cached argument lists; the ``jit`` and ``interpret`` backends get the tensors (and
views rebuilt from the recorded dtype, shape, strides and offset). Plans hold no tensors.
``run(..., cache=False)`` is the uncached path (``plan()`` on every call), kept as the reference
the plans are tested against.

So ``plan()`` must have no effect beyond its launches: it runs once per (problem, config), on
placeholders, in whichever thread first ran the problem. Work a template needs on every call (or
in every thread), such as installing Triton's scratch allocator for device-side tensor
descriptors (a per-thread setting), goes in an optional ``before_launch(config)`` method, which
both paths call on every call, after the checks and before the first launch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tiledispatch.native.configs import PADDABLE_FAMILIES, Family, KernelConfig
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


#: The device type each backend's tensors live on. Tests and ``bench/launch_overhead.py`` point
#: ``COMPILED`` at "cpu" to run stand-in binaries on CPU tensors (host cost without a GPU).
_DEVICE_TYPE = {Backend.COMPILED: "cuda", Backend.JIT: "cuda", Backend.INTERPRET: "cpu"}
#: Plans kept by :func:`launch_plan` (a few hundred bytes each; a model has tens of problems, a
#: benchmark sweep revisits a (problem, config) many times in a row).
PLAN_CACHE_SIZE = 4096


def templates() -> dict[tuple, KernelTemplate]:
    """Every kernel template, keyed by (direction, family), and those of ``pad_channels`` configs by (direction,
    family, True). Imports triton on first call."""
    global _TEMPLATES
    if _TEMPLATES is None:
        from tiledispatch.native.kernels.channel_pad import ChannelPadded
        from tiledispatch.native.kernels.direct import DirectBackwardData, DirectBackwardWeight, DirectForward
        from tiledispatch.native.kernels.dwroll import DwrollBackwardWeight, DwrollData
        from tiledispatch.native.kernels.dwrow import DwrowBackwardWeight
        from tiledispatch.native.kernels.dwrun import DwrunBackwardWeight, DwrunData
        from tiledispatch.native.kernels.gwalk import GwalkConvolution
        from tiledispatch.native.kernels.gwalk_bwd_weight import GwalkBackwardWeight
        from tiledispatch.native.kernels.halo import HaloConvolution
        from tiledispatch.native.kernels.igemm_bwd_data import IgemmBackwardData
        from tiledispatch.native.kernels.igemm_bwd_weight import IgemmBackwardWeight
        from tiledispatch.native.kernels.igemm_fwd import IgemmForward
        from tiledispatch.native.kernels.tma_conv import TmaConvolution

        table: dict[tuple[Direction, Family], KernelTemplate] = {}
        for template in (IgemmForward(), IgemmBackwardData(), IgemmBackwardWeight(), DirectForward(),
                         DirectBackwardData(), DirectBackwardWeight(),
                         TmaConvolution(Direction.FORWARD), TmaConvolution(Direction.BACKWARD_DATA),
                         DwrollData(Direction.FORWARD), DwrollData(Direction.BACKWARD_DATA), DwrollBackwardWeight(),
                         GwalkConvolution(Direction.FORWARD), GwalkConvolution(Direction.BACKWARD_DATA),
                         GwalkBackwardWeight(), DwrowBackwardWeight(), DwrunBackwardWeight(),
                         DwrunData(Direction.FORWARD), DwrunData(Direction.BACKWARD_DATA),
                         HaloConvolution(Direction.FORWARD), HaloConvolution(Direction.BACKWARD_DATA)):
            for family in template.families:
                table[(template.direction, family)] = template
        for (direction, family), template in list(table.items()):  # pad_channels configs: (direction, family, True)
            if family in PADDABLE_FAMILIES:
                table[(direction, family, True)] = ChannelPadded(template)
        _TEMPLATES = table
    return _TEMPLATES


_TEMPLATES: dict[tuple, KernelTemplate] | None = None


def template_for(config: KernelConfig) -> KernelTemplate:
    try:
        if config.pad_channels:
            return templates()[(config.direction, config.family, True)]
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
        check_support: bool = True, cache: bool = True) -> Any:
    """Run one kernel instance on one problem; returns the result tensor (``out`` if given).

    Through the problem's cached :class:`LaunchPlan` (``cache=False``: the template's ``plan()``
    on every call, the reference path)."""
    if not cache:
        return _run_uncached(problem, config, first, second, out, backend=backend, loader=loader,
                             check_support=check_support)
    return launch_plan(problem, config, backend, loader).run(first, second, out, check_support=check_support)


def _run_uncached(problem: ConvProblem, config: KernelConfig, first: Any, second: Any, out: Any = None, *,
                  backend: Backend | str = Backend.COMPILED,
                  loader: Callable[[KernelConfig], dict[str, Any]] | None = None, check_support: bool = True) -> Any:
    """``run`` as it was before launch plans: everything recomputed per call."""
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
    if a.device.type != _DEVICE_TYPE[backend]:
        raise LaunchError(_device_message(names[0][0], backend, a.device))
    for label, tensor in ((names[0][0], a), (names[1][0], b), (names[2][0], result)):
        if tensor.data_ptr() % 16:
            raise LaunchError(f"{label}: data must start 16-byte aligned (kernels are compiled for aligned pointers)")
    template = template_for(config)
    kernel_problem = problem.kernel_problem(config.ndim) or problem
    if kernel_problem is not problem:  # a 3D problem that is a 2D one: the same bytes in its 2D shapes
        a, b, result = (t.view(shape) for t, shape in zip((a, b, result), kernel_problem.operand_shapes))
    workspace_elements = template.workspace_elements(kernel_problem, config)
    workspace = (torch.empty(workspace_elements, dtype=torch.float32, device=a.device)
                 if workspace_elements else None)
    before_launch = getattr(template, "before_launch", None)
    if before_launch is not None:
        before_launch(config)
    launches = template.plan(kernel_problem, config, a, b, result, workspace)
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
    for name, value in program.fixed.items():  # compiled in as constants: the launch must agree
        passed = values[program.fn.arg_names.index(name)]
        if passed != value:
            raise LaunchError(f"{name}: {program.fn.__name__} is compiled for {name} = {value}, the launch "
                              f"passes {passed}")
    if next(runtime, None) is not None:
        raise LaunchError(f"{program.fn.__name__}: more arguments than parameters")
    return values


def _launch(program: Program, launch: Launch, backend: Backend, binary: Any) -> None:
    if backend is Backend.COMPILED:
        binary[launch.grid](*full_arguments(program, launch))
        return
    # (A Gluon program names num_warps among its constexprs too: the launch option fills that parameter.)
    program.fn[launch.grid](*launch.args, **{**program.constexprs, **program.compile_options()})


def _device_message(name: str, backend: Backend, device: Any) -> str:
    want = "CUDA" if _DEVICE_TYPE[backend] == "cuda" else "CPU"
    return f"{name}: the {backend.value} backend needs {want} tensors, got {device}"


# ---- launch plans ---------------------------------------------------------------------------------
#: Slots of a plan's tensors: the call's three operands in grouped shape, then the workspace.
FIRST, SECOND, RESULT, WORKSPACE = range(4)


@dataclass(frozen=True)
class TensorRef:
    """A tensor argument of a planned launch: slot ``slot`` itself (``view`` None), or the view of
    it that ``plan()`` made: ``view = (dtype, shape, strides)`` starting ``offset`` bytes in."""

    slot: int
    offset: int = 0
    view: tuple | None = None


@dataclass(frozen=True)
class OperandSpec:
    """What one tensor of a call must be: dtype, then the grouped shape (contiguous) or PyTorch's
    shape of the same bytes (channels-last memory); errors name it. ``kernel``: the grouped shape the
    kernel sees, ``grouped`` itself unless a 2D kernel runs a 3D problem (:attr:`ConvProblem.planar`)."""

    name: str
    grouped: tuple[int, ...]
    pytorch: tuple[int, ...]
    weight: bool
    kernel: tuple[int, ...]


@dataclass(frozen=True)
class PlannedLaunch:
    """One launch of a plan. ``args``: run-time arguments in parameter order (tensors as
    :class:`TensorRef`); ``full``: every parameter in definition order, constexprs interleaved
    (what a compiled binary is called with), ``None`` at the pointer positions listed in
    ``pointers`` as ``(position, slot, byte offset)``."""

    program: str
    grid: tuple[int, int, int]
    args: tuple
    zero_fill: tuple[TensorRef, ...]
    full: tuple
    pointers: tuple[tuple[int, int, int], ...]

    @property
    def empty(self) -> bool:
        return math.prod(self.grid) == 0


@dataclass(frozen=True, eq=False)
class LaunchPlan:
    """Everything :func:`run` needs for one (problem, config, backend, loader) that no tensor
    changes; :meth:`run` checks a call's tensors and binds them. Holds no tensor.

    The whole of ``plan()`` is reused, not only its grids: recording it once is valid because the
    templates compute every integer argument from the problem and the config (the operands'
    shapes and strides are fixed by the problem: grouped, contiguous) and pass as tensors only the
    operands, the workspace or views of them (direct's tap-major and split-K workspaces, gmerge's
    packed weight ``workspace.view(dtype)[:n]``, the split-K reduction's workspace). A ``plan()``
    that allocates a tensor, or fails on ``meta`` tensors, is detected: ``untraced`` then says why
    (else ""), and such a plan calls ``plan()`` on every call (support, shapes, programs and
    binaries still cached). One that turned data pointers into integers would not be detected
    here (``meta`` pointers are 0): ``tests/kernels/test_launch_plan.py`` compares every family's
    plans with ``plan()`` on real tensors."""

    problem: ConvProblem
    config: KernelConfig
    backend: Backend
    template: Any
    kernel_problem: ConvProblem       # what the template plans: ``problem``, or its 2D form for a 2D kernel
    operands: tuple[OperandSpec, OperandSpec, OperandSpec]
    dtype: Any                        # the torch dtype of every operand
    memory_format: Any                # torch.channels_last or channels_last_3d: PyTorch-shaped operands
    unsupported: str                  # is_supported's reason, "" when supported
    workspace_elements: int
    programs: dict[str, Program]
    launches: tuple[PlannedLaunch, ...]
    runners: tuple                    # compiled: binary[grid] per launch (None for empty grids); else ()
    binaries: dict[str, Any] | None
    grid_error: str
    untraced: str = ""
    before_launch: Any = None         # the template's before_launch(config), called on every call

    # ---- per call ---------------------------------------------------------------------------------
    def run(self, first: Any, second: Any, out: Any = None, *, check_support: bool = True) -> Any:
        """:func:`run` for this plan's problem, config and backend: the same checks, messages and result."""
        import torch

        if check_support and self.unsupported:
            raise LaunchError(f"kernel {self.config.name} does not support this problem: {self.unsupported}")
        spec_a, spec_b, spec_r = self.operands
        # The common case, PyTorch-shaped channels-last operands of the plan's dtype, checked inline
        # (what _accept returns True for: a grouped shape never equals a PyTorch one, its rank is
        # one more); anything else through _accept, with its checks and messages.
        dtype, fmt = self.dtype, self.memory_format
        if (isinstance(first, torch.Tensor) and first.dtype == dtype and first.shape == spec_a.pytorch
                and first.is_contiguous(memory_format=fmt)):
            first_pytorch = True
        else:
            first_pytorch = self._accept(spec_a, first)
        if (isinstance(second, torch.Tensor) and second.dtype == dtype and second.shape == spec_b.pytorch
                and second.is_contiguous(memory_format=fmt)):
            second_pytorch = True
        else:
            second_pytorch = self._accept(spec_b, second)
        device = first.device
        if second.device != device:
            raise LaunchError(f"{spec_b.name}: must be on {device} like {spec_a.name}, got {second.device}")
        if out is None:
            if first_pytorch:  # the caller used PyTorch's shapes: answer in kind (channels-last memory)
                result = torch.empty(spec_r.pytorch, dtype=self.dtype, device=device,
                                     memory_format=self.memory_format)
            else:
                result = torch.empty(spec_r.grouped, dtype=self.dtype, device=device)
            result_pytorch = first_pytorch
        else:
            result_pytorch = self._accept(spec_r, out)
            result = out
        if result.device != device:
            raise LaunchError(f"{spec_r.name}: must be on {device}, got {result.device}")
        if device.type != _DEVICE_TYPE[self.backend]:
            raise LaunchError(_device_message(spec_a.name, self.backend, device))
        pointers = [first.data_ptr(), second.data_ptr(), result.data_ptr(), 0]
        for spec, pointer in zip(self.operands, pointers):
            if pointer % 16:
                raise LaunchError(f"{spec.name}: data must start 16-byte aligned (kernels are compiled for "
                                  "aligned pointers)")
        if self.grid_error:
            raise LaunchError(self.grid_error)
        workspace = (torch.empty(self.workspace_elements, dtype=torch.float32, device=device)
                     if self.workspace_elements else None)
        if self.before_launch is not None:
            self.before_launch(self.config)
        if self.backend is Backend.COMPILED and not self.untraced:
            if workspace is not None:
                pointers[WORKSPACE] = workspace.data_ptr()
            for launch, runner in zip(self.launches, self.runners):
                if runner is None:
                    continue
                if launch.zero_fill:
                    tensors = self._grouped(first, first_pytorch, second, second_pytorch, result, result_pytorch,
                                            workspace)
                    for ref in launch.zero_fill:
                        _bind(ref, tensors).zero_()
                arguments = list(launch.full)
                for position, slot, offset in launch.pointers:
                    arguments[position] = pointers[slot] + offset
                runner(*arguments)
            return result
        tensors = self._grouped(first, first_pytorch, second, second_pytorch, result, result_pytorch, workspace)
        for launch in self._launches_for(tensors):
            if launch.grid[1] > MAX_GRID_YZ or launch.grid[2] > MAX_GRID_YZ:  # untraced plans: checked here
                raise LaunchError(f"groups: grid {launch.grid} exceeds {MAX_GRID_YZ} on its 2nd/3rd axis")
            if math.prod(launch.grid) == 0:
                continue
            for tensor in launch.zero_fill:
                tensor.zero_()
            binary = self.binaries[launch.program] if self.binaries is not None else None
            _launch(self.programs[launch.program], launch, self.backend, binary)
        return result

    def _accept(self, spec: OperandSpec, tensor: Any) -> bool:
        """Check one operand (as :func:`as_grouped` does, same messages); True when it has PyTorch's shape."""
        import torch

        if not isinstance(tensor, torch.Tensor):
            raise LaunchError(f"{spec.name}: must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype != self.dtype:
            raise LaunchError(f"{spec.name}: dtype must be {self.dtype} for a {self.problem.dtype.value} problem, "
                              f"got {tensor.dtype}")
        shape = tensor.shape
        if shape == spec.grouped:
            if not tensor.is_contiguous():
                raise LaunchError(f"{spec.name}: a grouped-shape tensor {list(spec.grouped)} must be contiguous")
            return False
        if shape == spec.pytorch:
            # Channels-last contiguity is as_grouped's "the channels-last permutation is
            # contiguous" (both ignore strides of size-1 dims), without building the permuted view.
            if not tensor.is_contiguous(memory_format=self.memory_format):
                raise LaunchError(f"{spec.name}: a PyTorch-shaped tensor {list(spec.pytorch)} must be channels-last "
                                  "(tensor.to(memory_format=torch.channels_last) or channels_last_3d)")
            return True
        raise LaunchError(f"{spec.name}: shape must be {list(spec.grouped)} (grouped) or {list(spec.pytorch)} "
                          f"(PyTorch, channels-last), got {list(shape)}")

    def _grouped(self, first: Any, first_pytorch: bool, second: Any, second_pytorch: bool, result: Any,
                 result_pytorch: bool, workspace: Any) -> tuple:
        """The slots' tensors in grouped shape (views of the caller's PyTorch-shaped ones)."""
        a, b, r = self.operands
        return (_grouped_view(first, a) if first_pytorch else _kernel_view(first, a),
                _grouped_view(second, b) if second_pytorch else _kernel_view(second, b),
                _grouped_view(result, r) if result_pytorch else _kernel_view(result, r), workspace)

    def _launches_for(self, tensors: tuple) -> list[Launch]:
        if self.untraced:
            return list(self.template.plan(self.kernel_problem, self.config, *tensors))
        return [Launch(launch.program, launch.grid, tuple(_bind(value, tensors) for value in launch.args),
                       tuple(_bind(ref, tensors) for ref in launch.zero_fill)) for launch in self.launches]

    def bind(self, first: Any, second: Any, out: Any, workspace: Any) -> list[Launch]:
        """The launches for these grouped-shape tensors (``workspace``: ``workspace_elements`` fp32
        or None), tensors bound: what the template's ``plan()`` returns for them (in the kernel's shapes)."""
        return self._launches_for((*(_kernel_view(t, spec) for t, spec in zip((first, second, out), self.operands)),
                                   workspace))


def _grouped_view(tensor: Any, spec: OperandSpec) -> Any:
    """A caller's PyTorch-shaped (channels-last) tensor as the kernel's grouped shape (same bytes)."""
    return tensor.permute(0, *range(2, tensor.dim()), 1).view(spec.kernel)


def _kernel_view(tensor: Any, spec: OperandSpec) -> Any:
    """A caller's grouped-shape (contiguous) tensor as the kernel's grouped shape (same bytes)."""
    return tensor if spec.kernel == spec.grouped else tensor.view(spec.kernel)


def _bind(value: Any, tensors: tuple) -> Any:
    """A planned argument with the call's tensors in place of its :class:`TensorRef`."""
    if not isinstance(value, TensorRef):
        return value
    tensor = tensors[value.slot]
    if value.view is None:
        return tensor
    dtype, shape, strides = value.view
    if tensor.dtype != dtype:
        tensor = tensor.view(dtype)  # the workspace (1-D, contiguous) seen in another dtype
    return tensor.as_strided(shape, strides, tensor.storage_offset() + value.offset // tensor.element_size())


def launch_plan(problem: ConvProblem, config: KernelConfig, backend: Backend | str = Backend.COMPILED,
                loader: Callable[[KernelConfig], dict[str, Any]] | None = None) -> LaunchPlan:
    """The cached :class:`LaunchPlan` of (problem, config, backend, loader) (built on first use;
    ``loader`` only matters to the compiled backend)."""
    backend = backend if isinstance(backend, Backend) else Backend(backend)
    if backend is not Backend.COMPILED:
        loader = None
    try:
        hash(loader)
    except TypeError:  # an unhashable loader cannot key the cache: a fresh plan per call
        return build_plan(problem, config, backend, loader)
    return _cached_plan(problem, config, backend, loader)


@functools.lru_cache(maxsize=PLAN_CACHE_SIZE)
def _cached_plan(problem: ConvProblem, config: KernelConfig, backend: Backend, loader: Any) -> LaunchPlan:
    return build_plan(problem, config, backend, loader)


def clear_plans() -> None:
    """Forget every cached plan (e.g. after a kernel template changed in a running process)."""
    _cached_plan.cache_clear()


def build_plan(problem: ConvProblem, config: KernelConfig, backend: Backend | str = Backend.COMPILED,
               loader: Callable[[KernelConfig], dict[str, Any]] | None = None) -> LaunchPlan:
    """A new :class:`LaunchPlan` (uncached; :func:`launch_plan` keeps them)."""
    import torch

    backend = Backend(backend)
    template = template_for(config)
    # A 2D kernel on a 3D problem (ConvProblem.planar) plans the 2D problem; the caller's tensors keep the
    # 3D problem's shapes and are the same bytes. (A kernel that supports neither form plans the problem
    # itself: the plan is refused on use, `unsupported`.)
    kernel_problem = problem.kernel_problem(config.ndim) or problem
    operands = tuple(OperandSpec(name, shape, pytorch_shape(shape, weight=weight), weight, kernel_shape)
                     for (name, weight), shape, kernel_shape in zip(_OPERANDS[problem.direction],
                                                                    problem.operand_shapes,
                                                                    kernel_problem.operand_shapes))
    programs = template.programs(config)
    binaries = None
    if backend is Backend.COMPILED:
        if loader is None:
            raise LaunchError("loader: the compiled backend needs a loader (e.g. Registry.loader())")
        binaries = loader(config)
    workspace_elements = template.workspace_elements(kernel_problem, config)
    launches, untraced = _trace(template, kernel_problem, config, workspace_elements, programs)
    grid_error = next((f"groups: grid {launch.grid} exceeds {MAX_GRID_YZ} on its 2nd/3rd axis"
                       for launch in launches if launch.grid[1] > MAX_GRID_YZ or launch.grid[2] > MAX_GRID_YZ), "")
    runners: tuple = ()
    if backend is Backend.COMPILED and not untraced and not grid_error:
        # binary[grid] once: the grid is the plan's, the stream is looked up by the runner per call.
        runners = tuple(None if launch.empty else binaries[launch.program][launch.grid] for launch in launches)
    support = is_supported(problem, config)
    return LaunchPlan(problem=problem, config=config, backend=backend, template=template,
                      kernel_problem=kernel_problem, operands=operands,
                      dtype=torch_dtype(problem.dtype),
                      memory_format=torch.channels_last if problem.ndim == 2 else torch.channels_last_3d,
                      unsupported="" if support else support.reason, workspace_elements=workspace_elements,
                      programs=programs, launches=launches, runners=runners, binaries=binaries,
                      grid_error=grid_error, untraced=untraced,
                      before_launch=getattr(template, "before_launch", None))


class _Untraceable(Exception):
    pass


def _trace(template: KernelTemplate, problem: ConvProblem, config: KernelConfig, workspace_elements: int,
           programs: dict[str, Program]) -> tuple[tuple[PlannedLaunch, ...], str]:
    """``plan()`` run once on ``meta`` placeholders (no memory), its tensors mapped back to slots;
    ``((), reason)`` when that is not possible."""
    import torch

    dtype = torch_dtype(problem.dtype)
    placeholders = [torch.empty(shape, dtype=dtype, device="meta") for shape in problem.operand_shapes]
    placeholders.append(torch.empty(workspace_elements, dtype=torch.float32, device="meta")
                        if workspace_elements else None)
    # Views share their base's storage (dtype views too, which have no ``_base``): the storage
    # says which placeholder a tensor argument comes from.
    slots = {_storage_id(t): slot for slot, t in enumerate(placeholders) if t is not None}

    def ref(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        slot = slots.get(_storage_id(value))
        if slot is None:
            raise _Untraceable("plan() passes a tensor that is none of the operands or the workspace")
        base = placeholders[slot]
        offset = value.storage_offset() * value.element_size()
        if (value.dtype == base.dtype and value.shape == base.shape and value.stride() == base.stride()
                and offset == 0):
            return TensorRef(slot)
        return TensorRef(slot, offset, (value.dtype, tuple(value.shape), tuple(value.stride())))

    try:
        planned = template.plan(problem, config, *placeholders)
        launches = []
        for launch in planned:
            args = tuple(ref(value) for value in launch.args)
            zero_fill = tuple(ref(tensor) for tensor in launch.zero_fill)
            if not all(isinstance(r, TensorRef) for r in zero_fill):
                raise _Untraceable("plan() asks to zero something that is not a tensor")
            program = programs[launch.program]
            full = full_arguments(program, Launch(launch.program, launch.grid, args))
            pointers = tuple((position, value.slot, value.offset) for position, value in enumerate(full)
                             if isinstance(value, TensorRef))
            full = tuple(None if isinstance(value, TensorRef) else value for value in full)
            launches.append(PlannedLaunch(launch.program, tuple(launch.grid), args, zero_fill, full, pointers))
    except LaunchError:
        raise
    except Exception as error:  # noqa: BLE001 - any failure on placeholders: plan() then runs per call
        return (), f"{type(error).__name__}: {error}"
    return tuple(launches), ""


def _storage_id(tensor: Any) -> int:
    return tensor.untyped_storage()._cdata


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
