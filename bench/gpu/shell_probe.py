"""How PyTorch's backward directions are timed by the integration's ``fastest`` decisions, against what a
model's own backward runs, on depthwise and grouped layers of MobileNetV2, ConvNeXt-tiny and ResNeXt-50
(bf16, channels-last), in one process on one GPU.

``torch_reference.backward_data``/``backward_weight`` hand ``aten.convolution_backward`` an operand whose
values it never reads (the input for backward-data, the weight for backward-weight). Until session 21 that
was a stride-0 ``expand`` of one element; now it is an uninitialised channels-last tensor
(``torch_reference._shell``). PyTorch picks cuDNN's memory format from the input and the weight, and a
depthwise weight (``C/G == 1``) has the same strides in both formats, so the layout of that operand decides.
Per layer and direction (CUDA events, median of ``--repeats`` calls after warm-up, ``cudnn.benchmark``):

* ``expand``: ``convolution_backward`` with the old shell (the call alone: the copy to canonical
  channels-last strides ``reference`` adds where cuDNN's result lacks them is not in it);
* ``channels_last``: ``torch_reference.backward_data``/``backward_weight`` as they are now (that copy
  included where it happens);
* ``model``: ``convolution_backward`` as a model's backward calls it (the real channels-last input and
  weight, both gradients in one call; for backward-weight the same call, so its time covers both).

Usage (GPU machine): ``python bench/gpu/shell_probe.py --out DIR``; writes ``DIR/shell.csv`` and ``DIR/shell.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path

import torch

from tiledispatch.integrations import torch_reference

# (name, batch, channels, groups, size, filter, stride): layers of the e2e models (bench/torch_e2e.py)
LAYERS = [
    ("mobilenet_v2 dw 112 s1", 128, 32, 32, 112, 3, 1),
    ("mobilenet_v2 dw 112 s2", 128, 96, 96, 112, 3, 2),
    ("mobilenet_v2 dw 56 s1", 128, 144, 144, 56, 3, 1),
    ("mobilenet_v2 dw 28 s1", 128, 192, 192, 28, 3, 1),
    ("mobilenet_v2 dw 14 s1", 32, 576, 576, 14, 3, 1),
    ("convnext_tiny dw7 56", 32, 96, 96, 56, 7, 1),
    ("convnext_tiny dw7 14", 128, 384, 384, 14, 7, 1),
    ("resnext50 g32 56", 128, 128, 32, 56, 3, 1),
    ("resnext50 g32 14", 32, 512, 32, 14, 3, 1),
]


def _time_ms(call, repeats: int) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _calls(batch: int, channels: int, groups: int, size: int, filt: int, stride: int) -> dict:
    """(direction, shell) -> a call of one layer's backward as described in the module docstring."""
    cl = torch.channels_last
    pad = filt // 2
    x = torch.randn(batch, channels, size, size, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
    w = torch.randn(channels, channels // groups, filt, filt, device="cuda", dtype=torch.bfloat16)
    w = w.contiguous(memory_format=cl)
    y = torch.nn.functional.conv2d(x, w, None, stride, pad, 1, groups)
    dy = torch.randn_like(y).contiguous(memory_format=cl)
    common = ([stride] * 2, [pad] * 2, [1, 1], False, [0, 0], groups)
    expand_x = dy.new_empty(1).expand(*x.shape)
    expand_w = dy.new_empty(1).expand(*w.shape)
    conv_backward = torch.ops.aten.convolution_backward
    return {
        ("bwd_data", "expand"): lambda: conv_backward(dy, expand_x, w, None, *common, [True, False, False]),
        ("bwd_data", "channels_last"): lambda: torch_reference.backward_data(
            dy, w, tuple(x.shape), groups, (stride, stride), (pad, pad), (pad, pad), (1, 1)),
        ("bwd_weight", "expand"): lambda: conv_backward(dy, x, expand_w, None, *common, [False, True, False]),
        ("bwd_weight", "channels_last"): lambda: torch_reference.backward_weight(
            x, dy, tuple(w.shape), groups, (stride, stride), (pad, pad), (pad, pad), (1, 1)),
        ("both", "model"): lambda: conv_backward(dy, x, w, None, *common, [True, True, False]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.backends.cudnn.benchmark = True
    rows = []
    for name, batch, channels, groups, size, filt, stride in LAYERS:
        calls = _calls(batch, channels, groups, size, filt, stride)
        for (direction, shell), call in calls.items():
            ms = _time_ms(call, args.repeats)
            rows.append({"layer": name, "batch": batch, "channels": channels, "groups": groups, "size": size,
                         "filter": filt, "stride": stride, "direction": direction, "shell": shell, "ms": ms})
            print(f"{name:26s} n{batch:<4d} {direction:10s} {shell:14s} {ms:8.4f} ms", flush=True)
    with open(args.out / "shell.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (args.out / "shell.json").write_text(json.dumps(env, indent=1) + "\n")


if __name__ == "__main__":
    main()
