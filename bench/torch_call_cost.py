"""Host cost per convolution call on a GPU machine: a swapped layer (our kernels) beside PyTorch's own
(cuDNN), layer by layer down to the bare Triton launch, and where our call's host time goes.

``torch_host_overhead.py`` times the integration's Python with stand-in launches on a machine without a
GPU; this script times the real thing on the GPU machine, where a batch-32 training step is host-bound
(``torch_e2e.py``: device busy 11 of a 14 ms cuDNN step), so every µs of host time per call is step time.

The layer is small enough that its kernels finish before the host has issued the next call (default
depthwise 96 channels, 7x7, pad 3, on 1x96x8x8 bf16 channels-last: a few µs on the device), so the loop
of calls times the host: ``calls`` calls per round, no synchronization inside a round, ``rounds`` rounds
(the GPU is synchronized after each row); median and minimum µs per call.

Rows (policy ``ours`` for the swapped layer, compiled registry kernels):

* ``cudnn_fwd`` / ``ours_fwd``: ``nn.Conv2d`` / ``TileConv2d`` forward under ``no_grad``;
* ``cudnn_fwd_bwd`` / ``ours_fwd_bwd``: forward and backward (both gradients), ``y.backward(g)``
  (``TileConv2d`` on the C++ launch path when it serves: ``launch_path`` in the report says);
* ``ours_python_fwd_bwd``: the same through the Python launch path (``EagerConv``);
* ``ours_runtime_run``: ``Runtime.run`` for the forward (no module, no autograd);
* ``ours_plan_run``: the forward's cached ``LaunchPlan.run`` (operand checks, output allocation, launches);
* ``triton_launch``: the forward's compiled Triton launches alone, arguments bound once;
* ``torch_empty``: allocating the forward's output (channels-last).

Then ``cProfile`` over ``ours_fwd_bwd`` calls: the functions taking most of their own time.

    TILEDISPATCH_REGISTRY_DIR=/tmp/reg python3 bench/torch_call_cost.py --out-dir /tmp/call_cost
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--channels", type=int, default=96)
    parser.add_argument("--groups", type=int, default=None, help="default: --channels (depthwise)")
    parser.add_argument("--filter", type=int, default=7)
    parser.add_argument("--size", type=int, default=8, help="input height and width")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile-calls", type=int, default=500)
    parser.add_argument("--registry-dir", default=os.environ.get("TILEDISPATCH_REGISTRY_DIR"))
    parser.add_argument("--out-dir", type=Path, required=True)
    return parser.parse_args()


def main() -> None:
    args = _args()
    import torch
    import triton
    from host_timing import cpu_model, per_call_us
    from torch import nn

    from tiledispatch.integrations import torch_native, torch_ops, torch_runtime
    from tiledispatch.integrations.torch import TileConv2d
    from tiledispatch.native.problem import Direction

    if not torch.cuda.is_available():
        raise SystemExit("torch_call_cost: needs a CUDA GPU (torch_host_overhead.py is the CPU-only variant)")
    torch.backends.cudnn.benchmark = True
    runtime = torch_runtime.configure(registry_dir=args.registry_dir, policy="ours")
    device, dtype, fmt = torch.device("cuda"), torch.bfloat16, torch.channels_last
    pad = args.filter // 2
    groups = args.groups or args.channels
    conv = nn.Conv2d(args.channels, args.channels, args.filter, padding=pad, groups=groups, bias=False)
    conv = conv.to(device, dtype, memory_format=fmt)
    tile = TileConv2d.from_conv(conv)
    x = torch.randn(args.batch, args.channels, args.size, args.size, device=device, dtype=dtype).to(memory_format=fmt)
    x_grad = x.clone().requires_grad_(True)
    grad = torch.randn_like(conv(x)).contiguous(memory_format=fmt)

    def forward(module):
        def call():
            with torch.no_grad():
                module(x)
        return call

    def forward_backward(module):
        def call():
            x_grad.grad = None
            module.weight.grad = None
            module(x_grad).backward(grad)
        return call

    # Decide everything once (selection, plan, registry load; the second round resolves the C++ path
    # from the entries the first made) before timing.
    for _ in range(2):
        for call in (forward(tile), forward_backward(tile), forward(conv), forward_backward(conv)):
            call()
    torch.cuda.synchronize()

    shape = (tuple(x.shape), tuple(conv.weight.shape), groups, (1, 1), (pad, pad), (pad, pad), (1, 1))
    entry = runtime.entry(Direction.FORWARD, dtype, *shape, "cuda")
    plan = entry.plan
    if plan.backend.value != "compiled":
        raise SystemExit(f"torch_call_cost: the forward's kernel runs {plan.backend.value}, not a compiled "
                         "registry binary: give --registry-dir (or $TILEDISPATCH_REGISTRY_DIR)")
    out = plan.run(x, conv.weight, check_support=False)
    workspace = torch.empty(max(plan.workspace_elements, 1), dtype=torch.float32, device=device)
    pointers = [x.data_ptr(), conv.weight.data_ptr(), out.data_ptr(), workspace.data_ptr()]
    bound = []
    for launch, runner in zip(plan.launches, plan.runners):
        if runner is None:
            continue
        arguments = list(launch.full)
        for position, slot, offset in launch.pointers:
            arguments[position] = pointers[slot] + offset
        bound.append((runner, tuple(arguments)))

    def triton_launch():
        for runner, arguments in bound:
            runner(*arguments)

    eager_call = torch_ops.eager_call(runtime, x, conv.weight, (1, 1), (pad, pad), (pad, pad), (1, 1), groups)

    def python_forward_backward():  # the layer's Python launch path, as TileConv runs it without C++
        x_grad.grad = None
        conv.weight.grad = None
        torch_ops.EagerConv.apply(x_grad, conv.weight, eager_call).backward(grad)

    rows = {
        "cudnn_fwd": forward(conv),
        "ours_fwd": forward(tile),
        "cudnn_fwd_bwd": forward_backward(conv),
        "ours_fwd_bwd": forward_backward(tile),
        "ours_python_fwd_bwd": python_forward_backward,
        "ours_runtime_run": lambda: runtime.run(Direction.FORWARD, x, conv.weight, *shape),
        "ours_plan_run": lambda: plan.run(x, conv.weight, check_support=False),
        "triton_launch": triton_launch,
        "torch_empty": lambda: torch.empty(tuple(out.shape), dtype=dtype, device=device, memory_format=fmt),
    }
    results = {}
    for name, call in rows.items():
        results[name] = per_call_us(call, args.calls, args.rounds, warmup=50)
        torch.cuda.synchronize()
        print(f"{name:18s} median {results[name]['median_us']:8.2f} µs  min {results[name]['min_us']:8.2f} µs",
              flush=True)

    profiler = cProfile.Profile()
    call = forward_backward(tile)
    profiler.enable()
    for _ in range(args.profile_calls):
        call()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
    profile_lines = [line.rstrip() for line in text.getvalue().splitlines() if line.strip()]

    report = {
        "benchmark": "torch_call_cost",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": os.environ.get("TILEDISPATCH_GIT_COMMIT", ""),
        "gpu": torch.cuda.get_device_name(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
        "python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "layer": {"input": list(x.shape), "weight": list(conv.weight.shape), "padding": pad, "groups": groups,
                  "dtype": "bf16", "memory_format": "channels_last"},
        "kernels": {d.value: runtime.entry(d, dtype, *shape, "cuda").choice.config.name for d in Direction},
        "launch_path": torch_native.status(),
        "method": {"calls": args.calls, "rounds": args.rounds, "unit": "µs per call, host loop time (no sync inside a "
                   "round; the GPU finishes each call's kernels before the next call is issued)"},
        "results": results,
        "profile_ours_fwd_bwd": {"calls": args.profile_calls, "top_tottime": profile_lines},
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / "torch_call_cost.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    os.replace(tmp, path)
    print("\n".join(profile_lines[:45]))


if __name__ == "__main__":
    main()
