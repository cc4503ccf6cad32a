"""PyTorch integration: grouped convolutions of an existing model run by tiledispatch kernels.

>>> import torch, torchvision
>>> from tiledispatch.integrations.torch import swap_convs
>>> model = torchvision.models.resnext50_32x4d().cuda().to(torch.bfloat16, memory_format=torch.channels_last)
>>> swap_convs(model)            # every nn.Conv2d/Conv3d with groups > 1 becomes a TileConv2d/3d  # doctest: +SKIP
>>> model(torch.randn(8, 3, 224, 224, device="cuda", dtype=torch.bfloat16)).sum().backward()  # doctest: +SKIP

What happens per convolution call (see :mod:`.torch_runtime` and :mod:`.torch_select`):

* the kernel for each (direction, shape) is chosen once per process: a ``Select`` RPC to the
  service at ``$TILEDISPATCH_TARGET`` (or ``configure(target=...)``), or, with no service
  configured or when it is unreachable (one WARNING line), a local ranking of the kernels by the
  analytic model; then cached;
* forward and both backward directions run our Triton kernels through autograd, in this process,
  on the current CUDA stream, each through its problem's cached launch plan (operand checks and
  pointer binding per call). Under ``torch.compile`` (and other tracing) the layers call registered
  custom ops with fake implementations (``torch.ops.tiledispatch.conv_fwd/conv_bwd_data/
  conv_bwd_weight``), kept as opaque calls; in eager mode they call the same runtime through a
  hand-written ``torch.autograd.Function`` (``torch_ops.EagerConv``), without the custom ops'
  dispatcher cost, or, once every direction a layer needs is settled on a registry kernel, the C++
  launch path (:mod:`.torch_native`: one call into a C++ autograd node, no Python in the backward);
  a TileConv keeps, per call key (input shape, dtype and device, weight shape,
  which gradients flow), what ``tile_conv``'s checks decided for it, so a steady-state call costs
  a lookup there (whether the call is traced, under a dispatch mode or autocast is still checked on
  every call; what was kept is dropped whenever the runtime, its settings or its entries change);
* which implementation runs a (direction, shape) is the runtime's policy (:mod:`.torch_dispatch`;
  ``configure(policy=...)`` or ``$TILEDISPATCH_TORCH_POLICY``): by default on CUDA (``fastest``) our
  kernel and PyTorch's convolution (cuDNN) are both timed on its first call and the cheaper per call,
  device plus host time (``cost="total"``; ``cost="device"`` for CUDA-graph code: device time alone),
  serves it from then on (one INFO line each; :func:`dispatch_report` lists the decisions), and a
  layer with a direction on ours is timed whole both ways once (under ``cost="total"``), running
  PyTorch's own convolution and autograd when that costs less (``Runtime.layer_report``); ``ours``
  always runs our kernels, ``pytorch`` always PyTorch's; both give the same channels-last result; in
  eager mode a shape whose every needed direction is settled on PyTorch (or whose layer timing chose
  PyTorch's own) runs ``F.conv2d``/``F.conv3d`` under PyTorch's autograd, at the plain nn.Conv's
  cost, and a shape whose directions are split runs each direction on its own choice inside the
  autograd Function;
* bias: on our kernels added by PyTorch (``y + b``, its gradient is autograd's sum over N and space);
  where PyTorch's own convolution serves the layer, inside it (as ``nn.Conv`` passes it);
* layout: our kernels read channels-last memory. A model converted with
  ``model.to(memory_format=torch.channels_last)`` (``channels_last_3d`` in 3D) pays nothing; otherwise
  the activation, and the weight unless C/G == 1, are copied to channels-last at every call
  (one extra read and write of each), and outputs come back channels-last;
* tensors our kernels do not serve (CPU, or a dtype outside ``Runtime.dtypes``: bf16 and fp16 by
  default) go to PyTorch's own convolution, logged once.

Requires the ``torch`` extra (``pip install tiledispatch[torch]``); the thin client stays torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

from tiledispatch.native.problem import Direction

from . import torch_native, torch_ops
from .torch_dispatch import POLICIES, Decision, EventTimer, Timing
from .torch_reference import forward as _pytorch_forward  # PyTorch's convolution under PyTorch's autograd
from .torch_runtime import Runtime, channels_last, configure, get_runtime, memory_format
from .torch_select import Choice, KernelSelector, SelectionError

__all__ = ["POLICIES", "Choice", "Decision", "EventTimer", "KernelSelector", "Runtime", "SelectionError",
           "TileConv2d", "TileConv3d", "Timing", "configure", "dispatch_report", "get_runtime", "padding_of",
           "restore_convs", "swap_convs", "swappable", "tile_conv", "torch_ops"]


def dispatch_report() -> list[dict[str, Any]]:
    """The process runtime's ``fastest`` decisions so far, one dict per (direction, problem): see
    :meth:`Runtime.dispatch_report`."""
    return get_runtime().dispatch_report()


def padding_of(padding: str | tuple[int, ...], kernel_size: tuple[int, ...],
               dilation: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(pad_begin, pad_end) of an ``nn.Conv`` padding: ints, ``"valid"``, or ``"same"`` (PyTorch puts
    the odd extra pixel at the end)."""
    if padding == "valid":
        zeros = tuple(0 for _ in kernel_size)
        return zeros, zeros
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel_size, dilation)]
        begin = tuple(t // 2 for t in total)
        return begin, tuple(t - b for t, b in zip(total, begin))
    padding = tuple(padding)
    return padding, padding


def tile_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride=1, padding=0,
              dilation=1, groups: int = 1) -> torch.Tensor:
    """``F.conv2d``/``F.conv3d`` with our kernels (padding may be asymmetric: ``(begin, end)`` pairs
    as two tuples). Falls back to PyTorch for tensors the runtime does not accept."""
    nd = x.dim() - 2
    stride, dilation = _tuple(stride, nd), _tuple(dilation, nd)
    if type(padding) is tuple and len(padding) == 2 and type(padding[0]) is tuple and type(padding[1]) is tuple:
        pad_begin, pad_end = padding  # (begin, end) pairs: what TileConv.forward passes
    elif isinstance(padding, tuple) and len(padding) == 2 and all(isinstance(p, tuple) for p in padding):
        pad_begin, pad_end = padding
    else:
        pad_begin, pad_end = padding_of(padding if isinstance(padding, str) else _tuple(padding, nd),
                                        tuple(weight.shape[2:]), dilation)
    if torch.is_autocast_enabled(x.device.type):
        dtype = torch.get_autocast_dtype(x.device.type)
        x, weight = x.to(dtype), weight.to(dtype)
        bias = bias.to(dtype) if bias is not None else None
    runtime = get_runtime()
    fmt = memory_format(x.dim())
    if not runtime.accepts(x):  # PyTorch's own convolution for tensors our kernels do not serve
        return _pytorch_forward(x, weight, groups, stride, pad_begin, pad_end, dilation, bias)
    if not _eager(x, weight):
        # Traced graphs keep the custom ops (their dispatch is decided at run time, not while tracing).
        y = torch.ops.tiledispatch.conv_fwd(x.contiguous(memory_format=fmt), weight.contiguous(memory_format=fmt),
                                            list(stride), list(pad_begin), list(pad_end), list(dilation), groups)
    elif runtime.pytorch_serves(x, weight, groups, stride, pad_begin, pad_end, dilation):
        # Every direction settled on PyTorch (policy or ``fastest`` decisions): PyTorch's own
        # convolution and autograd, bias inside, at the plain nn.Conv's cost.
        return _pytorch_forward(x, weight, groups, stride, pad_begin, pad_end, dilation, bias)
    else:  # per direction ours or PyTorch's, through EagerConv: none of the custom ops' dispatcher cost
        y = torch_ops.conv_eager(x.contiguous(memory_format=fmt), weight.contiguous(memory_format=fmt), stride,
                                 pad_begin, pad_end, dilation, groups)
    if bias is not None:
        y = y + bias.view(1, -1, *([1] * nd))
    return y


def _tuple(value: Any, n: int) -> tuple[int, ...]:
    if type(value) is tuple:
        return value
    return tuple(value) if isinstance(value, (tuple, list)) else (int(value),) * n


def _eager(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether this call runs eagerly on plain tensors: not traced by ``torch.compile``, under no
    dispatch mode (fake tensors, ``make_fx``, functionalization) and no tensor subclass; only such
    calls may skip the custom ops, which the tracers need to see."""
    if torch.compiler.is_compiling():  # first: nothing below is traced
        return False
    return type(x) is torch.Tensor and type(weight) in _PLAIN and _get_current_dispatch_mode() is None


_PLAIN = (torch.Tensor, nn.Parameter)


class _Calls(dict):
    """A TileConv's eager calls resolved so far: per (input shape, dtype, device, weight shape,
    input and weight gradient flowing) what ``tile_conv`` would run, as :func:`_resolve` answers.
    Valid for one runtime at one generation of its entries (bumped by every change of an entry, the
    policy, ``cpu``, ``dtypes``, or ``clear()``) and the module's groups (its other parameters drop
    the calls when set), so an answer never outlives what it was derived from; a copy or pickle of
    the module starts empty (and holds no runtime)."""

    __slots__ = ("runtime", "generation", "groups")

    def __init__(self, runtime: Runtime | None = None, generation: int = -1, groups: int = 0):
        super().__init__()
        self.runtime, self.generation, self.groups = runtime, generation, groups

    def __reduce__(self):
        return _Calls, ()


def _resolve(runtime: Runtime, x: torch.Tensor, weight: torch.Tensor, groups: int, stride: tuple[int, ...],
             pad_begin: tuple[int, ...], pad_end: tuple[int, ...], dilation: tuple[int, ...], grad_x: bool,
             grad_w: bool) -> tuple[torch.memory_format | None, tuple | None, tuple[int, ...], tuple | None] | None:
    """What ``tile_conv`` runs for an eager call (not traced, no autocast) on these tensors:
    (memory format of the operands, :class:`~.torch_ops.EagerConv`'s ``call``, the bias's view
    shape, the C++ launch path's plan ids or None: :meth:`Runtime.native_conv`); no format and no
    call when PyTorch's convolution serves it (a tensor the runtime does not accept, or every needed
    direction settled on PyTorch). None for tensors on devices other than CPU and CUDA:
    ``torch._C._is_any_autocast_enabled`` does not see autocast on all of them (MPS), so
    ``tile_conv`` checks theirs on every call."""
    if not (x.is_cuda or x.is_cpu):
        return None
    bias_shape = (1, -1, *([1] * (x.dim() - 2)))
    if not runtime.accepts(x) or runtime.pytorch_serves(x, weight, groups, stride, pad_begin, pad_end, dilation):
        return None, None, bias_shape, None
    plans = runtime.native_conv(x, weight, groups, stride, pad_begin, pad_end, dilation, grad_x, grad_w)
    return memory_format(x.dim()), torch_ops.eager_call(runtime, x, weight, stride, pad_begin, pad_end, dilation,
                                                        groups), bias_shape, plans


_UNRESOLVED = object()  # a call key _resolve has not answered yet (None is one of its answers)


class _TileConvMixin:
    """forward() of a TileConv: our kernels where the runtime accepts the tensor, else nn.Conv's own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``tile_conv`` on the module's parameters. In eager mode (the common case: not traced, no
        autocast; checked on every call) what it decides for this call is kept in a :class:`_Calls`
        and reused while the call key, the runtime and its generation are the same: a step pays a
        dict lookup instead of the padding, acceptance and ``pytorch_serves`` work, and the shapes
        and parameters ``EagerConv`` passes to the runtime are built once."""
        # (stride, (pad_begin, pad_end), dilation) as tile_conv wants them, kept while the module's
        # padding, kernel_size, stride and dilation are the same objects (recomputed if one is set,
        # dropping the calls resolved with the old ones).
        params = self.__dict__.get("_tile_params")
        if (params is None or params[0] is not self.padding or params[1] is not self.kernel_size
                or params[2] is not self.stride or params[3] is not self.dilation):
            params = (self.padding, self.kernel_size, self.stride, self.dilation, tuple(self.stride),
                      padding_of(self.padding, self.kernel_size, self.dilation), tuple(self.dilation))
            self.__dict__["_tile_params"] = params
            self.__dict__["_tile_calls"] = None  # (not pop: torch.compile cannot trace __dict__.pop)
        # What nn.Module.__getattr__ answers for self.weight/self.bias, without the failed ordinary
        # attribute lookup before it (most of a microsecond each); else (e.g. a parametrized weight)
        # the attribute. (Not .get(name, self.weight): that would look the attribute up every time.)
        parameters = self._parameters
        weight = parameters["weight"] if "weight" in parameters else self.weight  # noqa: SIM401
        bias = parameters["bias"] if "bias" in parameters else self.bias  # noqa: SIM401
        stride, (pad_begin, pad_end), dilation = params[4], params[5], params[6]
        groups = self.groups
        # _eager first: under torch.compile nothing below it may be traced.
        if not _eager(x, weight) or torch._C._is_any_autocast_enabled():
            return tile_conv(x, weight, bias, stride, params[5], dilation, groups)
        runtime = get_runtime()
        generation = runtime._entries.generation
        calls = self.__dict__.get("_tile_calls")
        if (calls is None or calls.runtime is not runtime or calls.generation != generation
                or calls.groups != groups):
            calls = self.__dict__["_tile_calls"] = _Calls(runtime, generation, groups)
        grad = torch.is_grad_enabled()
        grad_x, grad_w = grad and x.requires_grad, grad and weight.requires_grad
        key = (x.shape, x.dtype, x.device, weight.shape, grad_x, grad_w)
        resolved = calls.get(key, _UNRESOLVED)
        if resolved is _UNRESOLVED:
            resolved = calls[key] = _resolve(runtime, x, weight, groups, stride, pad_begin, pad_end, dilation,
                                             grad_x, grad_w)
        if resolved is None:
            return tile_conv(x, weight, bias, stride, params[5], dilation, groups)
        fmt, call, bias_shape, plans = resolved
        if call is None:  # PyTorch's own convolution, bias inside (as nn.Conv calls it)
            return _pytorch_forward(x, weight, groups, stride, pad_begin, pad_end, dilation, bias)
        if plans is not None:  # the C++ launch path: operand layout, launches, bias and autograd node in C++
            if bias is None or torch_native.bias_fits(bias, x):
                return torch_native.conv(x, weight, bias, plans)
            y = torch_native.conv(x, weight, None, plans)
        elif grad_x or grad_w:
            x, weight = x.contiguous(memory_format=fmt), weight.contiguous(memory_format=fmt)
            y = torch_ops.EagerConv.apply(x, weight, call)
        else:  # no gradient can flow: the forward alone, no autograd node
            x, weight = x.contiguous(memory_format=fmt), weight.contiguous(memory_format=fmt)
            y = runtime.run(Direction.FORWARD, x, weight, *call[1])
        if bias is not None:
            y = y + bias.view(bias_shape)
        return y

    @classmethod
    def from_conv(cls, conv: nn.Module) -> nn.Module:
        """A TileConv sharing ``conv``'s parameters (state_dict compatible), mode and hooks."""
        new = cls(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride, padding=conv.padding,
                  dilation=conv.dilation, groups=conv.groups, bias=conv.bias is not None,
                  padding_mode=conv.padding_mode, device="meta", dtype=conv.weight.dtype)
        new.weight = conv.weight
        new.bias = conv.bias
        new.train(conv.training)
        for hooks in ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                      "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks",
                      "_backward_pre_hooks"):
            if hasattr(conv, hooks):
                setattr(new, hooks, getattr(conv, hooks))
        return new

    def to_conv(self) -> nn.Module:
        """The plain nn.Conv with the same parameters (undoes :meth:`from_conv`)."""
        base = nn.Conv2d if isinstance(self, nn.Conv2d) else nn.Conv3d
        plain = base(self.in_channels, self.out_channels, self.kernel_size, stride=self.stride,
                     padding=self.padding, dilation=self.dilation, groups=self.groups, bias=self.bias is not None,
                     padding_mode=self.padding_mode, device="meta", dtype=self.weight.dtype)
        plain.weight = self.weight
        plain.bias = self.bias
        plain.train(self.training)
        return plain


class TileConv2d(_TileConvMixin, nn.Conv2d):
    """``nn.Conv2d`` whose convolutions (forward and backward) run tiledispatch kernels."""


class TileConv3d(_TileConvMixin, nn.Conv3d):
    """``nn.Conv3d`` whose convolutions (forward and backward) run tiledispatch kernels."""


_TILE_FOR = {nn.Conv2d: TileConv2d, nn.Conv3d: TileConv3d}


def _base(conv: nn.Module) -> type | None:
    """nn.Conv2d/nn.Conv3d when ``conv`` is one, or a subclass that keeps its forward (e.g.
    torchvision's ``Conv3DSimple``, which only changes ``__init__``); else None."""
    if isinstance(conv, _TileConvMixin):
        return None
    for base in _TILE_FOR:
        if isinstance(conv, base) and type(conv).forward is base.forward and \
                type(conv)._conv_forward is base._conv_forward:
            return base
    return None


def swappable(conv: nn.Module) -> str:
    """Why ``conv`` cannot be swapped ("" when it can): nn.Conv2d/3d (or a subclass keeping their
    forward) with zero padding and a plain weight."""
    if _base(conv) is None:
        return f"{type(conv).__name__} is not an nn.Conv2d/nn.Conv3d with their own forward"
    if conv.padding_mode != "zeros":
        return f"padding_mode {conv.padding_mode!r} (only 'zeros')"
    if torch.nn.utils.parametrize.is_parametrized(conv):
        return "parametrized weight"
    return ""


def swap_convs(model: nn.Module, *, min_groups: int = 2, include_dense: bool = False,
               predicate: Callable[[str, nn.Module], bool] | None = None) -> nn.Module:
    """Replace, in place, every swappable ``nn.Conv2d``/``nn.Conv3d`` of ``model`` with groups >= ``min_groups``
    (every one with ``include_dense``; or those for which ``predicate(name, conv)`` is true) by a
    :class:`TileConv2d`/:class:`TileConv3d` sharing its parameters. Returns ``model``. A subclass
    of nn.Conv (torchvision's ``Conv3DSimple``) becomes a plain TileConv: its extra methods are gone.

    Convs with another padding mode or a parametrized weight are left alone. The state dict keeps its
    keys, so checkpoints load either way; :func:`restore_convs` undoes the swap.
    """
    def wanted(name: str, conv: nn.Module) -> bool:
        if swappable(conv):
            return False
        if predicate is not None:
            return bool(predicate(name, conv))
        return include_dense or conv.groups >= min_groups

    replaced: dict[int, nn.Module] = {}
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent._modules.items()):  # named_children() hides repeats
            if child is None:
                continue
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if id(child) in replaced:
                setattr(parent, child_name, replaced[id(child)])
            elif wanted(name, child):
                replaced[id(child)] = _TILE_FOR[_base(child)].from_conv(child)
                setattr(parent, child_name, replaced[id(child)])
    return model


def restore_convs(model: nn.Module) -> nn.Module:
    """Undo :func:`swap_convs` in place: every TileConv becomes the plain nn.Conv again."""
    restored: dict[int, nn.Module] = {}
    for _, parent in list(model.named_modules()):
        for child_name, child in list(parent._modules.items()):
            if isinstance(child, _TileConvMixin):
                restored.setdefault(id(child), child.to_conv())
                setattr(parent, child_name, restored[id(child)])
    return model


def swapped_convs(model: nn.Module) -> list[str]:
    """Names of the TileConv modules in ``model``."""
    return [name for name, module in model.named_modules() if isinstance(module, _TileConvMixin)]


# Re-exported for users who want the tensor helpers.
to_channels_last = channels_last
