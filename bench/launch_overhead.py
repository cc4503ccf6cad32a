"""Host cost per convolution call, on a machine without a GPU: our launcher and the PyTorch layer.

Launching real kernels needs a GPU; the host side does not. The compiled backend is pointed at CPU
tensors and given *stand-in binaries* (callables that record their arguments and do nothing), so
everything the host does per call is timed, and nothing else:

* ``launch``: ``native.launch.run`` on the real (problem, kernel) pairs of
  ``tests.kernels.cases.MODEL_CASES`` (depthwise direct, tap rows, igemm, gmerge with weight
  packing, split-K backward-weight with its reduction; 2D and 3D):
  ``uncached`` (``run(cache=False)``: the template's ``plan()``, program table and loader on every
  call, as before launch plans), ``cached`` (``run()``: the plan from the LRU) and ``plan``
  (``LaunchPlan.run``: how the PyTorch integration calls it, its entry holding the plan). Two
  operand forms: ``pytorch`` (PyTorch-shaped channels-last tensors, output allocated: what the
  integration passes) and ``grouped_out`` (grouped tensors and a caller-provided output: what the
  server and the benchmark pass). ``check_support=False`` as both callers use it.
* ``module``: one ``TileConv2d`` call, forward + backward (``y = conv(x); y.backward(g)``), fp32 on
  CPU, with the three directions settled as a scenario says (``ours``, ``split``: forward and
  backward-weight on PyTorch, backward-data on ours, the split the H200 run saw most; ``pytorch``),
  through ``EagerConv`` (``function``, eager mode now) or the custom ops with uncached launches
  (``custom_ops``: eager mode before), beside ``nn.Conv2d`` (PyTorch's own CPU convolution, which
  does the arithmetic too: the tensors are kept tiny so that it is mostly host cost). Our kernels
  are stand-ins there as well, so a ``pytorch`` direction costs its CPU arithmetic and an ``ours``
  one nothing on the device: compare paths of one scenario, not ours with PyTorch's.

Timing: one core (``sched_setaffinity``), one torch thread, ``--rounds`` rounds of ``--calls`` calls
after a warm-up; the median and the minimum µs per call over the rounds (another process on the
machine shows in the median, hardly in the minimum).

    .venv/bin/python bench/launch_overhead.py            # writes bench/results/launch_overhead_cpu<N>.json
    .venv/bin/python bench/launch_overhead.py --rounds 5 --calls 200 --out /tmp/overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from host_timing import cpu_model, per_call_us, stand_in_loader  # noqa: E402  (bench/, the script's own folder)

from tests.kernels.cases import MODEL_CASES, model_case  # noqa: E402
from tiledispatch.native import launch  # noqa: E402
from tiledispatch.native.bench import git_commit  # noqa: E402


# ---- native.launch.run ---------------------------------------------------------------------------
def launch_section(args) -> list[dict]:
    rows = []
    for label, key, kernel in MODEL_CASES:
        problem, config = model_case(label)
        loader = stand_in_loader()
        dtype = launch.torch_dtype(problem.dtype)
        grouped = [torch.empty(shape, dtype=dtype) for shape in problem.operand_shapes]
        weights = [weight for _, weight in launch._OPERANDS[problem.direction]]
        fmt = torch.channels_last if problem.ndim == 2 else torch.channels_last_3d
        faces = [torch.empty(launch.pytorch_shape(tuple(t.shape), weight=w), dtype=dtype).contiguous(memory_format=fmt)
                 for t, w in zip(grouped, weights)]
        plan = launch.launch_plan(problem, config, "compiled", loader)
        forms = {"pytorch": (faces[0], faces[1], None), "grouped_out": tuple(grouped)}
        row = {"case": label, "problem": key, "kernel": kernel, "launches": [p.program for p in plan.launches],
               "workspace_elements": plan.workspace_elements, "traced": not plan.untraced}
        for form, (first, second, out) in forms.items():
            paths = {
                "uncached": lambda: launch.run(problem, config, first, second, out, loader=loader,  # noqa: B023
                                               check_support=False, cache=False),
                "cached": lambda: launch.run(problem, config, first, second, out, loader=loader,  # noqa: B023
                                             check_support=False),
                "plan": lambda: plan.run(first, second, out, check_support=False),  # noqa: B023
            }
            row[form] = {path: per_call_us(call, args.calls, args.rounds) for path, call in paths.items()}
        rows.append(row)
        print(f"{label:32s} " + "  ".join(f"{form} {path} {row[form][path]['min_us']:5.1f}"
                                          for form in forms for path in ("uncached", "plan")), flush=True)
    return rows


# ---- the PyTorch layer ---------------------------------------------------------------------------
SCENARIOS = {
    "ours": {"fwd": "ours", "bwd_data": "ours", "bwd_weight": "ours"},
    "split": {"fwd": "pytorch", "bwd_data": "ours", "bwd_weight": "pytorch"},
    "pytorch": {"fwd": "pytorch", "bwd_data": "pytorch", "bwd_weight": "pytorch"},
}
LAYERS = {  # (in, out, kernel, groups), input (N, C, H, W)
    "depthwise_3x3": ((32, 32, 3, 32), (2, 32, 8, 8)),
    "grouped_3x3": ((64, 64, 3, 8), (2, 64, 8, 8)),
}


def _runtime_with_stand_ins(layer, x, impl_by_direction):
    """A runtime under ``fastest`` whose three problems of ``layer`` on ``x`` are decided as
    ``impl_by_direction`` says and whose kernels are compiled stand-ins (plans built)."""
    from tiledispatch.integrations import torch_runtime
    from tiledispatch.integrations.torch import padding_of
    from tiledispatch.integrations.torch_dispatch import Decision
    from tiledispatch.native.problem import Direction

    runtime = torch_runtime.configure(cpu="interpret", dtypes=(torch.float32,), policy="fastest")
    loader = stand_in_loader()
    pad_begin, pad_end = padding_of(layer.padding, layer.kernel_size, layer.dilation)
    params = (layer.groups, tuple(layer.stride), pad_begin, pad_end, tuple(layer.dilation))
    for direction in Direction:
        runtime.entry(direction, x.dtype, tuple(x.shape), tuple(layer.weight.shape), *params, "cpu")
    for key, entry in list(runtime._entries.items()):
        compiled = replace(entry, backend="compiled", loader=loader,
                           decision=Decision(impl_by_direction[entry.problem.direction.value], 1.0, 1.0, 0.0))
        runtime._entries[key] = compiled.with_plan()
    return runtime


def module_section(args) -> list[dict]:
    from tiledispatch.integrations import torch as integration
    from tiledispatch.integrations.torch import TileConv2d
    from tiledispatch.integrations.torch_runtime import channels_last

    rows = []
    for name, ((cin, cout, k, groups), shape) in LAYERS.items():
        torch.manual_seed(0)
        plain = torch.nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=False)
        plain = plain.to(memory_format=torch.channels_last)
        x = torch.randn(shape).contiguous(memory_format=torch.channels_last).requires_grad_()
        grad = torch.randn(shape[0], cout, *shape[2:]).contiguous(memory_format=torch.channels_last)

        def step(module, x=x, grad=grad):
            def call():
                module(x).backward(grad)
            return call

        row = {"layer": name, "conv": [cin, cout, k, groups], "input": list(shape),
               "nn.Conv2d": per_call_us(step(plain), args.calls, args.rounds)}
        tile = TileConv2d.from_conv(plain)
        for scenario, impls in SCENARIOS.items():
            runtime = _runtime_with_stand_ins(tile, x, impls)
            row[scenario] = {"function": per_call_us(step(tile), args.calls, args.rounds)}
            if scenario != "pytorch":  # settled on PyTorch: F.conv either way, no custom op
                eager, launch_ = integration._eager, runtime._launch
                integration._eager = lambda x, w: False
                # Before launch plans the runtime called run() per launch, which planned every time.
                runtime._launch = lambda entry, first, second: launch.run(
                    entry.problem, entry.config, channels_last(first), channels_last(second),
                    backend=entry.backend, loader=entry.loader, check_support=False, cache=False)
                try:
                    row[scenario]["custom_ops"] = per_call_us(step(tile), args.calls, args.rounds)
                finally:
                    integration._eager, runtime._launch = eager, launch_
        rows.append(row)
        print(f"{name:16s} nn.Conv2d {row['nn.Conv2d']['min_us']:6.1f}  " + "  ".join(
            f"{s}: " + " / ".join(f"{path} {v['min_us']:6.1f}" for path, v in row[s].items()) for s in SCENARIOS),
            flush=True)
    return rows


def machine() -> dict:
    """The machine, as bench/fleet_perf.py names it (other work on it raises every figure)."""
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "torch": torch.__version__, "gpu": "none (stand-in binaries)",
            "load_average_1m_before": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sections", default="launch,module")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" /
                        f"launch_overhead_cpu{os.cpu_count()}.json")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    torch.set_num_threads(1)
    sections = set(args.sections.split(","))
    report = {"benchmark": "launch_overhead", "git_commit": git_commit(), "machine": machine(),
              "method": {"calls": args.calls, "rounds": args.rounds, "pinned_cores": 1, "torch_threads": 1,
                         "binaries": "stand-ins recording their arguments (compiled backend on CPU tensors)"},
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    previous = dict(launch._DEVICE_TYPE)
    launch._DEVICE_TYPE[launch.Backend.COMPILED] = "cpu"
    try:
        if "launch" in sections:
            report["launch"] = launch_section(args)
        if "module" in sections:
            report["module"] = module_section(args)
    finally:
        launch._DEVICE_TYPE.update(previous)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
