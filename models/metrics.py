"""Selection metrics (DESIGN §7), per problem and aggregated.

For one problem with measured kernel times ``t`` (the oracle ``t* = min t`` over fully timed
kernels) and a selector that picks kernel ``s``:

* efficiency ``e = t* / t_s`` (≤ 1; 1 when the pick is the measured best);
* top-1: ``s`` is the measured best; top-5: ``s`` is among the five fastest measured kernels
  (ranked by ``t``; ties share the better rank).

Aggregates over problems: mean, median, P10 (10th percentile, linear interpolation), min of ``e``,
and the top-1 / top-5 rates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pick:
    efficiency: float
    top1: bool
    top5: bool


def pick_from_scores(time_us: np.ndarray, timed: np.ndarray, predicted: np.ndarray) -> Pick:
    """The selector picks the lowest predicted time among the measured candidates."""
    choice = int(np.argmin(predicted))
    return pick_index(time_us, timed, choice)


def pick_index(time_us: np.ndarray, timed: np.ndarray, choice: int) -> Pick:
    oracle = float(time_us[timed].min())
    chosen = float(time_us[choice])
    rank = int(np.sum(time_us < chosen))  # kernels strictly faster than the pick
    return Pick(efficiency=min(1.0, oracle / chosen), top1=rank == 0, top5=rank < 5)


def pick_time(oracle_us: float, chosen_us: float) -> Pick:
    """For selectors outside the candidate list (cuDNN heuristic vs its own autotuned time)."""
    return Pick(efficiency=min(1.0, oracle_us / chosen_us), top1=chosen_us <= oracle_us, top5=False)


def summarize(picks: Iterable[Pick]) -> dict[str, float]:
    picks = list(picks)
    if not picks:
        return {"problems": 0}
    e = np.array([p.efficiency for p in picks])
    return {"problems": len(picks), "mean": float(e.mean()), "median": float(np.median(e)),
            "p10": float(np.percentile(e, 10)), "min": float(e.min()),
            "top1": float(np.mean([p.top1 for p in picks])), "top5": float(np.mean([p.top5 for p in picks]))}


def by_label(labels: Sequence[str], picks: Sequence[Pick]) -> dict[str, dict[str, float]]:
    out: dict[str, list[Pick]] = {}
    for label, pick in zip(labels, picks):
        out.setdefault(label, []).append(pick)
    return {label: summarize(out[label]) for label in sorted(out)}
