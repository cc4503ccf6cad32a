"""Per-problem dispatch of the custom ops: our kernel, PyTorch's own convolution, or the faster of both.

The policy is a setting of the :class:`~tiledispatch.integrations.torch_runtime.Runtime`
(``configure(policy=...)``, ``runtime.policy = ...``, or ``$TILEDISPATCH_TORCH_POLICY``):

* ``fastest``: on the first call of each (direction, problem) in the process, the selected kernel of
  ours and PyTorch's convolution for that direction (:func:`.torch_reference.reference`, the ops the
  tests compare against: cuDNN on CUDA, with ``torch.backends.cudnn.benchmark`` as the user set it)
  are both timed on that call's own tensors, on the current stream, by the runtime's timer; the faster
  is cached with both times in the problem's entry (one INFO line per decision) and every later call
  goes to it after the same single dict lookup as under ``ours``;
* ``ours``: always our kernel (the integration as it was: what ``bench/torch_e2e.py`` calls "pure");
* ``pytorch``: always PyTorch's convolution (keeps the swapped modules: an A/B switch);
* ``auto`` (the default): ``fastest`` for CUDA tensors, ``ours`` elsewhere (the Triton interpreter,
  where there is no speed to win).

Both implementations return the result in the same channels-last memory (canonical strides), so
the custom ops' fake implementations, and ``torch.compile``, see one layout whichever runs.

Cost of a decision, once per problem and process (:class:`EventTimer`'s defaults): per side, one
warm-up call (it includes our kernel's JIT compile and cuDNN's benchmark search, which that first
call would pay anyway), then up to ``repeats`` = 5 synchronized, timed calls, stopping early once the
side's timed calls add up to ``budget_ms`` = 25 ms; the median is kept. So at most 50 ms plus two
calls of timing per problem, beyond the warm-ups (a model has tens of problems per direction).

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
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger("tiledispatch.integrations")

AUTO, FASTEST, OURS, PYTORCH = "auto", "fastest", "ours", "pytorch"
POLICIES = (AUTO, FASTEST, OURS, PYTORCH)
POLICY_ENV = "TILEDISPATCH_TORCH_POLICY"

#: ``timer(run, device) -> ms``: the time of one ``run()`` (a zero-argument call of one
#: implementation on the actual tensors), on ``device``'s current stream.
Timer = Callable[[Callable[[], Any], torch.device], float]


def parse_policy(policy: str | None) -> str:
    """``policy`` checked (``None``: ``auto``)."""
    policy = (policy or AUTO).strip().lower()
    if policy not in POLICIES:
        raise ValueError(f"policy: must be one of {POLICIES}, got {policy!r}")
    return policy


def resolve(policy: str, device: torch.device) -> str:
    """The policy in force for a call on ``device`` (``auto`` resolved)."""
    if policy != AUTO:
        return policy
    return FASTEST if device.type == "cuda" else OURS


@dataclass(frozen=True)
class Decision:
    """Which implementation runs a problem under ``fastest``, and the times it was chosen on."""

    impl: str                # OURS or PYTORCH
    ours_ms: float
    pytorch_ms: float
    seconds: float           # wall time of the decision (timing both sides, warm-ups included)

    @property
    def speedup(self) -> float:
        """PyTorch's time over ours (> 1: ours faster)."""
        return self.pytorch_ms / self.ours_ms if self.ours_ms > 0 else float("inf")


@dataclass(frozen=True)
class EventTimer:
    """The default timer: ``warmup`` untimed calls, then up to ``repeats`` timed ones (at least one),
    stopping once they add up to ``budget_ms``; returns their median. CUDA: events on the current
    stream, synchronized after each call; other devices: wall time (their calls are synchronous)."""

    warmup: int = 1
    repeats: int = 5
    budget_ms: float = 25.0

    def __call__(self, run: Callable[[], Any], device: torch.device) -> float:
        for _ in range(self.warmup):
            run()
        samples: list[float] = []
        while not samples or (len(samples) < self.repeats and sum(samples) < self.budget_ms):
            samples.append(_once_ms(run, device))
        return statistics.median(samples)


def _once_ms(run: Callable[[], Any], device: torch.device) -> float:
    """Milliseconds of one ``run()``."""
    if device.type != "cuda":
        start = time.perf_counter()
        run()
        return 1e3 * (time.perf_counter() - start)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def is_capturing(device: torch.device) -> bool:
    """Whether the current CUDA stream is being captured into a graph (never, off CUDA)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def decide(timer: Timer, run_ours: Callable[[], Any], run_pytorch: Callable[[], Any],
           device: torch.device) -> Decision:
    """Time both implementations with ``timer`` and keep the faster (ours on a tie)."""
    start = time.perf_counter()
    ours_ms = float(timer(run_ours, device))
    pytorch_ms = float(timer(run_pytorch, device))
    impl = OURS if ours_ms <= pytorch_ms else PYTORCH
    return Decision(impl, ours_ms, pytorch_ms, time.perf_counter() - start)


def log_decision(problem_key: str, kernel: str, decision: Decision) -> None:
    """The one INFO line of a decision."""
    log.info("tiledispatch: %s: ours %.4f ms (%s), PyTorch %.4f ms -> %s", problem_key, decision.ours_ms,
             kernel, decision.pytorch_ms, "ours" if decision.impl == OURS else "PyTorch")
