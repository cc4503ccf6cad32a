"""Host cost per swapped-conv call in eager PyTorch, on a machine without a GPU, before and after.

What runs: a ``TileConv2d`` (depthwise 96 channels, 7x7, pad 3, bf16, channels-last: convnext_tiny's
dwconv) called as in a training step, ``x.grad = w.grad = None; conv(x).backward(g)``, through the
whole eager path: module forward (since the per-module fast path, its checks and one lookup of what
``tile_conv``'s checks and ``pytorch_serves`` decided for the call key), ``EagerConv`` (autograd
Function), ``Runtime.run`` per direction (route / entry lookup, policy and decision), ``_launch``
(``channels_last``), ``LaunchPlan.run`` (operand checks, output and workspace allocation, pointer
binding). Stubbed, as in ``bench/launch_overhead.py``: the compiled backend is pointed at CPU tensors
and its binaries are stand-ins that record their arguments (so Triton's own launcher, CUDA
allocations and the GPU are not measured); the runtime is ``cpu="interpret"`` so that CPU tensors
take the CUDA tensors' path; the three entries are decided up front as a scenario says.

Scenarios: ``ours`` (policy ``fastest``, the three directions decided ours) at the real size
(32x96x56x56); ``ours_no_grad`` (forward only, inference); ``split`` (forward and backward-weight on
PyTorch, backward-data ours: what convnext_tiny b32 got on the H200) and ``pytorch`` (all three on
PyTorch: plain ``F.conv2d``) on a tiny input (1x96x4x4 fp32: PyTorch's CPU arithmetic is real there);
baselines: ``nn.Conv2d`` fwd+bwd on tiny fp32 CPU tensors (1x8x4x4, depthwise 3x3: PyTorch's own
dispatch and autograd cost, plus a little arithmetic) and an empty autograd Function.

``--baseline-rev REV`` (default HEAD) also measures the integration as it is at that git revision
(``git show REV:path`` of tiledispatch/ and native/ into a temporary tree, run in a child process),
rounds alternating with the working tree's; ``--baseline-rev ''`` skips it. One core, one torch
thread; the minimum over rounds (another process on the machine shows in medians).

    .venv/bin/python bench/torch_host_overhead.py --out bench/results/torch_host_overhead_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from host_timing import (  # bench/: on sys.path as the script's folder (and in the child)
    cpu_model,
    per_call_us,
    stand_in_loader,
)

REPO = Path(__file__).resolve().parents[1]

CHANNELS, KERNEL, PAD = 96, 7, 3
REAL = (32, CHANNELS, 56, 56)
TINY = (1, CHANNELS, 4, 4)
SCENARIOS = {
    "ours": ({"fwd": "ours", "bwd_data": "ours", "bwd_weight": "ours"}, REAL, True),
    "ours_no_grad": ({"fwd": "ours", "bwd_data": "ours", "bwd_weight": "ours"}, REAL, False),
    "split": ({"fwd": "pytorch", "bwd_data": "ours", "bwd_weight": "pytorch"}, TINY, True),
    "pytorch": ({"fwd": "pytorch", "bwd_data": "pytorch", "bwd_weight": "pytorch"}, TINY, True),
}


# ---- measurement (in whichever tree is importable) -----------------------------------------------
def _setup(scenario: str):
    import torch

    from tiledispatch.integrations import torch_runtime
    from tiledispatch.integrations.torch import TileConv2d, padding_of
    from tiledispatch.integrations.torch_dispatch import Decision
    from tiledispatch.native.problem import Direction

    impls, shape, grad = SCENARIOS[scenario]
    # bf16 at the real size (nothing computes there); fp32 on the tiny input, where PyTorch's CPU
    # convolution runs (its bf16 CPU path is slow enough to hide the host cost)
    dtype, fmt = (torch.bfloat16 if shape == REAL else torch.float32), torch.channels_last
    torch.manual_seed(0)
    plain = torch.nn.Conv2d(CHANNELS, CHANNELS, KERNEL, padding=PAD, groups=CHANNELS, bias=False)
    tile = TileConv2d.from_conv(plain.to(dtype=dtype, memory_format=fmt))
    x = torch.randn(shape, dtype=dtype).contiguous(memory_format=fmt).requires_grad_(grad)
    g = torch.randn(shape, dtype=dtype).contiguous(memory_format=fmt)
    runtime = torch_runtime.configure(cpu="interpret", dtypes=(torch.bfloat16, torch.float32), policy="fastest")
    loader = stand_in_loader()
    pad_begin, pad_end = padding_of(tile.padding, tile.kernel_size, tile.dilation)
    for direction in Direction:
        runtime.entry(direction, dtype, tuple(x.shape), tuple(tile.weight.shape), CHANNELS, tuple(tile.stride),
                      pad_begin, pad_end, tuple(tile.dilation), "cpu")
    for key, entry in list(runtime._entries.items()):
        decided = replace(entry, backend="compiled", loader=loader,
                          decision=Decision(impls[entry.problem.direction.value], 1.0, 1.0, 0.0))
        runtime._entries[key] = decided.with_plan()
    return tile, x, g, runtime


def _step(tile, x, g, grad: bool):
    import torch

    if not grad:
        def forward():
            with torch.no_grad():
                tile(x)
        return forward

    def step():
        x.grad = None
        tile.weight.grad = None
        tile(x).backward(g)
    return step


def measure(calls: int, rounds: int) -> dict:
    import torch

    from tiledispatch.native import launch

    previous = dict(launch._DEVICE_TYPE)
    launch._DEVICE_TYPE[launch.Backend.COMPILED] = "cpu"
    out: dict = {}
    try:
        for scenario, (_, _, grad) in SCENARIOS.items():
            tile, x, g, _ = _setup(scenario)
            out[scenario] = per_call_us(_step(tile, x, g, grad), calls, rounds)
    finally:
        launch._DEVICE_TYPE.clear()
        launch._DEVICE_TYPE.update(previous)
    # Baselines: PyTorch's own dispatch and autograd.
    F = torch.nn.functional
    conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False).to(memory_format=torch.channels_last)
    tx = torch.randn(1, 8, 4, 4).contiguous(memory_format=torch.channels_last).requires_grad_()
    tg = torch.randn(1, 8, 4, 4).contiguous(memory_format=torch.channels_last)

    def plain_step():
        tx.grad = None
        conv.weight.grad = None
        conv(tx).backward(tg)

    class Empty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a.new_empty(a.shape)

        @staticmethod
        def backward(ctx, grad):
            return grad.new_empty(grad.shape), None

    def empty_step():
        tx.grad = None
        Empty.apply(tx, conv.weight).backward(tg)

    out["baseline_nn_conv2d_tiny_fp32"] = per_call_us(plain_step, calls, rounds)
    out["baseline_F_conv2d_forward_tiny_fp32_no_grad"] = per_call_us(
        lambda: F.conv2d(tx.detach(), conv.weight.detach(), None, 1, 1, 1, 8), calls, rounds)
    out["baseline_empty_autograd_function"] = per_call_us(empty_step, calls, rounds)
    return out


def breakdown(calls: int, rounds: int) -> dict:
    """µs of each piece of the ``ours`` path, timed alone on the same tensors (working tree)."""
    import torch

    from tiledispatch.integrations import torch as integration
    from tiledispatch.integrations.torch_runtime import channels_last
    from tiledispatch.native import launch
    from tiledispatch.native.problem import Direction

    previous = dict(launch._DEVICE_TYPE)
    launch._DEVICE_TYPE[launch.Backend.COMPILED] = "cpu"
    try:
        tile, x, g, runtime = _setup("ours")
        w = tile.weight
        pad_begin, pad_end = integration.padding_of(tile.padding, tile.kernel_size, tile.dilation)
        params = (CHANNELS, (1, 1), pad_begin, pad_end, (1, 1))
        x_shape, w_shape = tuple(x.shape), tuple(w.shape)
        entry = runtime._entries[(Direction.FORWARD, x.dtype, x_shape, w_shape, *params, "cpu")]
        plan = entry.plan
        fmt = torch.channels_last
        spec = plan.operands[2]
        pieces = {
            # tile_conv's (and a TileConv's first call per key); the module's steady state skips them
            "tile_conv prologue: torch.is_autocast_enabled": lambda: torch.is_autocast_enabled(x.device.type),
            "tile_conv prologue: runtime.accepts": lambda: runtime.accepts(x),
            "tile_conv prologue: _eager (compile/dispatch-mode checks)": lambda: integration._eager(x, w),
            "tile_conv prologue: runtime.pytorch_serves": lambda: runtime.pytorch_serves(x, w, *params),
            "tile_conv prologue: x.contiguous(channels_last) (no copy)": lambda: x.contiguous(memory_format=fmt),
            "runtime.entry (cache hit)": lambda: runtime.entry(Direction.FORWARD, x.dtype, x_shape, w_shape,
                                                               *params, "cpu"),
            "_launch: channels_last(x) (no copy)": lambda: channels_last(x),
            "LaunchPlan.run (2 stand-in launches, output + workspace allocated)":
                lambda: plan.run(x, w, check_support=False),
            "  of which torch.empty output (CPU, 19 MB)":
                lambda: torch.empty(spec.pytorch, dtype=plan.dtype, memory_format=fmt),
            "  of which torch.empty workspace (CPU)":
                lambda: torch.empty(plan.workspace_elements, dtype=torch.float32),
            "Runtime._launch (channels_last x2 + plan.run)": lambda: runtime._launch(entry, x, w),
            "Runtime.run fwd (route/entry + policy + _launch)":
                lambda: runtime.run(Direction.FORWARD, x, w, x_shape, w_shape, *params),
        }
        pieces["TileConv fast path: _eager + any autocast"] = lambda: (
            integration._eager(x, w) and torch._C._is_any_autocast_enabled())
        out = {name: per_call_us(call, calls, rounds)["min_us"] for name, call in pieces.items()}
        with torch.no_grad():
            out["TileConv2d.forward, no grad (called directly: no nn.Module __call__)"] = per_call_us(
                lambda: tile.forward(x), calls, rounds)["min_us"]
            out["TileConv2d forward, no grad (module + fast path or tile_conv + run)"] = per_call_us(
                lambda: tile(x), calls, rounds)["min_us"]

        def forward_with_grad():
            x.grad = None
            return tile(x)
        out["TileConv2d forward with autograd node (EagerConv)"] = per_call_us(forward_with_grad, calls,
                                                                               rounds)["min_us"]
        out["TileConv2d forward + backward"] = per_call_us(_step(tile, x, g, True), calls, rounds)["min_us"]
        return out
    finally:
        launch._DEVICE_TYPE.clear()
        launch._DEVICE_TYPE.update(previous)


def profile_top(n: int = 25) -> list[str]:
    """cProfile of the ``ours`` step, top functions by own time (working tree)."""
    import cProfile
    import io
    import pstats

    from tiledispatch.native import launch

    previous = dict(launch._DEVICE_TYPE)
    launch._DEVICE_TYPE[launch.Backend.COMPILED] = "cpu"
    try:
        tile, x, g, _ = _setup("ours")
        step = _step(tile, x, g, True)
        for _ in range(50):
            step()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(1000):
            step()
        profiler.disable()
    finally:
        launch._DEVICE_TYPE.clear()
        launch._DEVICE_TYPE.update(previous)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(n)
    return [line.replace(str(REPO) + "/", "") for line in text.getvalue().splitlines() if line.strip()]


# ---- driver ------------------------------------------------------------------------------------------
def baseline_tree(rev: str, into: Path) -> Path:
    """tiledispatch/, native/ and models/ (its Python files) as at git ``rev`` (read with ``git show``),
    the rest linked (models/ too: the feature engine and the kernels' host code move together)."""
    root = into / "tree"
    package = root / "tiledispatch"
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "tiledispatch", "native", "models"],
                           cwd=REPO, check=True, capture_output=True, text=True).stdout.split()
    for name in files:
        if not name.endswith(".py"):
            continue
        target = package / name if name.startswith(("native/", "models/")) else root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(subprocess.run(["git", "show", f"{rev}:{name}"], cwd=REPO, check=True,
                                          capture_output=True).stdout)
    (package / "models" / "artifacts").symlink_to(REPO / "models" / "artifacts")  # the shipped models
    for sub, folder in (("client", "client"), ("server", "server"), ("v1", "proto/tiledispatch/v1")):
        link = package / sub
        if not link.exists():
            link.symlink_to(REPO / folder)
    return root


def child(tree: Path, calls: int, rounds: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import os; os.sched_setaffinity(0, {int(sys.argv[4])});"
            "import torch; torch.set_num_threads(1);"
            "sys.path.insert(1, sys.argv[5]); import torch_host_overhead as b;"
            "print(json.dumps(b.measure(int(sys.argv[2]), int(sys.argv[3]))))")
    result = subprocess.run([sys.executable, "-c", code, str(tree), str(calls), str(rounds),
                             str(sorted(os.sched_getaffinity(0))[0]), str(REPO / "bench")],
                            cwd=tree, env=env, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _best(runs: list[dict]) -> dict:
    return {key: {"min_us": min(r[key]["min_us"] for r in runs),
                  "median_us": statistics.median(r[key]["median_us"] for r in runs)} for key in runs[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=3, help="alternations of baseline and working tree")
    parser.add_argument("--baseline-rev", default="HEAD")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import torch

    torch.set_num_threads(1)
    from tiledispatch.native.bench import git_commit

    before_runs, after_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tree = baseline_tree(args.baseline_rev, Path(tmp)) if args.baseline_rev else None
        for _ in range(args.repeats):
            if tree is not None:
                before_runs.append(child(tree, args.calls, args.rounds))
            after_runs.append(measure(args.calls, args.rounds))
    after = _best(after_runs)
    before = _best(before_runs) if before_runs else None
    report = {
        "benchmark": "torch_host_overhead", "git_commit": git_commit(), "working_tree": "uncommitted changes "
        "measured as 'after'" if before else "working tree",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"description": f"this {os.cpu_count()}-core CPU machine, no GPU", "cpu": cpu_model(),
                    "cpu_count": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                    "load_average_1m_before": os.getloadavg()[0]},
        "stubbed": ["Triton kernel launches: compiled backend pointed at CPU tensors, stand-in binaries that "
                    "record their arguments (Triton's CompiledKernel runner/launcher not run)",
                    "CUDA: CPU tensors (runtime cpu='interpret' so they take the CUDA tensors' path; no "
                    "torch.cuda.current_device(), no CUDA caching allocator: allocations are CPU ones)",
                    "fastest decisions preset per scenario (no timing)"],
        "layer": {"conv": f"depthwise {CHANNELS}ch {KERNEL}x{KERNEL} pad {PAD}, bias=False",
                  "dtype": "bf16 (real size), fp32 (tiny input)",
                  "memory_format": "channels_last"},
        "scenarios": {name: {"impls": impls, "input": list(shape), "grad": grad}
                      for name, (impls, shape, grad) in SCENARIOS.items()},
        "method": {"calls": args.calls, "rounds": args.rounds, "repeats": args.repeats, "pinned_cores": 1,
                   "torch_threads": 1, "statistic": "min over rounds and repeats (median alongside)",
                   "unit": "µs per layer call; fwd+bwd = forward + backward_data + backward_weight"},
        "baseline_rev": args.baseline_rev or None,
        "before": before, "after": after,
        "breakdown_after_us": breakdown(args.calls, args.rounds),
        "profile_after_top": profile_top(),
    }
    print(f"{'scenario':48s} {'before':>9s} {'after':>9s}  (min µs per call)")
    for key in after:
        b = f"{before[key]['min_us']:9.1f}" if before else "        -"
        print(f"{key:48s} {b} {after[key]['min_us']:9.1f}")
    print("breakdown (after, µs):")
    for key, value in report["breakdown_after_us"].items():
        print(f"  {key:70s} {value:7.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
