"""PyTorch's own convolution for the three directions, with the custom ops' signature: what the ops
run on devices our kernels do not serve (CPU outside interpreter tests), and the reference the
tests compare against. Asymmetric padding (``padding="same"`` with an even filter) pads explicitly.
Results are returned in channels-last memory with canonical strides (those of
``torch.empty(..., memory_format=channels_last)``), exactly like our kernels' and the custom ops'
fake implementations, so either may serve the ops (:mod:`.torch_dispatch`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tiledispatch.native.problem import Direction


def _pad_spec(pad_begin: tuple[int, ...], pad_end: tuple[int, ...]) -> list[int]:
    """F.pad's order: last dimension first, (begin, end) each."""
    spec: list[int] = []
    for begin, end in zip(reversed(pad_begin), reversed(pad_end)):
        spec += [begin, end]
    return spec


def forward(x: torch.Tensor, weight: torch.Tensor, groups: int, stride: tuple[int, ...], pad_begin: tuple[int, ...],
            pad_end: tuple[int, ...], dilation: tuple[int, ...], bias: torch.Tensor | None = None) -> torch.Tensor:
    """PyTorch's own convolution (``bias`` inside it, as ``nn.Conv`` passes it: one node, whose backward
    gives the bias gradient too)."""
    conv = F.conv2d if x.dim() == 4 else F.conv3d
    if tuple(pad_begin) == tuple(pad_end):
        return conv(x, weight, bias, stride, pad_begin, dilation, groups)
    return conv(F.pad(x, _pad_spec(pad_begin, pad_end)), weight, bias, stride, 0, dilation, groups)


def backward_data(dy: torch.Tensor, weight: torch.Tensor, x_shape: tuple[int, ...], groups: int,
                  stride: tuple[int, ...], pad_begin: tuple[int, ...], pad_end: tuple[int, ...],
                  dilation: tuple[int, ...]) -> torch.Tensor:
    spatial = tuple(x_shape[2:])
    symmetric = tuple(pad_begin) == tuple(pad_end)
    padded = spatial if symmetric else tuple(s + b + e for s, b, e in zip(spatial, pad_begin, pad_end))
    shell = _shell(dy, (*x_shape[:2], *padded))  # shape and memory format only: no input values are read
    padding = list(pad_begin) if symmetric else [0] * len(spatial)
    grad, _, _ = torch.ops.aten.convolution_backward(dy, shell, weight, None, list(stride), padding,
                                                     list(dilation), False, [0] * len(spatial), groups,
                                                     [True, False, False])
    if symmetric:
        return grad
    index = (slice(None), slice(None), *(slice(b, b + s) for b, s in zip(pad_begin, spatial)))
    return grad[index]


def backward_weight(x: torch.Tensor, dy: torch.Tensor, w_shape: tuple[int, ...], groups: int,
                    stride: tuple[int, ...], pad_begin: tuple[int, ...], pad_end: tuple[int, ...],
                    dilation: tuple[int, ...]) -> torch.Tensor:
    shell = _shell(dy, w_shape)  # shape and memory format only
    zeros = [0] * (x.dim() - 2)
    if tuple(pad_begin) == tuple(pad_end):
        padded, padding = x, list(pad_begin)
    else:
        padded, padding = F.pad(x, _pad_spec(pad_begin, pad_end)), zeros
    _, grad, _ = torch.ops.aten.convolution_backward(dy, padded, shell, None, list(stride), padding,
                                                     list(dilation), False, zeros, groups, [False, True, False])
    return grad


def _shell(like: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The operand ``convolution_backward`` reads only the shape of (the input for backward-data, the
    weight for backward-weight), uninitialised, in channels-last memory as a model's own operands are.
    PyTorch derives cuDNN's memory format from the operands' layouts, and a stride-0 shell (``expand``
    of one element, used until session 21) sent backward-data to a far slower path than a model's own
    backward takes (``bench/gpu/shell_probe.py``, H200, bf16, batch 128: MobileNetV2's 112×112
    depthwise layer 1.06 ms that way against 0.20 ms with this shell, its 56×56 one 1.40 against 0.24,
    ResNeXt-50's 56×56 grouped layer 0.85 against 0.28), so ``fastest`` compared ours with a cuDNN
    slower than the one a model runs, and layers it split ran that slow path."""
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    return torch.empty(shape, dtype=like.dtype, device=like.device, memory_format=fmt)


def reference(direction: Direction, first: torch.Tensor, second: torch.Tensor, x_shape: tuple[int, ...],
              w_shape: tuple[int, ...], groups: int, stride: tuple[int, ...], pad_begin: tuple[int, ...],
              pad_end: tuple[int, ...], dilation: tuple[int, ...]) -> torch.Tensor:
    """The custom ops' contract (fwd: x, w; bwd_data: dy, w; bwd_weight: x, dy) with PyTorch's kernels."""
    if direction is Direction.FORWARD:
        out = forward(first, second, groups, stride, pad_begin, pad_end, dilation)
    elif direction is Direction.BACKWARD_DATA:
        out = backward_data(first, second, x_shape, groups, stride, pad_begin, pad_end, dilation)
    else:
        out = backward_weight(first, second, w_shape, groups, stride, pad_begin, pad_end, dilation)
    return canonical_channels_last(out)


def canonical_channels_last(out: torch.Tensor) -> torch.Tensor:
    """``out`` in channels-last memory with canonical strides (a copy only when it is not already:
    ``is_contiguous`` accepts any stride on a size-1 dimension, which cuDNN results may have)."""
    fmt = torch.channels_last if out.dim() == 4 else torch.channels_last_3d
    if out.is_contiguous(memory_format=fmt) and out.stride() == _channels_last_strides(out.shape):
        return out
    return torch.empty(out.shape, dtype=out.dtype, device=out.device, memory_format=fmt).copy_(out)


def _channels_last_strides(shape: torch.Size) -> tuple[int, ...]:
    """Strides of a dense ``N, *spatial, C`` layout of an ``N, C, *spatial`` shape."""
    strides = [0] * len(shape)
    strides[1] = 1
    step = shape[1]
    for dim in range(len(shape) - 1, 1, -1):
        strides[dim] = step
        step *= shape[dim]
    strides[0] = step
    return tuple(strides)
