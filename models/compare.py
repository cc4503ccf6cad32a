"""Paired comparison of model versions on the same measured validation problems.

``models.validate`` scores the model the server would choose; this scores several artifact folders
of one direction side by side on the same problems, each in the order the server would use (its
ranker's when it has one) and, for a format-2 artifact, also in its regressor's order (lowest
predicted µs) — the "regressor-only" kind of the same training. The first selector named is the
baseline; for every other one the report gives, per problem, wins / losses / ties in efficiency
against it and a paired bootstrap interval of its gain in mean efficiency: problems resampled with
replacement ``resamples`` times from a fixed seed, the 2.5 and 97.5 percentiles of
``mean(e_selector − e_baseline)``. Deterministic (same data and models, same numbers).

CLI (one direction per call; the JSON holds every number the README tables quote)::

    python -m tiledispatch.models.compare --data models/data/measured/h200_s3/validation_fwd \\
        models/data/measured/h200_s4/validation_fwd --direction fwd \\
        --models models/artifacts/lgbm-sm_90-bf16-fwd/3 models/artifacts/lgbm-sm_90-bf16-fwd/4 --out fwd.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tiledispatch.models import metrics
from tiledispatch.models.dataset import ProblemRows, problem_rows, read_rows
from tiledispatch.models.predictor import load, rank
from tiledispatch.native.problem import Direction, DType
from tiledispatch.native.rules import RULE_SETS, rule_set_names

SEED = 20261122
RESAMPLES = 10_000


def selector_picks(model: Any, problems: Sequence[ProblemRows]) -> dict[str, list[metrics.Pick]]:
    """``{label: picks}``: ``<name>/<version>`` in the server's order; a format-2 artifact adds
    ``<name>/<version> regressor order``."""
    label = f"{model.name}/{model.version}"
    served: list[metrics.Pick] = []
    by_regressor: list[metrics.Pick] = []
    for pr in problems:
        ranking = rank(model, pr.problem, pr.configs)
        served.append(metrics.pick_index(pr.time_us, pr.timed, int(ranking.order[0])))
        if ranking.by == "ranker":
            by_regressor.append(metrics.pick_from_scores(pr.time_us, pr.timed, ranking.predicted_us))
    out = {label + (" ranker order" if by_regressor else ""): served}
    if by_regressor:
        out[f"{label} regressor order"] = by_regressor
    return out


def paired(baseline: Sequence[metrics.Pick], other: Sequence[metrics.Pick], *, seed: int = SEED,
           resamples: int = RESAMPLES) -> dict[str, Any]:
    """Per-problem wins / losses / ties of ``other`` against ``baseline`` and the paired bootstrap
    95 % interval of its gain in mean efficiency."""
    a = np.array([p.efficiency for p in baseline])
    b = np.array([p.efficiency for p in other])
    if a.shape != b.shape or a.size == 0:
        raise ValueError("paired: both selectors must score the same, non-empty list of problems")
    diff = b - a
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, diff.size, size=(resamples, diff.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return {"gain_mean": float(diff.mean()), "ci95": [float(low), float(high)], "resamples": resamples,
            "seed": seed, "wins": int((diff > 1e-12).sum()), "losses": int((diff < -1e-12).sum()),
            "ties": int((np.abs(diff) <= 1e-12).sum())}


def compare(data_dirs: Sequence[Path], model_folders: Sequence[Path], direction: Direction,
            dtype: DType = DType.BF16, rule_set: str | None = None) -> dict[str, Any]:
    models = [load(folder) for folder in model_folders]
    for folder, model in zip(model_folders, models):
        if not model.covers(model.arch, dtype, direction):
            raise ValueError(f"compare: {folder} is not a {direction.value}/{dtype.value} model")
    frame, _ = read_rows(data_dirs)
    problems = problem_rows(frame, direction=direction.value, dtype=dtype.value,
                            kernels=rule_set_names(rule_set, models[0].arch) if rule_set else None)
    if not problems:
        raise ValueError(f"compare: no {direction.value}/{dtype.value} problems in {list(map(str, data_dirs))}")
    selectors: dict[str, list[metrics.Pick]] = {}
    for model in models:
        selectors.update(selector_picks(model, problems))
    labels = [pr.problem.class_label for pr in problems]
    names = list(selectors)
    base = names[0]
    return {"direction": direction.value, "dtype": dtype.value, "problems": len(problems),
            "kernels_of_rule_set": rule_set or "every kernel in the data",
            "data": [str(d) for d in data_dirs], "baseline": base,
            "selectors": {name: {"overall": metrics.summarize(picks), "by_class": metrics.by_label(labels, picks),
                                 "efficiency": [round(p.efficiency, 6) for p in picks]}
                          for name, picks in selectors.items()},
            "paired_vs_baseline": {name: paired(selectors[base], selectors[name]) for name in names[1:]},
            "problem_keys": [pr.problem.key for pr in problems]}


def markdown_rows(result: dict[str, Any]) -> list[str]:
    """One table row per selector: mean / median / P10 / min / top-1 / top-5, and the paired gain."""
    lines = ["| selector | mean | median | P10 | min | top-1 | top-5 | gain vs baseline [95 % CI] | W / L / T |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, s in result["selectors"].items():
        o = s["overall"]
        p = result["paired_vs_baseline"].get(name)
        gain = (f"{p['gain_mean']:+.3f} [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}]" if p else "baseline")
        wlt = f"{p['wins']} / {p['losses']} / {p['ties']}" if p else "–"
        lines.append(f"| {name} | {o['mean']:.3f} | {o['median']:.3f} | {o['p10']:.3f} | {o['min']:.3f} "
                     f"| {o['top1']:.2f} | {o['top5']:.2f} | {gain} | {wlt} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Score model versions side by side on the same validation problems.")
    parser.add_argument("--data", type=Path, nargs="+", required=True, help="validation bench directories")
    parser.add_argument("--direction", required=True)
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--models", type=Path, nargs="+", required=True,
                        help="artifact folders <name>/<version>; the first is the baseline")
    parser.add_argument("--out", type=Path, help="write the JSON here (default: stdout only)")
    parser.add_argument("--rule-set", default=None, choices=RULE_SETS,
                        help="score on this rule set's kernels only (default: every kernel in the data)")
    args = parser.parse_args(argv)
    result = compare(args.data, args.models, Direction.parse(args.direction), DType.parse(args.dtype),
                     rule_set=args.rule_set)
    result["command"] = "python -m tiledispatch.models.compare " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"{result['direction']}: {result['problems']} problems")
    print("\n".join(markdown_rows(result)))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
