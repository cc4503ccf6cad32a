"""End-to-end PyTorch benchmark: torchvision models with their grouped/depthwise convs swapped to
tiledispatch kernels vs the same models on cuDNN, in one process on one GPU, the swapped model under
both dispatch policies: ``ours`` (every swapped conv on our kernels) and ``fastest`` (each (direction,
shape) on the faster of ours and cuDNN, timed on its first call).

    python bench/torch_e2e.py                         # every model, its two batch sizes
    python bench/torch_e2e.py --models mobilenet_v2 --batches 32,128 --out-dir /tmp/e2e
    TILEDISPATCH_REGISTRY_DIR=~/.tiledispatch/registry python bench/torch_e2e.py   # compiled kernels
    python bench/torch_e2e.py --target 127.0.0.1:50051  # selection by a running service
    python bench/torch_e2e.py --cuda-graph --models mobilenet_v2 --batches 32   # + CUDA-graph replays

Per model and batch size, bf16, channels-last (``--memory-format contiguous`` to change), random
weights (nothing downloaded; models in ``tests/integrations/models.py``):

* forward step: ``model.eval()`` under ``torch.inference_mode()``;
* training step: ``model.train()``, ``zero_grad(set_to_none=True)``, forward, cross-entropy on random
  labels, backward (no optimizer step: it is the same work for both and would only dilute the ratio);
* cuDNN: ``torch.backends.cudnn.benchmark = True`` (its autotuner runs during the warm-up);
* timing: CUDA events around ``--steps`` back-to-back steps (host launch overhead included, as a
  training loop sees it), in ``--rounds`` rounds alternating cuDNN, ours and fastest (the same
  swapped model, the runtime's policy switched before each run's steps, decisions kept across
  switches; one untimed step after each switch, which re-derives the routes and resolved calls a
  switch drops, as a training loop that keeps one policy never does); the median round is reported
  (and the min), and beside cuDNN's median over the swapped run's the *paired* speedup: the median
  over rounds of cuDNN's round over the swapped run's round of the same alternation (the host's speed
  drifts between rounds by tens of percent on the GPU machines, and each pair's ratio cancels most of
  that; many short rounds, e.g. ``--rounds 45 --steps 2``, pair more closely); warm-up steps first;
* selection: the first swapped training step after clearing the runtime's caches (policy ``fastest``)
  selects a kernel for every (direction, shape) (remote ``Select`` or the local ranking), without a
  registry JIT-compiles kernels, and times ours against cuDNN for each; its wall time, the selection
  time alone and the deciding time are reported; the second step times, once per layer shape, each
  layer with a direction on ours both ways (as decided, and PyTorch's own convolution: see
  ``torch_dispatch``, *Layers*); then the wall time of a third step and its mean cached lookup time;
* dispatch: the decisions (``dispatch_report()``, ``layer_report()``), and per direction how many
  swapped conv calls of one step (layers; a module called twice counts twice) went to ours and to cuDNN;
* ``--profile``: after the timing, ``torch.profiler`` (CUPTI) over ``--steps`` training steps of each of
  cuDNN, ours and fastest: wall ms per step, device-busy ms per step (the union of kernel intervals:
  below the wall time the step waits on the host), kernel ms by kind (ours / cuDNN-cuBLAS convolutions
  and GEMMs / copies and layout changes / other) and the 12 kernels taking most time.

``--cuda-graph`` (the default is eager only) adds, after the eager figures of each case, what a
CUDA-graph training loop sees: eager steps of small batches are host-bound (the GPU waits for the
Python that launches the next kernel), a graph replay launches no Python, so its time is the
device's alone (kernels, and the gaps between them inside the graph):

* per run (cuDNN; the swapped model under ``ours``; under ``fastest`` as decided for eager steps, on
  device + host time per call; under ``fastest`` with the runtime's ``cost="device"``, the same
  decisions re-derived from device time alone, nothing timed again: ``fastest_device``) its own graphs,
  since the policy decides which kernels a capture records: the training step (grads zeroed in the graph by one
  ``torch._foreach_zero_`` over the existing ``.grad`` tensors, i.e. ``zero_grad(set_to_none=False)``,
  so every replay writes the same gradient tensors; forward; cross-entropy; backward) and the forward
  step (eval, ``inference_mode``), on the same static input and labels as the eager steps;
* the standard whole-network recipe: ``max(2, --warmup)`` eager steps on a side stream first (cuDNN's
  benchmark, our kernels' selection and JIT compiles, the ``.grad`` allocations happen there, and under
  ``fastest`` every decision is already made by the eager part and kept: the count of problems still
  undecided at capture is reported and should be 0), then ``torch.cuda.graph`` on that stream; all of
  a case's graphs share one memory pool (captured one after another and replayed one at a time on one
  stream, each replay reading only tensors from outside the pool: parameters, their ``.grad``,
  batch-norm buffers, input and labels);
* timing: CUDA events around ``--steps`` back-to-back replays in ``--rounds`` rounds alternating
  cuDNN, ours, fastest and fastest_device (as in eager mode); median and min per replay, speedup = cuDNN's replay
  over the swapped model's;
* also reported: how many of our kernel calls each capture recorded (proof that the graph runs ours),
  each run's eager-over-graph time ratio (its host-bound share), and how many ``fastest`` decisions
  (made on device + host time per call) device time alone would reverse: replays pay no host time;
* a capture that fails is recorded with its exception text for that run and step (the other runs
  and cases go on); a case whose graph part fails keeps its eager figures.

Writes ``<out-dir>/torch_e2e.json`` and ``torch_e2e.md`` (default out-dir:
``bench/results/<UTC date>_<gpu>``); with ``--cuda-graph`` the markdown has a separate table,
"CUDA-graph replay (device-bound)".
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import json
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tests.integrations.models import CASES, build  # noqa: E402
from tiledispatch.integrations import torch_native, torch_runtime  # noqa: E402
from tiledispatch.integrations.torch import (  # noqa: E402
    dispatch_report,
    get_runtime,
    padding_of,
    swap_convs,
    swapped_convs,
)
from tiledispatch.native.bench import git_commit  # noqa: E402
from tiledispatch.native.problem import Direction  # noqa: E402

POLICIES = ("ours", "fastest")  # the swapped model's runs, beside cuDNN
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")


def _gpu_short() -> str:
    from tiledispatch.native.arch import arch_for_device_name

    return arch_for_device_name(torch.cuda.get_device_name(), torch.cuda.get_device_capability()).name


def _time_ms(step, steps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def _steps(model, x, labels):
    def forward():
        with torch.inference_mode():
            model(x)

    def train():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x).float(), labels).backward()

    return forward, train


def _with_policy(policy: str, step):
    """``step`` run under the runtime's ``policy``, set when it differs (decisions are kept; setting it
    drops the runtime's routes and every TileConv's resolved calls, which the next step derives again:
    :func:`_measure` runs that step untimed)."""
    runtime = get_runtime()

    def run():
        if runtime.policy != policy:
            runtime.policy = policy
        step()

    return run


def _measure(steps: dict, models, train: bool, args) -> dict:
    """Alternating rounds of every step in ``steps`` (label -> step; "cudnn" first); median and min
    per-step ms of each, and cuDNN's median over each other's (``speedup`` is ours, the pure policy)."""
    times = {label: [] for label in steps}
    for model in models:
        model.train(train)
    for _ in range(args.warmup):
        for step in steps.values():
            step()
    torch.cuda.synchronize()
    for _ in range(args.rounds):
        for label, step in steps.items():
            step()  # untimed: a policy switch's routes and resolved calls are derived again here
            times[label].append(_time_ms(step, args.steps))
    return summarize(times)


def summarize(times: dict[str, list[float]]) -> dict:
    """Per run (label -> per-step ms of each round): median, min and the rounds; ``speedup`` (cuDNN's
    median over ours) and ``speedup_fastest`` (over fastest's), None where either run is missing (a
    CUDA-graph capture that failed)."""
    out: dict = {k: {"median_ms": statistics.median(v), "min_ms": min(v), "rounds_ms": list(v)}
                 for k, v in times.items() if v}
    for label, run in out.items():
        if label != "cudnn" and "cudnn" in out:
            run["paired_speedup"] = paired_speedup(out["cudnn"]["rounds_ms"], run["rounds_ms"])
    out["speedup"] = speedup(out, "ours")
    out["speedup_fastest"] = speedup(out, "fastest")
    if "fastest_device" in out:
        out["speedup_fastest_device"] = speedup(out, "fastest_device")
    return out


def paired_speedup(cudnn_rounds: list[float], rounds: list[float]) -> float | None:
    """The median over rounds of cuDNN's round time over the swapped run's round of the same
    alternation (> 1: faster). The host's speed drifts between rounds far more than within one
    alternation (session 20, H200 host: 22–37 ms for the same cuDNN step), and a round's ratio to its
    neighbour cancels that drift where the ratio of the two runs' medians keeps it."""
    ratios = [c / r for c, r in zip(cudnn_rounds, rounds) if r > 0]
    return statistics.median(ratios) if ratios else None


def _paired(result: dict, label: str) -> float | None:
    """A case's paired training speedup of ``label`` (from its rounds: reports written before the
    summary kept it render too)."""
    return paired_speedup(result["train"]["cudnn"]["rounds_ms"], result["train"][label]["rounds_ms"])


def speedup(summary: dict, label: str) -> float | None:
    """cuDNN's median step time over ``label``'s (> 1: the swapped model is faster); None when
    either was not measured."""
    if "cudnn" not in summary or label not in summary or summary[label]["median_ms"] <= 0:
        return None
    return summary["cudnn"]["median_ms"] / summary[label]["median_ms"]


# ---- CUDA-graph mode (--cuda-graph) ------------------------------------------------------------------------
# One set of graphs per run: the policy (and, for fastest_device, the runtime's cost) decides what a
# capture records.
GRAPH_RUNS = ("cudnn", *POLICIES, "fastest_device")
GRAPH_SWAPPED = GRAPH_RUNS[1:]
STEP_KINDS = ("train", "forward")


def _graph_steps(model, x, labels) -> dict:
    """The steps ``--cuda-graph`` captures, on the static ``x`` and ``labels``; each returns its output
    (kept alive while the graph replays). Training: the grads are zeroed in the graph (one multi-tensor
    kernel over the existing ``.grad`` tensors, ``zero_grad(set_to_none=False)``'s effect) so that
    every replay writes the same gradient tensors; ``set_to_none`` would free them under the graph."""
    params = [p for p in model.parameters() if p.requires_grad]

    def train():
        grads = [p.grad for p in params if p.grad is not None]  # all of them from the 2nd warm-up step on
        if grads:
            torch._foreach_zero_(grads)
        loss = F.cross_entropy(model(x).float(), labels)
        loss.backward()
        # detached: the kept output must not hold the step's autograd nodes (their AccumulateGrad
        # nodes, bound to the capture stream, would serve the next steps' backward on the parameters)
        return loss.detach()

    def forward():
        with torch.inference_mode():
            return model(x)

    return {"train": train, "forward": forward}


@contextlib.contextmanager
def _counting_our_calls(runtime):
    """Counts the runtime's launches of our kernels inside the block (``counts["calls"]``): during a
    capture, the calls of ours the graph records (only the capture pays the wrapper); a C++-path
    layer call counts its forward and each backward direction it planned (run while capturing the
    same step's backward)."""
    counts = {"calls": 0}
    launch, native = runtime._launch, torch_native.conv

    def counting(entry, first, second):
        counts["calls"] += 1
        return launch(entry, first, second)

    def counting_native(x, weight, bias, plans):  # the C++ path: its forward, and the backward it plans
        counts["calls"] += 1 + (plans[1] >= 0) + (plans[2] >= 0)
        return native(x, weight, bias, plans)

    runtime._launch = counting
    torch_native.conv = counting_native
    try:
        yield counts
    finally:
        del runtime._launch  # the class's method again
        torch_native.conv = native


def _warm_up(step, stream, steps: int) -> None:
    """The standard whole-network recipe's first half: ``steps`` calls of ``step`` on ``stream`` (a side
    stream), where cuDNN's benchmark, our selection, compiles and ``fastest`` decisions and the
    ``.grad`` allocations happen, outside any capture."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(steps):
            step()
    stream.synchronize()


def _capture(step, stream, pool):
    """The recipe's second half: ``step`` captured on ``stream`` (the warm-up's) into a new graph drawing
    on ``pool``. Returns (graph, the output ``step`` returned while captured)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        out = step()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, out


def _graph_mode(cudnn, ours, x, labels, eager: dict, args) -> dict:
    """``--cuda-graph`` for one case: capture each run's training and forward steps, time their
    replays in alternating rounds (see the module docstring). ``eager``: the case's eager result."""
    runtime = get_runtime()
    stream, pool = torch.cuda.Stream(), torch.cuda.graph_pool_handle()
    warmup = max(2, args.warmup)
    graphs: dict[str, dict] = {kind: {} for kind in STEP_KINDS}
    outputs = []  # static outputs: kept alive, so a later capture sharing the pool never takes their memory
    errors: dict[str, str] = {}
    our_calls: dict[str, dict[str, int]] = {}
    for label in GRAPH_RUNS:
        model = cudnn if label == "cudnn" else ours
        steps = _graph_steps(model, x, labels)
        for kind in STEP_KINDS:
            model.train(kind == "train")
            if label != "cudnn":  # before the warm-up: the capture records this policy's kernels
                runtime.policy = "fastest" if label == "fastest_device" else label
                runtime.cost = "device" if label == "fastest_device" else "total"
            previous = torch.cuda.current_stream()
            try:
                _warm_up(steps[kind], stream, warmup)
                with _counting_our_calls(runtime) as counts:
                    graph, out = _capture(steps[kind], stream, pool)
                graphs[kind][label] = graph
                outputs.append(out)
                our_calls.setdefault(label, {})[kind] = counts["calls"]
            except Exception as error:  # noqa: BLE001 - recorded per run; the other runs and cases go on
                errors[f"{label} {kind}"] = f"{type(error).__name__}: {error}"
                with contextlib.suppress(Exception):
                    torch.cuda.set_stream(previous)  # graph.__exit__ may not have restored it
                    torch.cuda.synchronize()
    runtime.cost = "total"
    result: dict = {"warmup_steps": warmup, "errors": errors, "our_calls_captured": our_calls,
                    "undecided_problems": sum(e.decision is None for e in runtime.entries()),
                    "device_only_flips": device_only_flips(dispatch_report())}
    for kind in STEP_KINDS:
        result[kind] = _measure_replays(graphs[kind], args) if graphs[kind] else {}
    result["eager_over_graph"] = eager_over_graph(eager, result)
    del outputs
    return result


def _measure_replays(graphs: dict, args) -> dict:
    """Replays of each captured graph (label -> graph; cuDNN first) in alternating rounds, as
    :func:`_measure` times eager steps: ``--warmup`` replays each, then per round ``--steps``
    back-to-back replays of each between CUDA events; :func:`summarize`'s figures per replay."""
    for _ in range(args.warmup):
        for graph in graphs.values():
            graph.replay()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {label: [] for label in graphs}
    for _ in range(args.rounds):
        for label, graph in graphs.items():
            times[label].append(_time_ms(graph.replay, args.steps))
    return summarize(times)


def device_only_flips(report: list[dict]) -> dict[str, int]:
    """How many ``fastest`` decisions (made on device + host time per call) device time alone would
    reverse, by where they would go: a graph replay pays no host time, so these problems replay on the
    implementation that is slower on the device (ties go to ours, as in the decisions)."""
    flips = {"to_ours": 0, "to_pytorch": 0}
    for r in report:
        device_choice = "ours" if r["ours_ms"] <= r["pytorch_ms"] else "pytorch"
        if device_choice != r["impl"]:
            flips[f"to_{device_choice}"] += 1
    return flips


def eager_over_graph(eager: dict, graph: dict) -> dict[str, dict[str, float]]:
    """Per step kind and run, the eager step's median time over the graph replay's (> 1: the eager
    step waited on the host for that share), for the runs measured both ways."""
    out: dict[str, dict[str, float]] = {}
    for kind in STEP_KINDS:
        replays, steps = graph.get(kind) or {}, eager.get(kind) or {}
        out[kind] = {label: steps[label]["median_ms"] / replays[label]["median_ms"] for label in GRAPH_RUNS
                     if label in steps and label in replays and replays[label]["median_ms"] > 0}
    return out


_OUR_KERNELS = ("_igemm_", "_direct_", "_dwroll_", "_split_reduce", "_pack_kernel", "_weights_tap_major", "_tma_conv",
                "_pad_kernel", "_flip_kernel")
_VENDOR_CONV = ("conv", "cudnn", "xmma", "dgrad", "wgrad", "fprop", "implicit", "gemm", "sm90", "cutlass")
_COPIES = ("copy", "nchwtonhwc", "nhwctonchw", "transpose", "permute")


def _kernel_kind(name: str) -> str:
    lowered = name.lower()
    if any(k in name for k in _OUR_KERNELS):
        return "ours"
    if any(k in lowered for k in _COPIES):
        return "copies/layout"
    if any(k in lowered for k in _VENDOR_CONV):
        return "cuDNN/cuBLAS conv+GEMM"
    return "other"


#: Host-side CUDA calls that wait for the device (or may: allocating and freeing device memory), by name part.
_WAITING_CALLS = ("Synchronize", "Malloc", "MemAlloc", "Free", "MemcpyDtoH")


def _waits(call: str) -> bool:
    return call == "cudaMemcpy" or any(part in call for part in _WAITING_CALLS)


def _profile(step, steps: int) -> dict:
    """Where a step's time goes: CUPTI kernel records over ``steps`` steps (after one untraced step);
    and on the host: the time to enqueue the steps (``host_ms``, before the final synchronize: when it
    is close to ``wall_ms`` the step is host-bound), the CUDA runtime/driver calls made per step (the
    calls that wait for the device among them: a wait inside a step serializes host and device), and
    the Python garbage collector's pauses."""
    import gc

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    pauses: list[float] = []
    started: list[float] = []

    def on_gc(phase, info):
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses.append(time.perf_counter() - started.pop())

    gc.callbacks.append(on_gc)
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            for _ in range(steps):
                step()
            host_ms = (time.perf_counter() - start) * 1e3 / steps
            torch.cuda.synchronize()
            wall_ms = (time.perf_counter() - start) * 1e3 / steps
    finally:
        gc.callbacks.remove(on_gc)
    api: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type != DeviceType.CUDA and (e.name.startswith("cuda") or e.name.startswith("cu")):
            api.setdefault(e.name, []).append(e.time_range.elapsed_us())
    host_calls = [{"call": n, "calls_per_step": len(v) / steps, "us_per_step": sum(v) / steps,
                   "waits": _waits(n)}
                  for n, v in sorted(api.items(), key=lambda kv: -sum(kv[1]))]
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    by_name: dict[str, list[float]] = {}
    kinds: dict[str, float] = {}
    intervals = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    busy_us, reach = 0.0, float("-inf")
    for begin, end in intervals:  # union of kernel intervals: time the GPU had work
        busy_us += max(0.0, end - max(begin, reach))
        reach = max(reach, end)
    for e in kernels:
        us = e.time_range.elapsed_us()
        by_name.setdefault(e.name, []).append(us)
        kinds[_kernel_kind(e.name)] = kinds.get(_kernel_kind(e.name), 0.0) + us / 1e3 / steps
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:12]
    return {"wall_ms": wall_ms, "host_ms": host_ms, "device_busy_ms": busy_us / 1e3 / steps,
            "host_calls": host_calls[:15], "waiting_calls_per_step": sum(c["calls_per_step"] for c in host_calls
                                                                        if c["waits"]),
            "gc_pauses_per_step": len(pauses) / steps, "gc_ms_per_step": sum(pauses) * 1e3 / steps,
            "kernels_per_step": len(kernels) / steps, "kinds_ms": dict(sorted(kinds.items())),
            "top": [{"kernel": n, "kind": _kernel_kind(n), "calls_per_step": len(v) / steps,
                     "ms_per_step": sum(v) / 1e3 / steps} for n, v in top]}


def _layer_problems(model, x) -> list[tuple[str, object]]:
    """(module name, forward ConvProblem) of every swapped conv call in one forward of ``model``."""
    runtime, calls = get_runtime(), []

    def recorder(name):
        def record(module, inputs, output):
            x_in = inputs[0]
            pad_begin, pad_end = padding_of(module.padding, module.kernel_size, module.dilation)
            calls.append((name, runtime.problem(Direction.FORWARD, x_in.dtype, tuple(x_in.shape),
                                                tuple(module.weight.shape), module.groups, tuple(module.stride),
                                                pad_begin, pad_end, tuple(module.dilation))))
        return record

    names = set(swapped_convs(model))
    handles = [m.register_forward_hook(recorder(n)) for n, m in model.named_modules() if n in names]
    try:
        with torch.inference_mode():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return calls


def _dispatch_summary(model, x) -> dict:
    """The ``fastest`` decisions, and per direction the swapped conv calls (layers) of a training step
    sent to ours / cuDNN: a timed layer that PyTorch's own convolution serves (``layer_report``) counts
    as cuDNN in every direction, one the all-ours C++ route serves as ours in every direction, whatever
    its directions' decisions."""
    report = dispatch_report()
    impl = {r["problem"]: r["impl"] for r in report}
    layer_report = get_runtime().layer_report()
    training = [r for r in layer_report if r["grad_x"] or r["grad_w"]]  # (inference calls are timed apart)
    native = {r["problem"] for r in training if r["native"]}
    all_ours = {r["problem"] for r in training if r.get("route") == "ours_cpp"}
    layers = {d: {"ours": 0, "pytorch": 0, "undecided": 0} for d in DIRECTIONS}
    native_layers = ours_layers = 0
    for _, problem in _layer_problems(model, x):
        native_layers += problem.key in native
        ours_layers += problem.key in all_ours
        for direction in DIRECTIONS:
            where = ("pytorch" if problem.key in native else "ours" if problem.key in all_ours
                     else impl.get(problem.with_direction(direction).key, "undecided"))
            layers[direction][where] += 1
    return {"problems": len(report), "to_ours": sum(r["impl"] == "ours" for r in report),
            "to_pytorch": sum(r["impl"] == "pytorch" for r in report), "layers": layers,
            "layers_timed": len(training), "layers_native": native_layers, "layers_ours_cpp": ours_layers,
            "deciding_s": sum(r["decision_s"] for r in report) + sum(r["decision_s"] for r in layer_report),
            "decisions": report, "layer_decisions": layer_report}


def run_case(name: str, batch: int, args) -> dict:
    case = CASES[name]
    fmt = {"channels_last": torch.channels_last if case.ndim == 2 else torch.channels_last_3d,
           "contiguous": torch.contiguous_format}[args.memory_format]
    torch.manual_seed(0)
    cudnn = build(name).cuda().to(torch.bfloat16, memory_format=fmt)
    ours = swap_convs(copy.deepcopy(cudnn), **case.swap)
    x = torch.randn(batch, *case.sample, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=fmt)
    labels = torch.randint(0, 400 if case.ndim == 3 else 1000, (batch,), device="cuda")
    cudnn_forward, cudnn_train = _steps(cudnn, x, labels)
    ours_forward, ours_train = _steps(ours, x, labels)
    result = {"model": name, "batch": batch, "input": [batch, *case.sample], "mostly_grouped": case.mostly_grouped,
              "swapped_convs": len(swapped_convs(ours)),
              "convs": sum(isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d)) for m in cudnn.modules())}

    # First swapped step from cold caches: selection (+ JIT compiles without a registry) and decisions.
    runtime = get_runtime()
    runtime.clear()
    runtime.policy = "fastest"
    ours.train()
    torch.cuda.synchronize()
    start = time.perf_counter()
    ours_train()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    first = runtime.selector.stats.as_dict()
    start = time.perf_counter()
    ours_train()  # the second step times the layers with a direction on ours, both ways (fastest, cost total)
    torch.cuda.synchronize()
    layers_s = time.perf_counter() - start
    runtime.selector.stats.cached = runtime.selector.stats.cached_s = 0
    start = time.perf_counter()
    ours_train()
    torch.cuda.synchronize()
    second_s = time.perf_counter() - start
    cached = runtime.selector.stats.as_dict()
    result["selection"] = {
        "problems": first["uncached"], "first_step_s": first_s, "layer_step_s": layers_s, "second_step_s": second_s,
        "selection_first_call_s": first["uncached_s"], "selection_first_call_mean_ms": first["uncached_mean_ms"],
        "cached_lookups_per_step": cached["cached"], "cached_lookup_mean_us": cached["cached_mean_us"],
        "by_source": first["by_source"], "fallbacks": first["fallbacks"],
        "backends": sorted({e.backend for e in runtime.entries()}),
    }
    result["kernels"] = [{"problem": e.problem.key, "kernel": e.config.name, "source": e.choice.source,
                          "backend": e.backend, "impl": e.decision.impl if e.decision else None}
                         for e in runtime.entries()]
    ours.eval()
    result["dispatch"] = _dispatch_summary(ours, x)
    result["selection"]["deciding_s"] = result["dispatch"]["deciding_s"]

    forward = {"cudnn": cudnn_forward, **{p: _with_policy(p, ours_forward) for p in POLICIES}}
    train = {"cudnn": cudnn_train, **{p: _with_policy(p, ours_train) for p in POLICIES}}
    result["forward"] = _measure(forward, (cudnn, ours), False, args)
    result["train"] = _measure(train, (cudnn, ours), True, args)
    if args.profile:
        cudnn.train()
        ours.train()
        result["profile"] = {label: _profile(step, args.steps) for label, step in train.items()}
    for label, step in train.items():
        model = cudnn if label == "cudnn" else ours
        model.train()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        result["train"][label]["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if args.cuda_graph:  # last: nothing eager runs on these models once graphs write their .grad tensors
        try:
            result["graph"] = _graph_mode(cudnn, ours, x, labels, result, args)
        except Exception as error:  # noqa: BLE001 - the case keeps its eager figures
            result["graph"] = {"error": f"{type(error).__name__}: {error}"}
    return result


def _markdown(report: dict) -> str:
    """The report's tables: step times and speedups, selection, dispatch."""
    results = [r for r in report["results"] if "error" not in r]
    lines = (_header(report) + _times_table(report["results"]) + spread_table(results) + _selection_table(results)
             + _dispatch_table(results) + _profile_table(results))
    grouped = [r for r in results if r["mostly_grouped"]]
    if grouped:
        met = {p: sum(r["train"][_speedup_key(p)] > 1 for r in grouped) for p in POLICIES}
        paired = {p: sum((_paired(r, p) or 0) > 1 for r in grouped) for p in POLICIES}
        lines += ["", "Target (training step faster than cuDNN on every mostly-grouped/depthwise model and batch): "
                  + ", ".join(f"{p}: {met[p]} of {len(grouped)} met" for p in POLICIES)
                  + "; by the paired speedup (median of the rounds' ratios): "
                  + ", ".join(f"{p}: {paired[p]} of {len(grouped)} met" for p in POLICIES) + "."]
    if results:
        worst = min(min(r["forward"]["speedup_fastest"], r["train"]["speedup_fastest"]) for r in results)
        lines += ["", f"Lowest speedup under `fastest` (forward or training, any model and batch): {worst:.2f}."]
    lines += graph_table(results)
    return "\n".join(lines) + "\n"


def spread_table(results: list[dict]) -> list[str]:
    """The eager training rounds' spread: an eager step is host-bound, and the host's time drifts from
    round to round, so beside the medians this shows each run's fastest and slowest round and the
    speedups the rounds' minima give (the least disturbed round of each run), and in how many rounds
    (paired: the same round of the alternation) the swapped model was faster than cuDNN."""
    rows = [r for r in results if all(len(r["train"].get(k, {}).get("rounds_ms", ())) for k in ("cudnn", "ours",
                                                                                                  "fastest"))]
    if not rows:
        return []
    lines = ["", "### Spread of the eager training rounds", "",
             "Each run's fastest – slowest round (ms per step); speedup from the rounds' minima; paired speedup: "
             "the median over rounds of cuDNN's round over the swapped run's round of the same alternation (the "
             "host's drift between rounds cancels in each ratio); rounds (so paired) in which the swapped model "
             "was faster.", "",
             "| model | batch | cuDNN ms | ours ms | fastest ms | speedup ours (minima) | speedup fastest (minima) | "
             "paired speedup ours | paired speedup fastest | rounds ours faster | rounds fastest faster |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rounds = {k: r["train"][k]["rounds_ms"] for k in ("cudnn", "ours", "fastest")}
        cells = [f"{min(v):.2f} – {max(v):.2f}" for v in rounds.values()]
        cells += [f"{min(rounds['cudnn']) / min(rounds[k]):.2f}" for k in ("ours", "fastest")]
        cells += [_ms(_paired(r, k)) for k in ("ours", "fastest")]
        cells += [f"{sum(c > o for c, o in zip(rounds['cudnn'], rounds[k]))} of {len(rounds[k])}"
                  for k in ("ours", "fastest")]
        lines.append(f"| {r['model']} | {r['batch']} | " + " | ".join(cells) + " |")
    return lines


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _cell(text: str, limit: int = 160) -> str:
    """``text`` fit for one markdown table cell: one line, no pipes, at most ``limit`` characters."""
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def graph_table(results: list[dict]) -> list[str]:
    """The ``--cuda-graph`` section of the markdown (nothing when no result has graph figures)."""
    rows = [r for r in results if "graph" in r]
    if not rows:
        return []
    lines = ["", "## CUDA-graph replay (device-bound)", "",
             "Each run's training step (grads zeroed in the graph, forward, cross-entropy, backward) and forward "
             "step (eval, inference mode) captured once with `torch.cuda.graph` after eager warm-up steps on the "
             "capture stream (cuDNN's benchmark, our selection and `fastest` decisions, allocations: all before the "
             "capture), then replayed: CUDA events around back-to-back replays, median of the same alternating "
             "rounds as above. A replay runs no Python: these are device times, what a CUDA-graph training loop "
             "sees (the eager table includes the host's launch cost wherever the GPU waited on it). Each run "
             "replays its own graphs; `fastest` replays the decisions made in eager mode on device + host time "
             "per call; *fastest (device)*: the same decisions re-derived from device time alone (the runtime's "
             "`cost=\"device\"`, nothing timed again), the setting for CUDA-graph code. Speedup = cuDNN's replay "
             "time / the swapped model's (> 1: faster than cuDNN). Eager / graph: the eager step's time over the "
             "replay's (its host-bound share). Our calls captured: our kernel calls each training graph recorded "
             "(ours / fastest / fastest (device)). Device-only flips: `fastest` decisions that device time alone "
             "reverses (to ours / to cuDNN).", "",
             "| model | batch | fwd cuDNN ms | fwd ours ms | fwd fastest ms | fwd fastest (device) ms "
             "| fwd speedup ours | fwd speedup fastest | fwd speedup fastest (device) "
             "| train cuDNN ms | train ours ms | train fastest ms | train fastest (device) ms "
             "| train speedup ours | train speedup fastest | train speedup fastest (device) "
             "| train eager / graph (cuDNN, ours, fastest) | our calls captured | device-only flips | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = r["graph"]
        if "error" in g:
            lines.append(f"| {r['model']} | {r['batch']} |" + " |" * 17 + f" {_cell(g['error'])} |")
            continue
        cells = []
        for kind in ("forward", "train"):
            m = g.get(kind) or {}
            cells += [_ms(m[label]["median_ms"] if label in m else None) for label in GRAPH_RUNS]
            cells += [_ms(m.get(_speedup_key(label))) for label in GRAPH_SWAPPED]
        ratios = g.get("eager_over_graph", {}).get("train", {})
        cells.append(" / ".join(_ms(ratios.get(label)) for label in ("cudnn", *POLICIES)))
        calls = g.get("our_calls_captured", {})
        cells.append(" / ".join(str(calls[p]["train"]) if "train" in calls.get(p, {}) else "—"
                                for p in GRAPH_SWAPPED))
        flips = g.get("device_only_flips", {})
        cells.append(f"{flips.get('to_ours', 0)} / {flips.get('to_pytorch', 0)}")
        notes = [f"{where}: {error}" for where, error in g.get("errors", {}).items()]
        if g.get("undecided_problems"):
            notes.append(f"{g['undecided_problems']} problems undecided at capture")
        cells.append(_cell("; ".join(notes)))
        lines.append(f"| {r['model']} | {r['batch']} | " + " | ".join(cells) + " |")
    grouped = [r for r in rows if r["mostly_grouped"] and "error" not in r["graph"]]
    # Without cuDNN's own replay there is nothing to compare with (e.g. a model that copies a CPU tensor in
    # its forward cannot be captured at all): such cases are named, not counted as missed.
    comparable = [r for r in grouped if "cudnn" in (r["graph"].get("train") or {})]
    if grouped:
        met = {p: sum((r["graph"].get("train", {}).get(_speedup_key(p)) or 0) > 1 for r in comparable)
               for p in GRAPH_SWAPPED}
        line = ("Target under CUDA graphs (training replay faster than cuDNN's on every mostly-grouped/depthwise "
                "model and batch): " + ", ".join(f"{p}: {met[p]} of {len(comparable)} met" for p in GRAPH_SWAPPED)
                + ".")
        if len(comparable) < len(grouped):
            line += (" Not comparable (cuDNN's own training step could not be captured): "
                     + ", ".join(f"{r['model']} batch {r['batch']}" for r in grouped if r not in comparable) + ".")
        lines += ["", line]
    return lines


def graph_summary(graph: dict) -> str:
    """One line of a case's ``--cuda-graph`` figures (the console's)."""
    if "error" in graph:
        return graph["error"]
    parts = [f"{kind} replay speedup ours / fastest / fastest (device) "
             + " / ".join(_ms((graph.get(kind) or {}).get(_speedup_key(label))) for label in GRAPH_SWAPPED)
             for kind in ("forward", "train")]
    if graph.get("errors"):
        parts.append("capture failed: " + "; ".join(f"{k}: {_cell(v, 200)}" for k, v in graph["errors"].items()))
    return ", ".join(parts)


def _speedup_key(policy: str) -> str:
    return "speedup" if policy == "ours" else f"speedup_{policy}"


def _launch_path(status: dict | None) -> str:
    """How our eager calls were launched (``torch_native.status()``), in words."""
    if not status:
        return "Python (not recorded)"
    if status["built"]:
        refused = f", {len(status['refused'])} kinds of plan refused" if status["refused"] else ""
        return f"C++ (`torch_native`: {status['plans']} plans registered{refused})"
    return f"Python ({status['reason'] or 'C++ path not tried'})"


def _header(report: dict) -> list[str]:
    env, settings = report["environment"], report["settings"]
    return [
        f"# PyTorch end to end: swapped grouped convs vs cuDNN ({env['gpu']})", "",
        f"{env['date']}; torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, Triton {env['triton']}; "
        f"git {env['git_commit'][:10]}; bf16, {settings['memory_format']}; kernels: "
        f"{settings['kernels']}; selection: {settings['selection']}; fastest timer: {settings.get('timer', '?')}; "
        f"eager launch path: {_launch_path(settings.get('launch_path'))}.", "",
        "Step times: CUDA events around back-to-back steps (host launch overhead included), median of "
        f"{settings['rounds']} rounds of {settings['steps']} steps, cuDNN, ours and fastest alternating "
        "in the same process (`cudnn.benchmark=True`), one untimed step before each run's steps (after a "
        "policy switch it derives the dropped routes again). Training step = zero_grad + forward + cross-entropy + "
        "backward. Speedup = cuDNN time / the swapped model's (> 1: faster than cuDNN). *ours*: policy `ours` "
        "(every swapped conv on our kernels); *fastest*: policy `fastest` (each (direction, shape) on the faster "
        "of ours and cuDNN, timed on its first call; then each layer with a direction on ours timed whole both "
        "ways, as decided and as PyTorch's own convolution, and where the decisions split it all ours on the "
        "C++ path, the cheapest kept).", "",
        "| model | batch | swapped / convs | fwd cuDNN ms | fwd ours ms | fwd fastest ms | fwd speedup ours | "
        "fwd speedup fastest | train cuDNN ms | train ours ms | train fastest ms | train speedup ours | "
        "train speedup fastest | target (fastest) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]


def _times_table(results: list[dict]) -> list[str]:
    lines = []
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | | | | | | | | | | | | {r['error']} |")
            continue
        f, t = r["forward"], r["train"]
        target = ("met" if t["speedup_fastest"] > 1 else "missed") if r["mostly_grouped"] else "n/a (dense)"
        cells = [f"{m[k]['median_ms']:.2f}" for m in (f, t) for k in ("cudnn", "ours", "fastest")]
        speedups = [f"{m[k]:.2f}" for m in (f, t) for k in ("speedup", "speedup_fastest")]
        row = [*cells[:3], *speedups[:2], *cells[3:], *speedups[2:], target]
        lines.append(f"| {r['model']} | {r['batch']} | {r['swapped_convs']} / {r['convs']} | " + " | ".join(row) + " |")
    return lines


def _selection_table(results: list[dict]) -> list[str]:
    lines = ["", "## Selection", "",
             "First swapped training step from cold caches under `fastest` (every (direction, shape) selected "
             "once, kernels JIT-compiled there when no registry is loaded, ours timed against cuDNN); the second "
             "step, which times the layers with a direction on ours both ways; and the cached lookups of a third "
             "step. Deciding s: the time of every decision, per direction and per layer.", "",
             "| model | batch | problems | selection, first call (total ms) | mean ms / problem | source | "
             "deciding s | first step s | layer-timing step s | third step s | cached lookup µs |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r["selection"]
        sources = ", ".join(f"{k}: {v}" for k, v in sorted(s["by_source"].items()))
        lines.append(f"| {r['model']} | {r['batch']} | {s['problems']} | {1e3 * s['selection_first_call_s']:.1f} | "
                     f"{s['selection_first_call_mean_ms']:.2f} | {sources} | {s.get('deciding_s', 0.0):.2f} | "
                     f"{s['first_step_s']:.2f} | {_ms(s.get('layer_step_s'))} | {s['second_step_s']:.3f} | "
                     f"{s['cached_lookup_mean_us']:.2f} |")
    return lines


def _dispatch_table(results: list[dict]) -> list[str]:
    lines = ["", "## Dispatch under `fastest`", "",
             "Problems: distinct (direction, shape) decided, and where they went. Layers: the swapped conv calls "
             "of one training step, per direction, sent to ours / cuDNN. Layer shapes timed: layers with a "
             "direction on ours, timed whole (as decided; PyTorch's own convolution and autograd; and, where the "
             "decisions split the layer, every direction on ours through the C++ launch path); layers run by "
             "PyTorch's own: the swapped conv calls those timings sent to cuDNN in every direction (counted as "
             "cuDNN in the three columns before); layers all ours (C++): those sent to ours in every direction "
             "against a direction's own decision (counted as ours).", "",
             "| model | batch | problems | to ours | to cuDNN | fwd layers ours / cuDNN | bwd_data layers ours / "
             "cuDNN | bwd_weight layers ours / cuDNN | layer shapes timed | layers run by PyTorch's own | "
             "layers all ours (C++) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        d = r["dispatch"]
        layers = " | ".join(f"{d['layers'][k]['ours']} / {d['layers'][k]['pytorch']}"
                            + (f" ({d['layers'][k]['undecided']} undecided)" if d["layers"][k]["undecided"] else "")
                            for k in DIRECTIONS)
        lines.append(f"| {r['model']} | {r['batch']} | {d['problems']} | {d['to_ours']} | {d['to_pytorch']} | "
                     f"{layers} | {d.get('layers_timed', '—')} | {d.get('layers_native', '—')} | "
                     f"{d.get('layers_ours_cpp', '—')} |")
    return lines


def _profile_table(results: list[dict]) -> list[str]:
    profiled = [r for r in results if "profile" in r]
    if not profiled:
        return []
    kinds = sorted({k for r in profiled for p in r["profile"].values() for k in p["kinds_ms"]})
    lines = ["", "## Where a training step's time goes (`--profile`)", "",
             "CUPTI kernel records (torch.profiler) over the timed steps of each run; wall time per step includes "
             "the profiler's own overhead. Device busy: the union of kernel intervals (wall − busy: the GPU waits "
             "on the host). Host: the time to enqueue a step (before the final synchronize; close to wall: "
             "host-bound). Waiting calls: host CUDA calls per step that wait for the device or may "
             "(synchronizations, device memory allocation and release). GC: Python garbage-collector pauses.", "",
             "| model | batch | run | wall ms | host ms | device busy ms | waiting calls / step | GC ms / step "
             "| kernels / step | " + " | ".join(f"{k} ms" for k in kinds) + " |",
             "|---|---|---|---|---|---|---|---|---|" + "---|" * len(kinds)]
    for r in profiled:
        for label, p in r["profile"].items():
            kind_cells = " | ".join(f"{p['kinds_ms'].get(k, 0.0):.2f}" for k in kinds)
            host = p.get("host_ms")
            lines.append(f"| {r['model']} | {r['batch']} | {label} | {p['wall_ms']:.2f} | {_ms(host)} | "
                         f"{p['device_busy_ms']:.2f} | {_ms(p.get('waiting_calls_per_step'))} | "
                         f"{_ms(p.get('gc_ms_per_step'))} | {p['kernels_per_step']:.0f} | {kind_cells} |")
    for r in profiled:
        for label, p in r["profile"].items():
            lines += ["", f"Top kernels, {r['model']} batch {r['batch']}, {label}:", "",
                      "| kernel | kind | calls / step | ms / step |", "|---|---|---|---|"]
            lines += [f"| `{t['kernel'][:90]}` | {t['kind']} | {t['calls_per_step']:.0f} | {t['ms_per_step']:.3f} |"
                      for t in p["top"]]
            if p.get("host_calls"):
                lines += ["", f"Host CUDA calls, {r['model']} batch {r['batch']}, {label}:", "",
                          "| call | calls / step | µs / step | waits |", "|---|---|---|---|"]
                lines += [f"| `{c['call']}` | {c['calls_per_step']:.1f} | {c['us_per_step']:.0f} | "
                          f"{'yes' if c['waits'] else ''} |" for c in p["host_calls"]]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CASES), help=f"comma-separated, of {list(CASES)}")
    parser.add_argument("--batches", default="", help="comma-separated batch sizes for every model "
                        "(default: each model's own two)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--memory-format", choices=("channels_last", "contiguous"), default="channels_last")
    parser.add_argument("--target", default=None, help="selection service (default $TILEDISPATCH_TARGET; "
                        "none: local selection)")
    parser.add_argument("--registry-dir", default=None, help="compiled registry (default $TILEDISPATCH_REGISTRY_DIR; "
                        "none: JIT)")
    parser.add_argument("--out-dir", type=Path, default=None)
    parser.add_argument("--profile", action="store_true", help="also profile each run's training steps (CUPTI)")
    parser.add_argument("--cuda-graph", action="store_true", help="also capture each run's training and forward "
                        "steps with torch.cuda.graph and time their replays (device-bound; see the docstring)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_e2e: needs a CUDA GPU")
    torch.backends.cudnn.benchmark = True  # for both: the swapped models' dense convs stay on cuDNN
    runtime = torch_runtime.configure(target=args.target, registry_dir=args.registry_dir, policy="fastest")
    import triton

    date = dt.datetime.now(dt.UTC)
    out_dir = args.out_dir or REPO / "bench" / "results" / f"{date:%Y-%m-%d}_{_gpu_short()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    selector = runtime.selector
    report = {
        "environment": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
                        "cudnn": torch.backends.cudnn.version(), "triton": triton.__version__,
                        "python": platform.python_version(), "git_commit": git_commit(),
                        "date": date.isoformat(timespec="seconds")},
        "settings": {"steps": args.steps, "rounds": args.rounds, "warmup": args.warmup, "profile": args.profile,
                     "cuda_graph": args.cuda_graph,
                     "memory_format": args.memory_format, "policies": list(POLICIES), "timer": repr(runtime.timer),
                     "kernels": f"compiled registry {runtime.registry_dir}" if runtime._registry is not None else "JIT",
                     "selection": (f"remote {selector.target} (local fallback)" if selector.mode == "remote"
                                   else "local (shipped trained model, else analytic: sources per problem below)"),
                     "arch": selector.spec.name},
        "results": [],
    }
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        batches = [int(b) for b in args.batches.split(",")] if args.batches else list(CASES[name].batches)
        for batch in batches:
            print(f"{name} batch {batch} ...", flush=True)
            try:
                result = run_case(name, batch, args)
            except torch.cuda.OutOfMemoryError as error:
                result = {"model": name, "batch": batch, "error": f"out of memory: {str(error).splitlines()[0]}"}
            except Exception as error:  # one model failing must not lose the others' figures
                result = {"model": name, "batch": batch, "error": f"{type(error).__name__}: {error}"}
            torch.cuda.empty_cache()
            report["results"].append(result)
            if "error" in result:
                print(f"  {result['error']}", flush=True)
            else:
                f, t, d = result["forward"], result["train"], result["dispatch"]
                print(f"  speedup ours / fastest: forward {f['speedup']:.2f} / {f['speedup_fastest']:.2f}, "
                      f"training step {t['speedup']:.2f} / {t['speedup_fastest']:.2f}; problems to ours "
                      f"{d['to_ours']}, to cuDNN {d['to_pytorch']}", flush=True)
                if "graph" in result:
                    print(f"  CUDA graphs: {graph_summary(result['graph'])}", flush=True)
            report["settings"]["launch_path"] = torch_native.status()
            (out_dir / "torch_e2e.json").write_text(json.dumps(report, indent=1))
            (out_dir / "torch_e2e.md").write_text(_markdown(report))
    print(f"wrote {out_dir / 'torch_e2e.json'} and {out_dir / 'torch_e2e.md'}")


if __name__ == "__main__":
    main()
