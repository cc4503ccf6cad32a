"""Validation report (DESIGN §7, issue 4 item 6): selection quality on problems never trained on.

For every measured validation problem (every applicable kernel timed, so the oracle is the true
best) and each direction, three selectors are scored against the measured oracle:

* the trained model the server would choose for (arch, dtype, direction): newest covering version
  (``server/predictors.py::ModelStore.choose``), ranking the measured kernels — by its LambdaRank
  ranker when the artifact has one (format 2, ``models.predictor.rank``: the pick is the highest
  ranker score), else by its predicted µs; for a format-2 artifact the same candidates ranked by
  its regressor's µs are scored too ("trained, regressor order"), so one report shows what the
  ranker adds;
* the analytic fallback (``models/analytic.py``) on the same candidates;
* cuDNN's own heuristic: ``cudnn.benchmark=False`` time against cuDNN's autotuned
  (``benchmark=True``) time on the same problem (rows ``cudnn_heuristic`` and ``cudnn``); its
  top-1 means the heuristic's time is within 1 % of the autotuned (top-5 has no meaning there).

Metrics (``models.metrics``): mean, median, P10, min efficiency, top-1, top-5 — overall and per
problem class, and per source (held-out torchvision architectures / held-out synthetic groups)
when the plan's problem files are given. Also: our oracle against cuDNN autotuned (speed-up), and
the trained model's prediction error. Plots: efficiency distribution per direction (ECDF), and
predicted vs measured time.

CLI::

    python -m tiledispatch.models.validate --data VALIDATION_DIR [...] --models models/artifacts \\
        --dtype bf16 --out models/reports/<date>_h200 [--plan models/data/problems/validation_*.json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tiledispatch.models import metrics
from tiledispatch.models.analytic import AnalyticPredictor
from tiledispatch.models.dataset import ProblemRows, manifest_summary, problem_rows, read_rows
from tiledispatch.models.predictor import newest_covering, rank
from tiledispatch.native.arch import get_arch
from tiledispatch.native.bench import PRUNE_FACTOR
from tiledispatch.native.problem import Direction, DType
from tiledispatch.native.rules import RULE_SETS, rule_set_names

#: Heuristic time within this factor of the autotuned time counts as "picked the best".
CUDNN_TOP1_TOLERANCE = 1.01


def choose_model(models: Sequence[Any], arch: str, device: str, dtype: DType, direction: Direction) -> Any | None:
    """As the server does: the newest version among the models covering (arch or device, dtype, direction)."""
    return newest_covering(models, (arch, device), dtype, direction)


def load_models(models_dir: Path | None, extra: Sequence[Path] = ()) -> list[Any]:
    from tiledispatch.models.predictor import load

    folders = sorted(p.parent for p in Path(models_dir).glob("*/*/feature_spec.json")) if models_dir else []
    return [load(f) for f in [*folders, *extra]]


@dataclass
class DirectionResult:
    direction: str
    labels: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    trained: list[metrics.Pick] = field(default_factory=list)
    #: Format-2 artifacts only: the picks of the same artifact's regressor (lowest predicted µs).
    trained_regressor_order: list[metrics.Pick] = field(default_factory=list)
    ranked_by: str = ""  # what ordered the trained picks: "ranker" or "predicted_us"
    analytic: list[metrics.Pick] = field(default_factory=list)
    cudnn: list[metrics.Pick] = field(default_factory=list)
    cudnn_labels: list[str] = field(default_factory=list)
    speedup_vs_cudnn: list[float] = field(default_factory=list)
    predicted_us: list[np.ndarray] = field(default_factory=list)
    measured_us: list[np.ndarray] = field(default_factory=list)
    model: str = ""


def evaluate(problems: Sequence[ProblemRows], model: Any, analytic: AnalyticPredictor, direction: str,
             source_of: dict[str, str]) -> DirectionResult:
    r = DirectionResult(direction=direction, model=f"{model.name}/{model.version}" if model else "")
    for pr in problems:
        label = pr.problem.class_label
        r.labels.append(label)
        r.sources.append(source_of.get(pr.problem.shape_key, "unknown"))
        r.analytic.append(metrics.pick_from_scores(pr.time_us, pr.timed, analytic.predict_us(pr.problem, pr.configs)))
        if model is not None:
            ranking = rank(model, pr.problem, pr.configs)
            r.ranked_by = ranking.by
            r.trained.append(metrics.pick_index(pr.time_us, pr.timed, int(ranking.order[0])))
            if ranking.by == "ranker":
                r.trained_regressor_order.append(metrics.pick_from_scores(pr.time_us, pr.timed,
                                                                          ranking.predicted_us))
            r.predicted_us.append(ranking.predicted_us)
            r.measured_us.append(pr.time_us)
        if pr.cudnn_us == pr.cudnn_us:
            r.speedup_vs_cudnn.append(pr.cudnn_us / pr.oracle_us)
            if pr.cudnn_heuristic_us == pr.cudnn_heuristic_us:
                e = min(1.0, pr.cudnn_us / pr.cudnn_heuristic_us)
                r.cudnn.append(metrics.Pick(e, pr.cudnn_heuristic_us <= pr.cudnn_us * CUDNN_TOP1_TOLERANCE, False))
                r.cudnn_labels.append(label)
    return r


def pruning_caveat(frame: Any, direction: str, dtype: DType) -> dict[str, int]:
    """How far ``--oracle-only`` data is from "every applicable kernel fully timed": problems with
    pruned kernels, and those where a pruned kernel's estimate is within PRUNE_FACTOR of the best
    event time (a fair bar would have timed it; it might have been the oracle)."""
    rows = frame[(frame["direction"] == direction) & (frame["dtype"] == dtype.value)
                 & frame["kernel"].str.startswith("gconv_")]
    with_pruned = uncertain = 0
    for _, group in rows.groupby("problem_key"):
        ok, pruned = group[group["status"] == "ok"], group[group["status"] == "pruned"]
        if pruned.empty:
            continue
        with_pruned += 1
        if not ok.empty and bool((pruned["event_median_us"] < PRUNE_FACTOR * ok["event_median_us"].min()).any()):
            uncertain += 1
    return {"problems": int(rows["problem_key"].nunique()), "problems_with_pruned": with_pruned,
            "oracle_uncertain": uncertain}


def _block(picks: Sequence[metrics.Pick], labels: Sequence[str]) -> dict[str, Any]:
    return {"overall": metrics.summarize(picks), "by_class": metrics.by_label(labels, picks)}


def result_json(r: DirectionResult) -> dict[str, Any]:
    out: dict[str, Any] = {"model": r.model, "problems": len(r.labels),
                           "analytic": _block(r.analytic, r.labels)}
    if r.trained:
        out["trained"] = _block(r.trained, r.labels)
        out["trained"]["by_source"] = metrics.by_label(r.sources, r.trained)
        out["trained"]["ranked_by"] = r.ranked_by
        pred = np.log(np.concatenate(r.predicted_us))
        meas = np.log(np.concatenate(r.measured_us))
        out["trained"]["prediction"] = {"rows": int(pred.size),
                                        "rmse_log_us": float(np.sqrt(np.mean((pred - meas) ** 2))),
                                        "median_abs_pct_error": float(np.median(np.abs(np.exp(pred - meas) - 1)) * 100)}
    if r.trained_regressor_order:
        out["trained_regressor_order"] = _block(r.trained_regressor_order, r.labels)
        out["trained_regressor_order"]["by_source"] = metrics.by_label(r.sources, r.trained_regressor_order)
    out["analytic"]["by_source"] = metrics.by_label(r.sources, r.analytic)
    out["cudnn_heuristic"] = (_block(r.cudnn, r.cudnn_labels) if r.cudnn
                              else {"overall": {"problems": 0}, "note": "no cudnn_heuristic rows in the data"})
    if r.speedup_vs_cudnn:
        s = np.array(r.speedup_vs_cudnn)
        out["oracle_vs_cudnn_autotuned"] = {"problems": int(s.size), "geomean_speedup": float(np.exp(np.log(s).mean())),
                                            "faster_share": float(np.mean(s > 1))}
    return out


# ---- report ------------------------------------------------------------------------------------

def _row(name: str, s: dict[str, Any]) -> str:
    if not s.get("problems"):
        return f"| {name} | 0 | – | – | – | – | – | – |"
    return (f"| {name} | {s['problems']} | {s['mean']:.4f} | {s['median']:.4f} | {s['p10']:.4f} | {s['min']:.4f} "
            f"| {s['top1']:.3f} | {s['top5']:.3f} |")


_HEADER = "| | problems | mean | median | P10 | min | top-1 | top-5 |\n|---|---|---|---|---|---|---|---|"
TARGETS = {"mean": 0.98, "p10": 0.95, "min": 0.80, "top5": 0.90}


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Validation report — {report['dtype']} on {report['arch']} ({', '.join(report['gpus'])})", "",
             f"Generated {report['date']} by `{report['command']}`.", "",
             "Problems never trained on (held-out torchvision architectures and held-out synthetic groups); every",
             "applicable kernel measured (see each direction's data caveat), the oracle is the measured best.",
             "Efficiency = oracle time / time of the pick. cuDNN heuristic = `cudnn.benchmark=False` time vs",
             "cuDNN's autotuned (`benchmark=True`) time",
             f"(its top-1: within {CUDNN_TOP1_TOLERANCE - 1:.0%}; no top-5). Targets: mean ≥ 0.98, P10 ≥ 0.95, "
             "min ≥ 0.80, top-5 ≥ 0.90.", ""]
    if any("trained_regressor_order" in r for r in report["directions"].values()):
        lines += ["A model with a LambdaRank ranker (artifact format 2) picks its ranker's top candidate (row",
                  "\"trained, ranker order\"); its regressor predicts the µs (prediction error below) and, ranking the",
                  "same candidates by those µs, gives the row \"trained, regressor order\".", ""]
    for direction, r in report["directions"].items():
        by_ranker = "trained_regressor_order" in r
        lines += [f"## {direction}" + (f" — model `{r['model']}`" if r["model"] else " — no trained model")
                  + (" (order: LambdaRank ranker; µs: regressor)" if by_ranker else ""), ""]
        caveat = r.get("pruning", {})
        if caveat.get("problems_with_pruned"):
            lines += [f"**Data caveat:** {caveat['problems_with_pruned']} of {caveat['problems']} problems were "
                      "measured with `--oracle-only`, so some kernels carry only a 3-call event estimate (host "
                      f"launch included) instead of a graph-replay time; in {caveat['oracle_uncertain']} of them a "
                      "pruned kernel's estimate lies within 1.5× of the best event time, so the measured best is "
                      "not guaranteed to be the oracle and those efficiencies are approximate.", ""]
        lines.append(_HEADER)
        trained = "trained, ranker order" if by_ranker else "trained"
        if "trained" in r:
            lines.append(_row(trained, r["trained"]["overall"]))
        if by_ranker:
            lines.append(_row("trained, regressor order", r["trained_regressor_order"]["overall"]))
        lines.append(_row("analytic fallback", r["analytic"]["overall"]))
        cu = r["cudnn_heuristic"]["overall"]
        lines.append(_row("cuDNN heuristic", {**cu, "top5": float("nan")} if cu.get("problems") else cu))
        if "trained" in r:
            o = r["trained"]["overall"]
            met = [k for k, v in TARGETS.items() if o.get(k, 0) >= v]
            lines += ["", f"Targets met by the trained model{' (ranker order)' if by_ranker else ''}: "
                          f"{', '.join(met) or 'none'} (of {', '.join(TARGETS)})."]
            p = r["trained"]["prediction"]
            lines += [f"Prediction error: RMSE {p['rmse_log_us']:.3f} in log µs, median |error| "
                      f"{p['median_abs_pct_error']:.1f} % over {p['rows']} rows."]
        if "oracle_vs_cudnn_autotuned" in r:
            s = r["oracle_vs_cudnn_autotuned"]
            lines.append(f"Measured best of ours vs cuDNN autotuned: geomean speed-up {s['geomean_speedup']:.2f}×, "
                         f"faster on {s['faster_share']:.0%} of {s['problems']} problems.")
        lines += ["", "Per class:", "", _HEADER.replace("| |", "| class / selector |")]
        for label in sorted(r["analytic"]["by_class"]):
            if "trained" in r:
                lines.append(_row(f"{label} {trained}", r["trained"]["by_class"][label]))
            if by_ranker:
                lines.append(_row(f"{label} trained, regressor order", r["trained_regressor_order"]["by_class"][label]))
            lines.append(_row(f"{label} analytic", r["analytic"]["by_class"][label]))
            if label in r["cudnn_heuristic"].get("by_class", {}):
                cu = r["cudnn_heuristic"]["by_class"][label]
                lines.append(_row(f"{label} cuDNN heuristic", {**cu, "top5": float("nan")}))
        if "trained" in r and len(r["trained"]["by_source"]) > 1:
            lines += ["", f"Per source ({trained}):", "", _HEADER.replace("| |", "| source |")]
            lines += [_row(k, v) for k, v in r["trained"]["by_source"].items()]
        lines += ["", f"![efficiency]({direction}_efficiency.png) ![predicted vs measured]({direction}_predicted.png)",
                  ""]
    return "\n".join(lines) + "\n"


def plots(results: dict[str, DirectionResult], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for direction, r in results.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        trained = "trained, ranker order" if r.trained_regressor_order else "trained"
        for name, picks in ((trained, r.trained), ("trained, regressor order", r.trained_regressor_order),
                            ("analytic", r.analytic), ("cuDNN heuristic", r.cudnn)):
            if picks:
                e = np.sort([p.efficiency for p in picks])
                ax.step(e, np.arange(1, e.size + 1) / e.size, where="post", label=f"{name} (n={e.size})")
        ax.set_xlabel("efficiency (oracle / pick)")
        ax.set_ylabel("fraction of problems ≤ x")
        ax.set_title(f"{direction}: efficiency distribution (unseen problems)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left")
        path = out / f"{direction}_efficiency.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
        fig, ax = plt.subplots(figsize=(5, 5))
        if r.predicted_us:
            pred, meas = np.concatenate(r.predicted_us), np.concatenate(r.measured_us)
            ax.scatter(meas, pred, s=3, alpha=0.3)
            low, high = min(meas.min(), pred.min()), max(meas.max(), pred.max())
            ax.plot([low, high], [low, high], color="black", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel("measured µs (CUDA graph)")
        ax.set_ylabel("predicted µs")
        ax.set_title(f"{direction}: {r.model or 'no trained model'}")
        ax.grid(alpha=0.3)
        path = out / f"{direction}_predicted.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def source_map(plan_files: Sequence[Path]) -> dict[str, str]:
    """shape_key (problem without direction/dtype) → "torchvision:<family>" / "synthetic"."""
    from tiledispatch.models.dataset_plan import model_family
    from tiledispatch.native.problem import ConvProblem

    out: dict[str, str] = {}
    for path in plan_files:
        document = json.loads(Path(path).read_text())
        for entry, meta in zip(document["problems"], document.get("meta", [])):
            p = ConvProblem.from_dict(entry)
            models = meta.get("models") or []
            tv = models and meta.get("source") == "torchvision"
            out[p.shape_key] = f"torchvision:{model_family(models[0])}" if tv else meta.get("source", "unknown")
    return out


def run(data_dirs: Sequence[Path], models_dir: Path | None, dtype: DType, out: Path, *, arch: str = "sm_90",
        model_folders: Sequence[Path] = (), plan_files: Sequence[Path] = (), command: str = "",
        rule_set: str | None = None) -> dict[str, Any]:
    """``rule_set``: score on that rule set's kernels only (the candidates and the oracle)."""
    frame, manifests = read_rows(data_dirs)
    kernels = rule_set_names(rule_set, arch) if rule_set else None
    spec = get_arch(arch)
    models = load_models(models_dir, model_folders)
    analytic = AnalyticPredictor(spec)
    source_of = source_map(plan_files)
    results: dict[str, DirectionResult] = {}
    for direction in Direction:
        problems = problem_rows(frame, direction=direction.value, dtype=dtype.value, kernels=kernels)
        if not problems:
            continue
        model = choose_model(models, spec.arch, spec.name, dtype, direction)
        results[direction.value] = evaluate(problems, model, analytic, direction.value, source_of)
    out.mkdir(parents=True, exist_ok=True)
    report = {"arch": spec.arch, "device": spec.name, "dtype": dtype.value, **manifest_summary(manifests),
              "kernels_of_rule_set": rule_set or "every kernel in the data",
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": command,
              "targets": TARGETS, "directions": {d: {**result_json(r), "pruning": pruning_caveat(frame, d, dtype)}
                                                 for d, r in results.items()}}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(markdown(report))
    plots(results, out)
    return report


def main(argv: list[str] | None = None) -> int:
    import sys

    parser = argparse.ArgumentParser(description="Score the trained models, the analytic fallback and cuDNN's "
                                                 "heuristic on measured validation problems.")
    parser.add_argument("--data", type=Path, nargs="+", required=True, help="validation bench directories")
    parser.add_argument("--models", type=Path, default=Path("models/artifacts"), help="artifacts root")
    parser.add_argument("--model", type=Path, nargs="*", default=[], help="extra model folders")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--plan", type=Path, nargs="*", default=[], help="validation problem files (for sources)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rule-set", default=None, choices=RULE_SETS,
                        help="score on this rule set's kernels only (default: every kernel in the data)")
    args = parser.parse_args(argv)
    report = run(args.data, args.models if args.models.exists() else None, DType.parse(args.dtype), args.out,
                 arch=args.arch, model_folders=args.model, plan_files=args.plan, rule_set=args.rule_set,
                 command="python -m tiledispatch.models.validate " + " ".join(sys.argv[1:] if argv is None else argv))
    for direction, r in report["directions"].items():
        t = r.get("trained", {}).get("overall", {})
        a = r["analytic"]["overall"]
        by = f" (by {r['trained']['ranked_by']})" if "trained" in r else ""
        print(f"{direction}: trained{by} {t.get('mean', float('nan')):.4f}/{t.get('p10', float('nan')):.4f} "
              f"analytic {a['mean']:.4f}/{a['p10']:.4f} (mean/P10) over {a['problems']} problems")
    print(f"validate: report in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
