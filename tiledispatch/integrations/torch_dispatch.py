"""Per-problem dispatch of the custom ops: our kernel, PyTorch's own convolution, or the faster of both.

The policy is a setting of the :class:`~tiledispatch.integrations.torch_runtime.Runtime`
(``configure(policy=...)``, ``runtime.policy = ...``, or ``$TILEDISPATCH_TORCH_POLICY``):

* ``fastest``: on the first call of each (direction, problem) in the process, the selected kernel of
  ours and PyTorch's convolution for that direction (:func:`.torch_reference.reference`, the ops the
  tests compare against: cuDNN on CUDA, with ``torch.backends.cudnn.benchmark`` as the user set it)
  are both timed on that call's own tensors, on the current stream, by the runtime's timer; the faster
  (see *host cost* below) is cached with both times in the problem's entry (one INFO line per
  decision) and every later call goes to it after the same single dict lookup as under ``ours``;
* ``ours``: always our kernel (the integration as it was: what ``bench/torch_e2e.py`` calls "pure");
* ``pytorch``: always PyTorch's convolution (keeps the swapped modules: an A/B switch);
* ``auto`` (the default): ``fastest`` for CUDA tensors, ``ours`` elsewhere (the Triton interpreter,
  where there is no speed to win).

Both implementations return the result in the same channels-last memory (canonical strides), so
the custom ops' fake implementations, and ``torch.compile``, see one layout whichever runs.

Host cost: a training step of small problems is host-bound (the GPU waits for the Python that
launches the next kernel), so a kernel 2 µs faster on the device whose call costs 20 µs more on the
host loses time there. Each side's per-call cost is therefore its device time *plus* its host time
(the wall time of the call as the runtime makes it: for ours the operand checks, output and
workspace allocation and launches of the cached launch plan; for PyTorch's its convolution call;
the module and autograd code around either is the same and not counted), and the cheaper total wins
(ours on a tie). Adding both sides' host times means only their difference decides; for large
problems the device times dominate and nothing changes. A sum is the simple, conservative model:
when the host is not the bottleneck its time overlaps the device's and counts for less than this.
:class:`EventTimer` measures both per call: the host time with ``time.perf_counter`` around the call,
the device time with CUDA events while a short sleep kernel (``hold_cycles``) keeps the stream busy,
so the events see the kernels back to back and not the host's launch gaps (which would count the
host time twice). Timers that answer a plain number give device times only (host cost 0).

Layers: the decisions above are per direction, and each side's host time is that of its own call
(our launch plan, or PyTorch's convolution function). A layer whose directions are split between
both, or all on ours, runs through the runtime's Python autograd Function (:class:`.torch_ops.EagerConv`:
its node, its calls per direction, a separate bias add), where a layer all on PyTorch runs
PyTorch's own convolution and autograd (one ``convolution_backward`` for both gradients). That
difference is host time per layer no per-direction decision sees: measured on an H200 host with
batch 32 (``bench/torch_e2e.py --profile``), ConvNeXt-tiny's training step enqueued 4.7 ms more
host work under ``ours`` than under cuDNN for 18 swapped layers, while its device time differed by
0.5 ms. So under ``cost="total"``, once every direction a layer's call needs is decided and one of
them is ours, the runtime times the whole layer both ways on the call's tensors (forward, and the
backward of the gradients that flow, by the runtime's timer: ours-as-decided first, then PyTorch's
own), once per layer shape, and runs PyTorch's own convolution for the layer when that is not slower
(:class:`LayerDecision`; one INFO line each; :meth:`~.torch_runtime.Runtime.layer_report`). Where the
decisions split a layer between both (or ours cannot take the C++ launch path as decided), a third
route is timed when the C++ path can run every needed direction on our kernels: the whole layer on
ours through :mod:`.torch_native`, one C++ autograd node. Its host cost per layer is below PyTorch's
own (an H200 host, session 20: 98 against 143 µs for a depthwise layer's forward and backward), so a
direction whose kernel is a little slower on the device than cuDNN's can still be cheaper there as
part of an all-ours layer than the split layer is; the cheapest of the three routes runs it. A layer
costs the larger of its device and host times per call, not their sum: its host work and its kernels
overlap in the stream, and what the step waits for is the slower of the two (host-bound small
batches: the host time; device-bound large ones: the device time). Measured on the H200 (session
11): ConvNeXt-tiny's 56×56 depthwise layer at batch 128 took 0.84 ms on the device and 0.84 ms of
host time as decided, 1.15 and 0.41 ms as PyTorch's own: the sum would pick PyTorch's own for a step
that is device-bound. Under ``cost="device"`` no layer is timed: a replay pays no host time, and the
per-direction decisions stand.

Cost of a decision, once per problem and process (:class:`EventTimer`'s defaults): per side, one
warm-up call (it includes our kernel's JIT compile and cuDNN's benchmark search, which that first
call would pay anyway), then up to ``repeats`` = 5 synchronized, timed calls, stopping early once the
side's timed calls add up to ``budget_ms`` = 25 ms of device time; the medians are kept. So at most
50 ms plus two calls of timing per problem, beyond the warm-ups, and a hold of about 0.3 ms of GPU
time before each timed call (a model has tens of problems per direction).

Cost under CUDA graphs: a replay runs no Python, so the host time a decision adds is not paid there,
and a decision on device + host time sends to PyTorch problems whose kernel of ours is faster on the
device (measured in ``bench/torch_e2e.py --cuda-graph``: 1–7 such decisions per model). The runtime's
``cost`` setting says what a decision compares: ``total`` (the default: device + host time per call,
for eager code) or ``device`` (device time alone: for code replayed as CUDA graphs —
``torch.cuda.graph``, ``torch.compile(mode="reduce-overhead")``); ``configure(cost=...)``,
``runtime.cost = ...`` or ``$TILEDISPATCH_TORCH_COST``. Each decision keeps both sides' device and
host times, so changing ``cost`` re-derives every decision made so far without timing anything again
(set it before capturing; a captured graph keeps the implementations it recorded).

CUDA-graph capture: nothing can be timed while the current stream is being captured, so a problem
first seen during capture runs our kernel and stays undecided (one INFO line) until its first call
outside capture; a decided problem dispatches as decided. A captured graph keeps what it recorded:
run one eager step before capturing (``torch.compile(mode="reduce-overhead")`` warms up eagerly
before it captures) so that the graph records the decided implementations.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

log = logging.getLogger("tiledispatch.integrations")

AUTO, FASTEST, OURS, PYTORCH = "auto", "fastest", "ours", "pytorch"
POLICIES = (AUTO, FASTEST, OURS, PYTORCH)
POLICY_ENV = "TILEDISPATCH_TORCH_POLICY"
TOTAL, DEVICE = "total", "device"
COSTS = (TOTAL, DEVICE)
COST_ENV = "TILEDISPATCH_TORCH_COST"
#: A timed layer's routes (:class:`LayerDecision`): PyTorch's own convolution, every direction on ours
#: through the C++ launch path, or each direction as decided.
NATIVE, OURS_LAYER, AS_DECIDED = "pytorch_own", "ours_cpp", "as_decided"



@dataclass(frozen=True)
class Timing:
    """One call of an implementation: milliseconds on the device and on the host (see the module
    docstring); ``total_ms`` is what decisions compare."""

    device_ms: float
    host_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return self.device_ms + self.host_ms


#: ``timer(run, device) -> Timing | ms``: the time of one ``run()`` (a zero-argument call of one
#: implementation on the actual tensors), on ``device``'s current stream; a plain number is the
#: device time alone.
Timer = Callable[[Callable[[], Any], torch.device], Timing | float]


def parse_policy(policy: str | None) -> str:
    """``policy`` checked (``None``: ``auto``)."""
    policy = (policy or AUTO).strip().lower()
    if policy not in POLICIES:
        raise ValueError(f"policy: must be one of {POLICIES}, got {policy!r}")
    return policy


def parse_cost(cost: str | None) -> str:
    """``cost`` checked (``None``: ``total``)."""
    cost = (cost or TOTAL).strip().lower()
    if cost not in COSTS:
        raise ValueError(f"cost: must be one of {COSTS} (device + host time per call, or device time alone for "
                         f"CUDA-graph replay), got {cost!r}")
    return cost


def resolve(policy: str, device: torch.device) -> str:
    """The policy in force for a call on ``device`` (``auto`` resolved)."""
    if policy != AUTO:
        return policy
    return FASTEST if device.type == "cuda" else OURS


@dataclass(frozen=True)
class Decision:
    """Which implementation runs a problem under ``fastest``, and the times it was chosen on: device
    and host milliseconds per call of each side (host 0 when the timer gave device times only);
    ``cost``: what was compared (``total`` or ``device``, see the module docstring)."""

    impl: str                # OURS or PYTORCH
    ours_ms: float           # device
    pytorch_ms: float        # device
    seconds: float           # wall time of the decision (timing both sides, warm-ups included)
    ours_host_ms: float = 0.0
    pytorch_host_ms: float = 0.0
    cost: str = TOTAL

    def impl_for(self, cost: str) -> str:
        """The implementation these times pick when ``cost`` is compared (ours on a tie)."""
        if cost == DEVICE:
            return OURS if self.ours_ms <= self.pytorch_ms else PYTORCH
        return OURS if self.ours_total_ms <= self.pytorch_total_ms else PYTORCH

    def under(self, cost: str) -> Decision:
        """This decision re-derived for ``cost`` (no timing: both sides' times are kept)."""
        return self if cost == self.cost else replace(self, impl=self.impl_for(cost), cost=cost)

    @property
    def ours_total_ms(self) -> float:
        return self.ours_ms + self.ours_host_ms

    @property
    def pytorch_total_ms(self) -> float:
        return self.pytorch_ms + self.pytorch_host_ms

    @property
    def speedup(self) -> float:
        """PyTorch's time over ours, what the decision compared (``cost``: device + host, or device alone;
        > 1: ours faster)."""
        ours, pytorch = ((self.ours_ms, self.pytorch_ms) if self.cost == DEVICE
                         else (self.ours_total_ms, self.pytorch_total_ms))
        return pytorch / ours if ours > 0 else float("inf")


#: Clock cycles of the sleep kernel queued before each timed CUDA call: about 0.25–0.35 ms at
#: 1.4–2 GHz, several times the host side of one convolution call, which it must outlast (any
#: excess would show in the device time too).
HOLD_CYCLES = 500_000

#: The same for timing a whole layer (forward and backward through autograd: 0.2–0.9 ms of host work
#: per call on an H200 host, ``bench/torch_e2e.py``): about 2–3 ms. A hold shorter than the host's
#: enqueue time lets the launch gaps into the device time, and the route with more host work would
#: look slower on the device too.
LAYER_HOLD_CYCLES = 4_000_000


@dataclass(frozen=True)
class EventTimer:
    """The default timer: ``warmup`` untimed calls, then up to ``repeats`` timed ones (at least one),
    stopping once their device times add up to ``budget_ms``; returns the medians of the device and
    host times. CUDA: a ``hold_cycles`` sleep kernel, then events around the call on the current
    stream, synchronized after each call; the host time is the call's wall time. Other devices:
    wall time as device time, host 0 (their calls are synchronous: the wall time is all of it)."""

    warmup: int = 1
    repeats: int = 5
    budget_ms: float = 25.0
    hold_cycles: int = HOLD_CYCLES

    def for_layers(self) -> EventTimer:
        """This timer with a hold long enough for a whole layer's calls (``LAYER_HOLD_CYCLES``)."""
        return replace(self, hold_cycles=max(self.hold_cycles, LAYER_HOLD_CYCLES)) if self.hold_cycles else self

    def __call__(self, run: Callable[[], Any], device: torch.device) -> Timing:
        for _ in range(self.warmup):
            run()
        samples: list[Timing] = []
        while not samples or (len(samples) < self.repeats and sum(s.device_ms for s in samples) < self.budget_ms):
            samples.append(_once(run, device, self.hold_cycles))
        return Timing(statistics.median(s.device_ms for s in samples), statistics.median(s.host_ms for s in samples))


def _once(run: Callable[[], Any], device: torch.device, hold_cycles: int) -> Timing:
    """Device and host milliseconds of one ``run()``."""
    if device.type != "cuda":
        start = time.perf_counter()
        run()
        return Timing(1e3 * (time.perf_counter() - start))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if hold_cycles:  # the stream stays busy while the host enqueues the call: no launch gaps in the events
        torch.cuda._sleep(hold_cycles)
    start.record()
    begin = time.perf_counter()
    run()
    host_s = time.perf_counter() - begin
    end.record()
    end.synchronize()
    return Timing(start.elapsed_time(end), 1e3 * host_s)


def as_timing(measured: Timing | float) -> Timing:
    """A timer's answer as a :class:`Timing` (a plain number: device milliseconds, no host cost)."""
    return measured if isinstance(measured, Timing) else Timing(float(measured))


def is_capturing(device: torch.device) -> bool:
    """Whether the current CUDA stream is being captured into a graph (never, off CUDA)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def decide(timer: Timer, run_ours: Callable[[], Any], run_pytorch: Callable[[], Any],
           device: torch.device, cost: str = TOTAL) -> Decision:
    """Time both implementations with ``timer`` and keep the one with the smaller time per call:
    device + host (``cost`` ``total``) or device alone (``device``); ours on a tie."""
    start = time.perf_counter()
    ours = as_timing(timer(run_ours, device))
    pytorch = as_timing(timer(run_pytorch, device))
    timed = Decision(OURS, ours.device_ms, pytorch.device_ms, time.perf_counter() - start, ours.host_ms,
                     pytorch.host_ms, TOTAL)
    return replace(timed, impl=timed.impl_for(cost), cost=cost)


@dataclass(frozen=True)
class LayerDecision:
    """A layer timed under ``fastest`` (see *Layers* in the module docstring): ``mixed``, its
    directions as decided; ``native``, PyTorch's own convolution and autograd for every direction;
    ``ours``, every direction on our kernels through the C++ launch path (:mod:`.torch_native`), timed
    only where the decisions split the layer (or leave it on the Python path) and that path can run all
    of it, else None. Times per call (forward and the needed backward)."""

    mixed: Timing
    native: Timing
    seconds: float
    ours: Timing | None = None

    def route_for(self, cost: str) -> str:
        """The cheapest route when ``cost`` is compared: :data:`NATIVE`, :data:`OURS_LAYER` or
        :data:`AS_DECIDED`, preferred in that order on a tie (the shorter path first)."""
        def measure(timing: Timing) -> float:
            return timing.device_ms if cost == DEVICE else layer_cost_ms(timing)

        routes = [(NATIVE, self.native)] + ([(OURS_LAYER, self.ours)] if self.ours is not None else [])
        routes.append((AS_DECIDED, self.mixed))
        return min(routes, key=lambda route: measure(route[1]))[0]  # min keeps the first of equals

    def native_for(self, cost: str) -> bool:
        """Whether PyTorch's own layer serves it when ``cost`` is compared."""
        return self.route_for(cost) == NATIVE


def layer_cost_ms(timing: Timing) -> float:
    """A layer's cost per call under ``cost="total"``: the larger of its device and host times (see
    *Layers* in the module docstring)."""
    return max(timing.device_ms, timing.host_ms)


def decide_layer(timer: Timer, run_mixed: Callable[[], Any], run_native: Callable[[], Any],
                 device: torch.device, run_ours: Callable[[], Any] | None = None) -> LayerDecision:
    """Time a layer's routes with ``timer`` (as decided first, then PyTorch's own, then all ours when
    ``run_ours`` is given; an :class:`EventTimer` with its layer hold)."""
    if isinstance(timer, EventTimer):
        timer = timer.for_layers()
    start = time.perf_counter()
    mixed = as_timing(timer(run_mixed, device))
    native = as_timing(timer(run_native, device))
    ours = as_timing(timer(run_ours, device)) if run_ours is not None else None
    return LayerDecision(mixed, native, time.perf_counter() - start, ours)


def log_decision(problem_key: str, kernel: str, decision: Decision) -> None:
    """The one INFO line of a decision (device time, then host time per call)."""
    log.info("tiledispatch: %s: ours %.4f ms + host %.4f ms (%s), PyTorch %.4f ms + host %.4f ms -> %s (cost %s)",
             problem_key, decision.ours_ms, decision.ours_host_ms, kernel, decision.pytorch_ms,
             decision.pytorch_host_ms, "ours" if decision.impl == OURS else "PyTorch", decision.cost)


def log_layer_decision(layer_key: str, decision: LayerDecision, cost: str) -> None:
    """The one INFO line of a layer decision."""
    ours = (f", all ours (C++) {decision.ours.device_ms:.4f} ms + host {decision.ours.host_ms:.4f} ms"
            if decision.ours is not None else "")
    route = {NATIVE: "PyTorch's own", OURS_LAYER: "all ours (C++)", AS_DECIDED: "as decided"}[decision.route_for(cost)]
    log.info("tiledispatch: layer %s: as decided %.4f ms + host %.4f ms, PyTorch's own %.4f ms + host %.4f ms%s -> %s",
             layer_key, decision.mixed.device_ms, decision.mixed.host_ms, decision.native.device_ms,
             decision.native.host_ms, ours, route)
