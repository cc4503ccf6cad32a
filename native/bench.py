"""The tile engine: measure every applicable kernel of a registry and cuDNN, in one run, on one GPU.

For each problem (one direction, one dtype):

1. fresh random inputs (normal, never zeros) and a float64 reference computed on the GPU through
   PyTorch autograd (explicit ``F.pad`` for asymmetric padding);
2. for each kernel: poison the output with NaN, run once, compare ``‖out − ref‖ / ‖ref‖`` with the
   dtype's limit (``native.accuracy``); wrong or failing kernels are recorded, never timed;
3. time it two ways over input sets rotated so that the sets together exceed twice the L2 (small
   problems would otherwise time the cache): per-call CUDA events (median and min; includes host
   launch overhead whenever the GPU outruns the host) and CUDA-graph replay (device time only: a
   graph of many launches, replayed, divided by the launch count). Warm-up precedes both;
4. cuDNN through PyTorch (``cudnn.benchmark=True``, channels-last, same dtype; forward through
   ``F.conv{2,3}d``, backward through ``aten.convolution_backward``), timed the same two ways.

``--oracle-only`` takes a 3-call estimate first and skips the full timing of kernels already 1.5×
slower than the best so far (status ``pruned``) — on problems whose timed kernels spend at least half of each
call's event time on the device; where the launch outlasts the kernel every kernel is timed in full.

Crash isolation: the measuring runs in a spawned worker process; the parent hears "starting kernel
X" before each launch, so when the worker dies (a GPU fault poisons its CUDA context) or hangs past
the timeout, the parent records ``crash``/``timeout`` for X, restarts the worker and carries on with
the remaining kernels. Results go to parquet shards written atomically every few problems; a
re-run skips the problems already in the shards (resume). ``--complete DIR…`` measures, for the
problems measured in earlier folders, only the kernels added to the rule set since (no cuDNN), into a
folder of its own. ``manifest.json`` names the GPU, driver,
CUDA, Triton, torch and cuDNN versions, the measured ceilings, the rule set, date and git commit.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import time
import traceback
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from tiledispatch.native.accuracy import RELATIVE_ERROR_LIMIT
from tiledispatch.native.configs import KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem, Direction, DType

CUDNN = "cudnn"                        # cuDNN autotuned: cudnn.benchmark=True
CUDNN_HEURISTIC = "cudnn_heuristic"    # cuDNN's own heuristic pick: cudnn.benchmark=False
BASELINES = (CUDNN, CUDNN_HEURISTIC)
PRUNE_FACTOR = 1.5
# A problem prunes only while every timed kernel's device (graph) time is at least this share of its per-call event
# time: where the launch outlasts the kernel, the 3-call estimate measures the host, not the kernel.
PRUNE_MIN_DEVICE_SHARE = 0.5


@dataclass(frozen=True)
class BenchSettings:
    cache_dir: str
    arch: str = "sm_90"
    rule_set: str = "default"
    oracle_only: bool = False
    graph_launches: int = 20          # launches captured per graph (fewer for slow kernels)
    graph_replays: int = 5            # replays timed, median taken
    event_repeats: int = 30           # per-call event timings, median/min taken (fewer for slow kernels)
    warmup: int = 3
    budget_us: float = 20_000.0       # device time each timing method may spend on one kernel
    kernel_timeout_s: float = 120.0
    include_cudnn: bool = True
    max_kernels: int = 0              # 0: all applicable; >0: a seeded sample (training sweeps)
    seed: int = 0
    event_timing: bool = True         # False: graph replay only (event columns keep the 3-call estimate)
    families: tuple[str, ...] = ()    # measure only these kernel families (empty: every family)
    kernels: str = ""                 # measure only kernels whose name this regex searches (empty: every one)
    # Refresh sweeps: re-measure only the changed kernels whose earlier time was within this factor of the
    # problem's earlier best (0: every stale kernel, including those never measured there).
    refresh_within: float = 0.0


@dataclass(frozen=True)
class Ceilings:
    matmul_tflops: float
    copy_gbs: float
    fma_tflops: float

    def bound_us(self, problem: ConvProblem) -> float:
        """Tensor-core roofline: max(FLOPs / matmul rate, bytes / copy bandwidth)."""
        return max(problem.flops / (self.matmul_tflops * 1e6), problem.min_bytes / (self.copy_gbs * 1e3))

    def fma_bound_us(self, problem: ConvProblem) -> float:
        """CUDA-core bound for direct kernels: FLOPs at the measured fp32 FMA rate."""
        return max(problem.flops / (self.fma_tflops * 1e6), problem.min_bytes / (self.copy_gbs * 1e3))


# ---- GPU side -------------------------------------------------------------------------------
def measure_ceilings() -> Ceilings:
    """bf16 8192³ matmul rate, device-to-device copy bandwidth (read+write), fp32 FMA rate."""
    import torch

    from tiledispatch.native.kernels.fma_probe import fma_probe_tflops

    def matmul_ms() -> float:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        return _event_median_ms(lambda: torch.matmul(a, b), repeats=10)

    def copy_ms() -> float:
        src = torch.randn(1 << 30, device="cuda", dtype=torch.bfloat16)  # 2 GiB
        dst = torch.empty_like(src)
        return _event_median_ms(lambda: dst.copy_(src), repeats=10)

    matmul, copy = matmul_ms(), copy_ms()
    torch.cuda.empty_cache()
    return Ceilings(matmul_tflops=2 * 8192**3 / (matmul * 1e9), copy_gbs=2 * (1 << 30) * 2 / (copy * 1e6),
                    fma_tflops=fma_probe_tflops())


def _event_median_ms(fn, repeats: int) -> float:
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def torch_reference(problem: ConvProblem, first: Any, second: Any) -> Any:
    """Float64 result of the direction's runner contract, on the operands' device (grouped layouts)."""
    import torch

    conv = torch.nn.functional.conv2d if problem.ndim == 2 else torch.nn.functional.conv3d

    def to_torch_activation(t):  # N,*S,G,C -> N,(G·C),*S
        return t.reshape(*t.shape[:-2], -1).movedim(-1, 1)

    def to_torch_weight(t):  # G,K,*F,C -> (G·K),C,*F
        return t.reshape(-1, *t.shape[2:]).movedim(-1, 1)

    def from_torch_activation(t, shape):
        return t.movedim(1, -1).reshape(shape)

    def from_torch_weight(t, shape):
        return t.movedim(1, -1).reshape(shape)

    pads = []
    for pb, pe in zip(reversed(problem.pad_begin), reversed(problem.pad_end)):
        pads += [pb, pe]

    def forward(x, w):
        return conv(torch.nn.functional.pad(x, pads), w, stride=problem.stride, dilation=problem.dilation,
                    groups=problem.groups)

    a = first.double()
    b = second.double()
    if problem.direction is Direction.FORWARD:
        return from_torch_activation(forward(to_torch_activation(a), to_torch_weight(b)), problem.output_shape)
    if problem.direction is Direction.BACKWARD_DATA:
        x = torch.zeros(problem.input_shape, dtype=torch.float64, device=a.device)
        x = to_torch_activation(x).requires_grad_(True)
        y = forward(x, to_torch_weight(b))
        (grad,) = torch.autograd.grad(y, x, to_torch_activation(a))
        return from_torch_activation(grad, problem.input_shape)
    w = to_torch_weight(torch.zeros(problem.weight_shape, dtype=torch.float64, device=a.device)).requires_grad_(True)
    y = forward(to_torch_activation(a), w)
    (grad,) = torch.autograd.grad(y, w, to_torch_activation(b))
    return from_torch_weight(grad, problem.weight_shape)


class ProblemSetup:
    """Operands (several rotated sets), output buffer and float64 reference for one problem."""

    def __init__(self, problem: ConvProblem, l2_bytes: int, seed: int):
        import torch

        from tiledispatch.native.launch import torch_dtype

        self.problem = problem
        dtype = torch_dtype(problem.dtype)
        generator = torch.Generator(device="cuda").manual_seed(seed)
        shapes = problem.operand_shapes
        set_bytes = problem.min_bytes
        self.sets = max(1, min(16, math.ceil(2 * l2_bytes / max(set_bytes, 1))))
        self.first = [torch.randn(shapes[0], device="cuda", dtype=dtype, generator=generator) for _ in range(self.sets)]
        self.second = [torch.randn(shapes[1], device="cuda", dtype=dtype, generator=generator)
                       for _ in range(self.sets)]
        self.out = [torch.empty(shapes[2], device="cuda", dtype=dtype) for _ in range(self.sets)]
        self.reference = torch_reference(problem, self.first[0], self.second[0])
        self.reference_norm = float(torch.linalg.vector_norm(self.reference))

    def relative_error(self, out: Any) -> float:
        import torch

        result = out.double()
        if not bool(torch.isfinite(result).all()):
            return float("inf")
        return float(torch.linalg.vector_norm(result - self.reference)) / max(self.reference_norm, 1e-300)


def _quick_us(call, sets: int) -> float:
    """Median of 3 event-timed calls after one warm-up: sizes (and prunes) the full timing."""
    import torch

    call(0)
    torch.cuda.synchronize()
    times = []
    for i in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call(i % sets)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[1]


def _graph_replay_us(call, sets: int, launches: int, replays: int) -> float:
    """Device µs per call: ``launches`` calls captured in one CUDA graph (after a warm call on the capture
    stream), replayed once untimed, then the median of ``replays`` timed replays."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        call(0)  # warm on the capture stream
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(launches):
                call(i % sets)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / launches)
    del graph
    return sorted(times)[len(times) // 2]


def _graph_quick_us(call, sets: int) -> float:
    """One replay of two calls: what a pruning decision confirms before it drops a kernel (the 3-call event
    estimate also counts the host's launch; session 28's H200 dev run pruned a 26.5 µs depthwise kernel whose
    events read 69.6 µs)."""
    return _graph_replay_us(call, sets, launches=2, replays=1)


def _time_callable(call, sets: int, settings: BenchSettings, estimate_us: float) -> tuple[float, float, float]:
    """(event median µs, event min µs, graph µs per launch); ``call(i)`` launches on input set i.

    Repeats shrink for slow kernels so each method spends about ``settings.budget_us`` (never
    fewer than 5 event timings, 2 graph launches and 3 replays)."""
    import torch

    def clamp(value: float, low: int, high: int) -> int:
        return max(low, min(high, int(value)))

    repeats = clamp(settings.budget_us / max(estimate_us, 1e-3), 5, settings.event_repeats)
    launches = clamp(settings.budget_us / max(estimate_us, 1e-3) / settings.graph_replays, 2,
                     settings.graph_launches)
    for i in range(settings.warmup):
        call(i % sets)
    torch.cuda.synchronize()
    if settings.event_timing:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for i in range(repeats):
            starts[i].record()
            call(i % sets)
            ends[i].record()
        torch.cuda.synchronize()
        times = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
        event_median, event_min = times[len(times) // 2], times[0]
    else:  # training sweeps: the graph time is the label; keep the sizing estimate
        event_median = event_min = estimate_us
    return event_median, event_min, _graph_replay_us(call, sets, launches, settings.graph_replays)


def _cudnn_call(problem: ConvProblem, setup: ProblemSetup):
    import torch

    nd = problem.ndim
    memory_format = torch.channels_last if nd == 2 else torch.channels_last_3d
    symmetric = problem.pad_begin == problem.pad_end
    pads = []
    for pb, pe in zip(reversed(problem.pad_begin), reversed(problem.pad_end)):
        pads += [pb, pe]
    padding = list(problem.pad_begin) if symmetric else [0] * nd

    def activation(t):  # grouped NHWGC -> PyTorch NCHW view, channels-last memory (no copy)
        return t.view(*t.shape[:-2], -1).movedim(-1, 1)

    def weight(t):
        return t.view(-1, *t.shape[2:]).movedim(-1, 1)

    first = [activation(t) for t in setup.first]
    if problem.direction is Direction.BACKWARD_WEIGHT:
        second = [activation(t) for t in setup.second]
    else:
        second = [weight(t) for t in setup.second]
    for t in first + second:
        assert t.is_contiguous(memory_format=memory_format)
    conv = torch.nn.functional.conv2d if nd == 2 else torch.nn.functional.conv3d
    common = dict(stride=list(problem.stride), padding=padding, dilation=list(problem.dilation),
                  output_padding=[0] * nd, groups=problem.groups)
    if problem.direction is Direction.FORWARD:
        def call(i):
            x = first[i] if symmetric else torch.nn.functional.pad(first[i], pads)
            return conv(x, second[i], stride=problem.stride, padding=padding, dilation=problem.dilation,
                        groups=problem.groups)
    elif problem.direction is Direction.BACKWARD_DATA:
        padded_in = [s + pb + pe for s, pb, pe in zip(problem.input_size, problem.pad_begin, problem.pad_end)]
        in_shape = (problem.batch, problem.in_channels, *(problem.input_size if symmetric else padded_in))
        x_like = torch.empty(in_shape, device="cuda", dtype=first[0].dtype).to(memory_format=memory_format)

        def call(i):
            grad = torch.ops.aten.convolution_backward(
                first[i], x_like, second[i], None, common["stride"], common["padding"], common["dilation"],
                False, common["output_padding"], common["groups"], [True, False, False])[0]
            if not symmetric:
                grad = grad[(slice(None), slice(None), *(slice(pb, pb + s) for pb, s in
                                                           zip(problem.pad_begin, problem.input_size)))]
            return grad
    else:
        w_like = torch.empty(problem.out_channels, problem.c_per_group, *problem.filter_size, device="cuda",
                             dtype=first[0].dtype).to(memory_format=memory_format)

        def call(i):
            x = first[i] if symmetric else torch.nn.functional.pad(first[i], pads)
            return torch.ops.aten.convolution_backward(
                second[i], x, w_like, None, common["stride"], common["padding"], common["dilation"], False,
                common["output_padding"], common["groups"], [False, True, False])[1]
    return call


def _grouped_result(problem: ConvProblem, torch_result: Any) -> Any:
    """cuDNN's result in the grouped layout, to check it like our kernels."""
    if problem.direction is Direction.BACKWARD_WEIGHT:
        return torch_result.movedim(1, -1).reshape(problem.weight_shape)
    return torch_result.movedim(1, -1).reshape(problem.operand_shapes[2])


def _row(problem: ConvProblem, ceilings: Ceilings, kernel: str, status: str, *, error: float = float("nan"),
         event_median: float = float("nan"), event_min: float = float("nan"), graph: float = float("nan"),
         message: str = "") -> dict:
    config = parse_kernel_name(kernel) if kernel.startswith("gconv_") else None
    best = graph if graph == graph else event_median
    bound = ceilings.bound_us(problem)
    row = {
        **_problem_columns(problem),
        "kernel": kernel, "family": config.family.value if config else CUDNN, "status": status,
        "relative_error": error, "event_median_us": event_median, "event_min_us": event_min, "graph_us": graph,
        "tflops": problem.flops / (best * 1e6) if best == best and best > 0 else float("nan"),
        "gbs": problem.min_bytes / (best * 1e3) if best == best and best > 0 else float("nan"),
        "bound_us": bound, "fma_bound_us": ceilings.fma_bound_us(problem),
        "fraction_of_roofline": bound / best if best == best and best > 0 else float("nan"),
        "message": message[:500],
        "kernel_build": "",  # measure_iter: the registry's build id of the binaries timed (registry.build_id)
    }
    for name in ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m", "split_k", "merge", "vec"):
        row[name] = getattr(config, name) if config else -1
    row["index64"] = bool(config.index64) if config else False
    return row


def _problem_columns(problem: ConvProblem) -> dict:
    def dims(values):
        return "x".join(map(str, values))

    return {
        "problem_key": problem.key, "shape_key": problem.shape_key, "direction": problem.direction.value,
        "dtype": problem.dtype.value, "ndim": problem.ndim, "problem_class": problem.class_label,
        "batch": problem.batch, "groups": problem.groups, "in_channels": problem.in_channels,
        "out_channels": problem.out_channels, "input_size": dims(problem.input_size),
        "filter_size": dims(problem.filter_size), "stride": dims(problem.stride),
        "dilation": dims(problem.dilation), "pad_begin": dims(problem.pad_begin), "pad_end": dims(problem.pad_end),
        "flops": problem.flops, "min_bytes": problem.min_bytes,
    }


def new_setup(problem: ConvProblem, settings: BenchSettings) -> ProblemSetup:
    """Fresh random operands (seeded by the run seed, the problem and the clock) and the reference."""
    import torch

    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    return ProblemSetup(problem, l2_bytes, seed=settings.seed ^ zlib.crc32(problem.key.encode()) ^ time.time_ns())


def measure_kernel(setup: ProblemSetup, config: KernelConfig, loader: Any, ceilings: Ceilings,
                   settings: BenchSettings, best_us: float = float("inf"),
                   best_device_us: float = float("inf")) -> dict:
    """Check one kernel against the reference, then time it, unless ``settings.oracle_only`` and its
    3-call event estimate exceeds ``PRUNE_FACTOR × best_us`` *and* one graph replay of it exceeds
    ``PRUNE_FACTOR × best_device_us``. ``best_us`` must be an event-timed figure too (the best per-call
    event time so far): both then include the host's launch cost, whereas a graph-replay best would prune
    every kernel of a small problem whose launch costs more than its device time. The device check keeps
    a kernel whose own launch is slow but whose device time is not (``best_device_us``: the best graph
    time so far)."""
    import torch

    from tiledispatch.native import launch

    problem = setup.problem
    limit = RELATIVE_ERROR_LIMIT[problem.dtype]
    try:
        def call(i):
            launch.run(problem, config, setup.first[i], setup.second[i], setup.out[i], loader=loader,
                       check_support=False)

        setup.out[0].fill_(float("nan"))
        call(0)
        torch.cuda.synchronize()
        error = setup.relative_error(setup.out[0])
        if not error <= limit:
            return _row(problem, ceilings, config.name, "wrong", error=error,
                        message=f"relative error {error:.3g} > {limit:g}")
        quick = _quick_us(call, setup.sets)
        if settings.oracle_only and quick > PRUNE_FACTOR * best_us:
            device = _graph_quick_us(call, setup.sets)
            if device > PRUNE_FACTOR * best_device_us:
                return _row(problem, ceilings, config.name, "pruned", error=error, event_median=quick,
                            message=f"device estimate {device:.1f} us")
        event_median, event_min, graph = _time_callable(call, setup.sets, settings, quick)
        return _row(problem, ceilings, config.name, "ok", error=error, event_median=event_median,
                    event_min=event_min, graph=graph)
    except Exception as exc:  # a failing kernel is recorded, the sweep goes on
        return _row(problem, ceilings, config.name, "error", message=f"{type(exc).__name__}: {exc}")


def measure_cudnn(setup: ProblemSetup, ceilings: Ceilings, settings: BenchSettings, *, autotune: bool = True) -> dict:
    """cuDNN through PyTorch: autotuned (``cudnn.benchmark=True``, row ``cudnn``) or its own
    heuristic pick (``benchmark=False``, row ``cudnn_heuristic``), timed like our kernels."""
    import torch

    problem = setup.problem
    name = CUDNN if autotune else CUDNN_HEURISTIC
    try:
        torch.backends.cudnn.benchmark = autotune
        call = _cudnn_call(problem, setup)
        result = call(0)
        torch.cuda.synchronize()
        error = setup.relative_error(_grouped_result(problem, result))
        event_median, event_min, graph = _time_callable(call, setup.sets, settings, _quick_us(call, setup.sets))
        status = "ok" if error <= RELATIVE_ERROR_LIMIT[problem.dtype] else "wrong"
        return _row(problem, ceilings, name, status, error=error, event_median=event_median,
                    event_min=event_min, graph=graph)
    except Exception as exc:
        return _row(problem, ceilings, name, "error", message=f"{type(exc).__name__}: {exc}")
    finally:
        torch.backends.cudnn.benchmark = True


def device_dominated(graph_us: float, event_us: float, share: float = PRUNE_MIN_DEVICE_SHARE) -> bool:
    """Whether a timed kernel's device (graph) time is at least ``share`` of its per-call event time: then event
    times of that problem measure the kernels, not the host's launch (the pruning bar and its estimates, and
    ``models.dataset.problem_rows``'s use of them)."""
    return graph_us >= share * event_us


def prune_reference_us(row: dict) -> float:
    """What an ``ok`` row contributes to the pruning bar: its per-call event time (like the 3-call
    estimate it is compared with), never its graph-replay device time; ``inf`` (no pruning) where its
    device time is below ``PRUNE_MIN_DEVICE_SHARE`` of that event time: the launch dominates each call, so an
    estimate 1.5× the bar says how slowly the host launched, not how slowly the kernel ran (session 26: pruned
    estimates of 57–121 µs beside kernels of 2–4 µs on the device)."""
    event = row["event_median_us"]
    return event if device_dominated(row["graph_us"], event) else float("inf")


def measure_iter(problem: ConvProblem, configs: list[KernelConfig], registry: Any, ceilings: Ceilings,
                 settings: BenchSettings, notify=lambda name: None) -> Iterator[dict]:
    """One row per kernel (then cuDNN) for one problem; ``notify(name)`` before each launch."""
    import torch

    setup = new_setup(problem, settings)
    loader = registry.loader()
    best = best_device = float("inf")
    launch_bound = False  # once a timed kernel shows the launch outlasting it, nothing of the problem is pruned
    for config in configs:
        notify(config.name)
        row = measure_kernel(setup, config, loader, ceilings, settings, float("inf") if launch_bound else best,
                             best_device_us=best_device)
        row["kernel_build"] = registry.builds.get(config.name, "")
        if row["status"] == "ok":
            reference = prune_reference_us(row)
            launch_bound |= reference == float("inf")
            best = min(best, reference)
            best_device = min(best_device, row["graph_us"])
        yield row
    if settings.include_cudnn:
        notify(CUDNN)
        yield measure_cudnn(setup, ceilings, settings)
        notify(CUDNN_HEURISTIC)
        yield _in_fresh_thread(lambda: measure_cudnn(setup, ceilings, settings, autotune=False))
    torch.cuda.empty_cache()


def _in_fresh_thread(fn):
    """Run ``fn`` on a new thread: PyTorch's cuDNN plan cache is per thread and its key ignores
    ``cudnn.benchmark``, so on the sweep's own thread the heuristic call would reuse the autotuned plan."""
    import threading

    result: list = []
    thread = threading.Thread(target=lambda: result.append(fn()))
    thread.start()
    thread.join()
    return result[0]


def _selected(config: Any, settings: BenchSettings) -> bool:
    """Whether ``config`` is in the sweep's selection: its family (``settings.families``) and its name
    (``settings.kernels``, a regex searched in the name, e.g. ``_sk(?!1_)`` for the split-K kernels)."""
    if settings.families and config.family.value not in settings.families:
        return False
    return not settings.kernels or re.search(settings.kernels, config.name) is not None


def select_configs(problem: ConvProblem, registry: Any, settings: BenchSettings, exclude: Iterable[str] = ()) -> list:
    """The registry's kernels of ``settings.rule_set`` that support ``problem`` (a seeded sample of
    ``max_kernels`` when set). A registry folder may hold more than the rule set (e.g. kernels that
    GPU tests compiled into a shared cache); those are never measured under the rule set's name."""
    import random

    from tiledispatch.native.rules import rule_set_names
    from tiledispatch.native.support import is_supported

    excluded = set(exclude)
    in_rule_set = rule_set_names(settings.rule_set, settings.arch)
    configs = [c for c in registry.configs
               if c.name in in_rule_set and c.name not in excluded and _selected(c, settings)
               and is_supported(problem, c)]
    if settings.max_kernels and len(configs) > settings.max_kernels:
        rng = random.Random(f"{settings.seed}|{problem.key}")
        configs = sorted(rng.sample(configs, settings.max_kernels), key=lambda c: c.name)
    return configs


# ---- worker process ------------------------------------------------------------------------
def _worker_main(connection, settings_dict: dict, ceilings_dict: dict) -> None:
    """Measure problems sent by the parent; report each kernel before launching it."""
    from tiledispatch.native.registry import Registry

    settings = BenchSettings(**settings_dict)
    ceilings = Ceilings(**ceilings_dict)
    registry = Registry.load(settings.cache_dir, settings.arch)
    while True:
        message = connection.recv()
        if message is None:
            return
        problem_dict, exclude = message
        problem = ConvProblem.from_dict(problem_dict)
        try:
            configs = select_configs(problem, registry, settings, exclude)
            for row in measure_iter(problem, configs, registry, ceilings, settings,
                                    lambda name: connection.send(("start", name))):
                connection.send(("row", row))
        except Exception:
            connection.send(("fatal", traceback.format_exc()))
        connection.send(("done", problem.key))


class _Worker:
    def __init__(self, settings: BenchSettings, ceilings: Ceilings):
        context = get_context("spawn")
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, asdict(settings), asdict(ceilings)),
                                       daemon=True)
        self.process.start()
        child.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.send(None)
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()


def sweep_problem(problem: ConvProblem, settings: BenchSettings, ceilings: Ceilings, worker: list,
                  log=print, skip: Iterable[str] = ()) -> list[dict]:
    """Measure one problem through the worker, surviving crashes and hangs of single kernels;
    kernels named in ``skip`` are not measured (a completion sweep's already measured ones)."""
    rows: list[dict] = []
    exclude: list[str] = sorted(skip)
    while True:
        if not worker or not worker[0].process.is_alive():
            worker[:] = [_Worker(settings, ceilings)]
        current = worker[0]
        current.connection.send((problem.to_dict(), exclude))
        in_flight = None
        while True:
            if not current.connection.poll(settings.kernel_timeout_s):
                status = "timeout"
                break
            try:
                kind, payload = current.connection.recv()
            except (EOFError, OSError):
                status = "crash"
                break
            if kind == "start":
                in_flight = payload
            elif kind == "row":
                rows.append(payload)
                in_flight = None
            elif kind == "fatal":
                log(f"  worker error on {problem.key}: {payload.strip().splitlines()[-1]}")
            elif kind == "done":
                return rows
        current.process.kill()
        current.process.join(timeout=10)
        worker.clear()
        if in_flight is None:  # died outside any kernel: give up on this problem
            log(f"  worker {status} outside a kernel on {problem.key}")
            return rows
        log(f"  {status}: {in_flight} on {problem.key}; worker restarted, kernel skipped")
        rows.append(_row(problem, ceilings, in_flight, status, message=f"worker {status} while running {in_flight}"))
        exclude.append(in_flight)
        done = {r["kernel"] for r in rows}
        exclude = sorted(set(exclude) | done)


# ---- sweep, shards and manifest ------------------------------------------------------------
def environment_manifest(settings: BenchSettings, ceilings: Ceilings) -> dict:
    import torch
    import triton

    import tiledispatch

    properties = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
        driver = driver.splitlines()[0] if driver else "unknown"  # one line per GPU, the same driver
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    return {
        "gpu_name": properties.name, "gpu_sms": properties.multi_processor_count,
        "gpu_l2_bytes": properties.L2_cache_size, "driver": driver, "cuda": torch.version.cuda,
        "torch": torch.__version__, "triton": triton.__version__, "cudnn": torch.backends.cudnn.version(),
        "tiledispatch": tiledispatch.__version__, "git_commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rule_set": settings.rule_set,
        "arch": settings.arch, "ceilings": asdict(ceilings),
        "timing": {"graph_us": f"CUDA-graph replay of up to {settings.graph_launches} launches (about "
                               f"{settings.budget_us / 1000:g} ms of device time), median of "
                               f"{settings.graph_replays} replays, per launch (device time)",
                   "event_median_us": f"per-call CUDA events, median of up to {settings.event_repeats} (at least 5) "
                                      "(includes host launch overhead when the GPU outruns the host)",
                   "inputs": "rotated sets totalling >= 2x L2 (max 16 sets)"},
        "settings": asdict(settings),
    }


def git_commit() -> str:
    """``$TILEDISPATCH_GIT_COMMIT`` when set (a copied tree may carry a stale .git), else HEAD."""
    if os.environ.get("TILEDISPATCH_GIT_COMMIT"):
        return os.environ["TILEDISPATCH_GIT_COMMIT"]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    if not re.fullmatch(r"[0-9a-f]{40}", commit):  # e.g. a copied tree whose .git has no objects
        commit = ""
    return commit or "unknown"


def done_problem_keys(out_dir: Path) -> set[str]:
    return set(measured_kernels([out_dir]))


def measured_kernels(data_dirs: Iterable[Path | str]) -> dict[str, set[str]]:
    """Problem key -> names of the kernels (and baselines) with a row of any status in the folders."""
    return {key: set(by_kernel) for key, by_kernel in measured_builds(data_dirs).items()}


def measured_builds(data_dirs: Iterable[Path | str]) -> dict[str, dict[str, set[str]]]:
    """Problem key -> kernel -> the build ids its rows timed in the folders (the rows' ``kernel_build``,
    else the folder's ``kernel_builds.json``; '' where neither says)."""
    import pyarrow.parquet as pq

    from tiledispatch.native.build_ids import folder_builds

    out: dict[str, dict[str, set[str]]] = {}
    for directory in data_dirs:
        derived = folder_builds(Path(directory))
        for shard in sorted(Path(directory).glob("rows-*.parquet")):
            wanted = [c for c in ("problem_key", "kernel", "kernel_build") if c in pq.read_schema(shard).names]
            table = pq.read_table(shard, columns=wanted)
            keys, kernels = table.column("problem_key").to_pylist(), table.column("kernel").to_pylist()
            own = (table.column("kernel_build").to_pylist() if "kernel_build" in table.column_names
                   else [""] * len(kernels))
            for key, kernel, build in zip(keys, kernels, own):
                out.setdefault(key, {}).setdefault(kernel, set()).add(build or derived.get(kernel, ""))
    return out


def earlier_times(data_dirs: Iterable[Path | str]) -> dict[str, dict[str, float]]:
    """Problem key -> kernel -> its best ``ok`` graph time (µs) in the folders (kernels with no ``ok`` row: inf)."""
    import pyarrow.parquet as pq

    out: dict[str, dict[str, float]] = {}
    for directory in data_dirs:
        for shard in sorted(Path(directory).glob("rows-*.parquet")):
            table = pq.read_table(shard, columns=["problem_key", "kernel", "status", "graph_us"]).to_pydict()
            for key, kernel, status, graph_us in zip(table["problem_key"], table["kernel"], table["status"],
                                                     table["graph_us"]):
                time_us = graph_us if status == "ok" and graph_us is not None and graph_us > 0 else math.inf
                by_kernel = out.setdefault(key, {})
                by_kernel[kernel] = min(by_kernel.get(kernel, math.inf), time_us)
    return out


def competitive(stale: dict[str, list[str]], times: dict[str, dict[str, float]], within: float
                ) -> dict[str, list[str]]:
    """Of ``stale``, the kernels timed before (``times``) at most ``within`` × the problem's earlier best among
    its kernels (cuDNN not counted). Kernels with no earlier row are left out: a training sweep samples the
    kernels it times, so those are mostly ones it never drew, not new ones (``--complete`` with ``--kernels``
    adds new configs). Problems left with none drop out."""
    out: dict[str, list[str]] = {}
    for key, names in stale.items():
        earlier = {k: t for k, t in times.get(key, {}).items() if k not in BASELINES}
        best = min(earlier.values(), default=math.inf)
        kept = [k for k in names if earlier.get(k, math.inf) < math.inf and earlier[k] <= within * best]
        if kept:
            out[key] = kept
    return out


def stale_kernels(problems: list[ConvProblem], settings: BenchSettings, measured: dict[str, dict[str, set[str]]],
                  current: dict[str, str]) -> dict[str, list[str]]:
    """For a refresh sweep: problem key -> the rule set's applicable kernels (of ``settings.families``
    and ``settings.kernels``) without a row of the build in use (``current``: the registry's build ids),
    for the problems measured in ``measured``: kernels whose code changed since, and kernels added since."""
    from tiledispatch.native.rules import rule_set_configs
    from tiledispatch.native.support import is_supported

    configs = [c for c in rule_set_configs(settings.rule_set, settings.arch) if _selected(c, settings)]
    out: dict[str, list[str]] = {}
    for problem in problems:
        rows = measured.get(problem.key)
        if rows is None:
            continue
        stale = [c.name for c in configs if not (current.get(c.name) and current[c.name] in rows.get(c.name, ()))
                 and is_supported(problem, c)]
        if stale:
            out[problem.key] = stale
    return out


def missing_kernels(problems: list[ConvProblem], settings: BenchSettings, measured: dict[str, set[str]]
                    ) -> dict[str, list[str]]:
    """For a completion sweep: problem key -> the rule set's applicable kernels without a row in
    ``measured``, for the problems measured there (others are not this sweep's business)."""
    from tiledispatch.native.rules import rule_set_configs
    from tiledispatch.native.support import is_supported

    configs = rule_set_configs(settings.rule_set, settings.arch)
    out: dict[str, list[str]] = {}
    for problem in problems:
        if problem.key in measured:
            missing = [c.name for c in configs if c.name not in measured[problem.key] and _selected(c, settings)
                       and is_supported(problem, c)]
            if missing:
                out[problem.key] = missing
    return out


def write_shard(out_dir: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    index = len(list(out_dir.glob("rows-*.parquet")))
    path = out_dir / f"rows-{index:05d}.parquet"
    temporary = out_dir / f".{path.name}.tmp"
    pq.write_table(pa.Table.from_pylist(rows), temporary, compression="zstd")
    os.replace(temporary, path)
    return path


def run_sweep(problems: list[ConvProblem], settings: BenchSettings, out_dir: Path | str, *, shard_every: int = 8,
              complete: Iterable[Path | str] = (), refresh: Iterable[Path | str] = (), log=print) -> Path:
    """Measure ``problems`` into ``out_dir`` (resumable). Returns the manifest path.

    ``complete`` (folders of earlier sweeps) makes this a completion sweep: only problems measured
    there are taken, and of each only the rule set's applicable kernels that have no row there or in
    ``out_dir`` (kernels added to the rule set since), without cuDNN. ``out_dir`` must be a folder
    of its own (its manifest names the completed folders), so the rows stay apart from the sweep
    they complete and ``models.dataset.read_rows`` can check that no kernel is measured twice.

    ``refresh`` (folders of earlier sweeps) is the same for the kernels with no row *of the build in use*
    (the registry's build ids, ``native.build_ids``): kernels whose code changed since they were measured,
    and new ones. Its manifest names the refreshed folders; ``read_rows`` lets its rows replace theirs."""
    from tiledispatch.native.registry import write_json_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    completes = [str(Path(d)) for d in complete]
    refreshes = [str(Path(d)) for d in refresh]
    if completes and refreshes:
        raise ValueError("refresh: a sweep completes or refreshes earlier folders, not both")
    kind, earlier = ("refreshes", refreshes) if refreshes else ("completes", completes)
    manifest_file = out / "manifest.json"
    if manifest_file.exists():
        manifest = json.loads(manifest_file.read_text())
        if sorted(manifest.get(kind, [])) != sorted(earlier):
            raise ValueError(f"{out}: its manifest {kind} {manifest.get(kind, [])}, this sweep {earlier}; "
                             "a completion or refresh sweep writes to a folder of its own (use a new --out)")
    if earlier:
        if settings.include_cudnn or settings.max_kernels:
            raise ValueError(f"{kind}: a completion or refresh sweep measures every missing kernel and no cuDNN "
                             "(needs include_cudnn=False and max_kernels=0)")
        if refreshes:
            from tiledispatch.native.registry import Registry

            builds = measured_builds([*refreshes, out])
            current = Registry.load(settings.cache_dir, settings.arch).builds
            missing = stale_kernels(problems, settings, builds, current)
            # measure the stale ones even though a row of theirs exists: skip only what is current, and with
            # refresh_within also the stale kernels far behind and those never measured there
            skip = {key: set(by_kernel) for key, by_kernel in builds.items()}
            if settings.refresh_within:
                from tiledispatch.native.rules import rule_set_names

                missing = competitive(missing, earlier_times(refreshes), settings.refresh_within)
                every = rule_set_names(settings.rule_set, settings.arch)
                skip = {key: skip[key] | every for key in missing}
            skip = {key: skip[key] - set(missing[key]) for key in missing}
        else:
            measured = measured_kernels([*completes, out])
            missing = missing_kernels(problems, settings, measured)
            skip = {key: measured[key] for key in missing}
        todo = [p for p in problems if p.key in skip]
        log(f"bench: {'refreshing' if refreshes else 'completing'} {len(todo)} of {len(problems)} problems "
            f"({sum(len(v) for v in missing.values())} kernels)")
    else:
        done = done_problem_keys(out)
        skip = {}
        todo = [p for p in problems if p.key not in done]
        log(f"bench: {len(problems)} problems, {len(problems) - len(todo)} already measured, {len(todo)} to go")
    if not todo:  # nothing to measure: no sitting, no ceilings measured for an empty folder
        return manifest_file
    if manifest_file.exists():
        ceilings = Ceilings(**manifest["ceilings"])
    else:
        ceilings = measure_ceilings()
        manifest = environment_manifest(settings, ceilings)
        if earlier:
            manifest[kind] = earlier
        manifest["sittings"] = []
        write_json_atomic(manifest_file, manifest)  # a killed sitting still leaves its context
        log(f"bench: ceilings {ceilings}")
    sitting = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "problems": len(todo),
               "git_commit": git_commit()}
    worker: list = []
    pending: list[dict] = []
    started = time.time()
    try:
        for index, problem in enumerate(todo, 1):
            rows = sweep_problem(problem, settings, ceilings, worker, log=log, skip=skip.get(problem.key, ()))
            pending.extend(rows)
            ok = [r for r in rows if r["status"] == "ok" and r["kernel"] not in BASELINES]
            best = min(ok, key=lambda r: r["graph_us"], default=None)
            cudnn = next((r for r in rows if r["kernel"] == CUDNN), None)
            elapsed = time.time() - started
            summary = f"best {best['graph_us']:.1f}us ({best['kernel']})" if best else "no ok kernel"
            log(f"[{index}/{len(todo)}] {problem.key}: {len(rows)} rows, {summary}; "
                f"elapsed {elapsed:.0f}s, eta {elapsed / index * (len(todo) - index):.0f}s")
            if cudnn:
                log(f"    cudnn {cudnn['graph_us']:.1f}us status={cudnn['status']}")
            if index % shard_every == 0:
                write_shard(out, pending)
                pending = []
    finally:
        if pending:
            write_shard(out, pending)
        for w in worker:
            w.stop()
        sitting["seconds"] = round(time.time() - started, 1)
        manifest["sittings"].append(sitting)
        write_json_atomic(manifest_file, manifest)
    return manifest_file


def load_problems(path: Path | str, directions: Iterable[str], dtype: str) -> list[ConvProblem]:
    """Problems from a JSON file: the dev-suite format (``{"problems": [{"N":…}]}``) or a list of
    problem dicts (``ConvProblem.to_dict``); suite entries expand to every requested direction."""
    data = json.loads(Path(path).read_text())
    entries = data["problems"] if isinstance(data, dict) else data
    out: list[ConvProblem] = []
    for entry in entries:
        if "N" in entry:
            out.extend(ConvProblem.from_suite_entry(entry, d, dtype) for d in directions)
        else:
            base = ConvProblem.from_dict(entry)
            out.extend(replace(base, direction=Direction.parse(d), dtype=DType.parse(dtype)) for d in directions)
    return out


def family_of(kernel: str) -> str:
    return CUDNN if kernel in BASELINES else parse_kernel_name(kernel).family.value


