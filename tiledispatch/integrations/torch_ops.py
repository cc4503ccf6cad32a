"""The three directions as PyTorch custom ops (``torch.ops.tiledispatch.*``), with fake (meta)
implementations for ``torch.compile`` and autograd for the forward op.

* ``conv_fwd(x, weight, stride, pad_begin, pad_end, dilation, groups) -> y``
* ``conv_bwd_data(dy, weight, input_size, stride, pad_begin, pad_end, dilation, groups) -> dx``
* ``conv_bwd_weight(x, dy, filter_size, stride, pad_begin, pad_end, dilation, groups) -> dw``

Tensors have PyTorch's shapes (``N, C, *spatial`` and ``K, C/G, *filter``); our kernels read them
in channels-last memory (``N, *spatial, G, C/G`` and ``G, K/G, *filter, C/G`` are the same bytes),
so an operand that is not channels-last is copied once per call (none is, in a channels-last
model), and every result is returned channels-last. Autograd of ``conv_fwd``:
``dx = conv_bwd_data(dy, w)``, ``dw = conv_bwd_weight(x, dy)``; the backward ops themselves have no
autograd (double backward is not supported). Inside each op the runtime's policy picks our kernel or
PyTorch's own convolution for that direction (:mod:`.torch_dispatch`: by default the faster of both,
timed once per problem on CUDA); the ops, their schemas and fake implementations, and the layout of
their results are the same whichever runs. Registering the ops is the only thing importing this
module does.

In eager mode the layers call :func:`conv_eager` instead: the same runtime calls per direction
through a hand-written ``torch.autograd.Function`` (:class:`EagerConv`), without the custom ops'
dispatcher (its schema handling and Python wrappers cost tens of µs per op call on the host, which a
small, host-bound training step pays three times per layer); ``torch.compile`` and other tracing keep
the custom ops, whose fake implementations describe them to the graph.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from tiledispatch.native.problem import Direction

from .torch_runtime import get_runtime, memory_format

NAMESPACE = "tiledispatch"


def output_size(input_size: Sequence, filter_size: Sequence, stride: Sequence[int], pad_begin: Sequence[int],
                pad_end: Sequence[int], dilation: Sequence[int]) -> list:
    """DESIGN §3: out = (in + pad_begin + pad_end - dilation*(filter-1) - 1) // stride + 1 (SymInt-safe)."""
    return [(i + b + e - d * (f - 1) - 1) // s + 1
            for i, f, s, b, e, d in zip(input_size, filter_size, stride, pad_begin, pad_end, dilation)]


def _empty(shape: Sequence, like: Tensor) -> Tensor:
    return torch.empty(list(shape), dtype=like.dtype, device=like.device, memory_format=memory_format(len(shape)))


def _params(stride, pad_begin, pad_end, dilation) -> tuple[tuple[int, ...], ...]:
    return tuple(stride), tuple(pad_begin), tuple(pad_end), tuple(dilation)


# ---- forward ---------------------------------------------------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::conv_fwd", mutates_args=())
def conv_fwd(x: Tensor, weight: Tensor, stride: list[int], pad_begin: list[int], pad_end: list[int],
             dilation: list[int], groups: int) -> Tensor:
    """Y = conv(X, W): our forward kernel chosen for this shape (or PyTorch's, per the policy)."""
    return get_runtime().run(Direction.FORWARD, x, weight, tuple(x.shape), tuple(weight.shape), groups,
                             *_params(stride, pad_begin, pad_end, dilation))


@conv_fwd.register_fake
def _conv_fwd_fake(x, weight, stride, pad_begin, pad_end, dilation, groups):
    out = output_size(x.shape[2:], weight.shape[2:], stride, pad_begin, pad_end, dilation)
    return _empty([x.shape[0], weight.shape[0], *out], x)


# ---- backward data ---------------------------------------------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::conv_bwd_data", mutates_args=())
def conv_bwd_data(grad_output: Tensor, weight: Tensor, input_size: list[int], stride: list[int],
                  pad_begin: list[int], pad_end: list[int], dilation: list[int], groups: int) -> Tensor:
    """dX from dY and W; ``input_size`` is X's spatial size (not implied by dY when stride > 1)."""
    x_shape = (grad_output.shape[0], weight.shape[1] * groups, *input_size)
    return get_runtime().run(Direction.BACKWARD_DATA, grad_output, weight, x_shape, tuple(weight.shape), groups,
                             *_params(stride, pad_begin, pad_end, dilation))


@conv_bwd_data.register_fake
def _conv_bwd_data_fake(grad_output, weight, input_size, stride, pad_begin, pad_end, dilation, groups):
    return _empty([grad_output.shape[0], weight.shape[1] * groups, *input_size], grad_output)


# ---- backward weight -------------------------------------------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::conv_bwd_weight", mutates_args=())
def conv_bwd_weight(x: Tensor, grad_output: Tensor, filter_size: list[int], stride: list[int],
                    pad_begin: list[int], pad_end: list[int], dilation: list[int], groups: int) -> Tensor:
    """dW from X and dY, in PyTorch's weight shape ``K, C/G, *filter`` (channels-last memory)."""
    w_shape = (grad_output.shape[1], x.shape[1] // groups, *filter_size)
    return get_runtime().run(Direction.BACKWARD_WEIGHT, x, grad_output, tuple(x.shape), w_shape, groups,
                             *_params(stride, pad_begin, pad_end, dilation))


@conv_bwd_weight.register_fake
def _conv_bwd_weight_fake(x, grad_output, filter_size, stride, pad_begin, pad_end, dilation, groups):
    return _empty([grad_output.shape[1], x.shape[1] // groups, *filter_size], x)


# ---- autograd --------------------------------------------------------------------------------------
def _setup_context(ctx, inputs, output) -> None:
    x, weight, stride, pad_begin, pad_end, dilation, groups = inputs
    ctx.save_for_backward(x, weight)
    ctx.conv = (list(stride), list(pad_begin), list(pad_end), list(dilation), groups)


def _backward(ctx, grad_output):
    x, weight = ctx.saved_tensors
    stride, pad_begin, pad_end, dilation, groups = ctx.conv
    grad_x = grad_w = None
    if ctx.needs_input_grad[0]:
        grad_x = conv_bwd_data(grad_output, weight, list(x.shape[2:]), stride, pad_begin, pad_end, dilation, groups)
    if ctx.needs_input_grad[1]:
        grad_w = conv_bwd_weight(x, grad_output, list(weight.shape[2:]), stride, pad_begin, pad_end, dilation,
                                 groups)
    return grad_x, grad_w, None, None, None, None, None


conv_fwd.register_autograd(_backward, setup_context=_setup_context)


# ---- eager mode: the same calls without the dispatcher ----------------------------------------------
class EagerConv(torch.autograd.Function):
    """``conv_fwd`` and its autograd for eager mode: forward and each needed backward direction call
    the runtime exactly as the custom ops do (our kernel through its entry's launch plan, or
    PyTorch's convolution, per the policy and its decisions), with the same results and layouts.
    Double backward is not supported (as with the ops).

    ``call`` is ``(runtime, (x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation))``:
    :meth:`Runtime.run`'s arguments after the tensors, built once (a TileConv keeps it per input
    shape), one argument to ``apply`` (its per-argument cost) and all that backward needs."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, call: tuple) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.call = call
        runtime, conv = call
        return runtime.run(Direction.FORWARD, x, weight, *conv)

    @staticmethod
    def backward(ctx, grad_output: Tensor):
        if torch.is_grad_enabled():  # create_graph=True: only once_differentiable's error for a 2nd backward
            return _backward_once(ctx, grad_output)
        return _eager_backward(ctx, grad_output)  # what once_differentiable runs with grad mode off


def _eager_backward(ctx, grad_output: Tensor) -> tuple:
    x, weight = ctx.saved_tensors
    runtime, conv = ctx.call
    needs_x, needs_w, _ = ctx.needs_input_grad
    grad_x = runtime.run(Direction.BACKWARD_DATA, grad_output, weight, *conv) if needs_x else None
    grad_w = runtime.run(Direction.BACKWARD_WEIGHT, x, grad_output, *conv) if needs_w else None
    return grad_x, grad_w, None


_backward_once = once_differentiable(_eager_backward)


def eager_call(runtime, x: Tensor, weight: Tensor, stride: tuple[int, ...], pad_begin: tuple[int, ...],
               pad_end: tuple[int, ...], dilation: tuple[int, ...], groups: int) -> tuple:
    """:class:`EagerConv`'s ``call`` for these tensors' shapes, on ``runtime``."""
    return runtime, (tuple(x.shape), tuple(weight.shape), groups, stride, pad_begin, pad_end, dilation)


def conv_eager(x: Tensor, weight: Tensor, stride: tuple[int, ...], pad_begin: tuple[int, ...],
               pad_end: tuple[int, ...], dilation: tuple[int, ...], groups: int) -> Tensor:
    """``conv_fwd`` in eager mode (tuples of ints for the parameters): :class:`EagerConv` when a
    gradient can flow, else the forward alone (no autograd node to build)."""
    call = eager_call(get_runtime(), x, weight, stride, pad_begin, pad_end, dilation, groups)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return EagerConv.apply(x, weight, call)
    runtime, conv = call
    return runtime.run(Direction.FORWARD, x, weight, *conv)
