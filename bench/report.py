"""Turn a tile-engine run (parquet shards + manifest) into a committed report.

    python bench/report.py RUN_DIR [RUN_DIR ...] --out bench/results/NAME --title "..."

Writes ``report.md`` (per problem and direction: best kernel, its time, cuDNN's time, speedup,
fraction of the roofline; per class: geomean speedup and median fraction; the issue's targets; the
problem-directions where cuDNN is faster, slowest ratio first),
``per_problem.csv``, ``per_class.csv`` and ``speedup_roofline.png``. Times are CUDA-graph replay
(device time) unless the run had none; both our kernels and cuDNN use the same method.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

BOUND_FLOOR_US = 20.0


def load(run_dirs: list[Path]) -> tuple[pd.DataFrame, list[dict]]:
    frames, manifests = [], []
    for run in run_dirs:
        shards = sorted(run.glob("rows-*.parquet"))
        if not shards:
            raise SystemExit(f"report: no rows-*.parquet in {run}")
        frames.append(pd.concat([pd.read_parquet(s) for s in shards], ignore_index=True))
        manifests.append(json.loads((run / "manifest.json").read_text()))
    return pd.concat(frames, ignore_index=True), manifests


def per_problem(rows: pd.DataFrame) -> pd.DataFrame:
    ok = rows[rows["status"] == "ok"].copy()
    ok["time_us"] = ok["graph_us"].where(ok["graph_us"].notna(), ok["event_median_us"])
    ours = ok[ok["kernel"].str.startswith("gconv_")]
    best = ours.loc[ours.groupby("problem_key")["time_us"].idxmin()]
    cudnn = ok[ok["kernel"] == "cudnn"].set_index("problem_key")
    counts = rows[rows["kernel"].str.startswith("gconv_")].groupby("problem_key").agg(
        kernels=("kernel", "count"), wrong=("status", lambda s: int((s == "wrong").sum())),
        failed=("status", lambda s: int(s.isin(["error", "crash", "timeout"]).sum())))
    table = best[["problem_key", "direction", "problem_class", "kernel", "family", "time_us", "bound_us",
                  "fma_bound_us", "tflops", "relative_error"]].set_index("problem_key")
    table = table.rename(columns={"kernel": "best_kernel", "time_us": "best_us"})
    table["cudnn_us"] = cudnn["time_us"].reindex(table.index)
    table["cudnn_event_us"] = cudnn["event_median_us"].reindex(table.index)
    table["best_event_us"] = best.set_index("problem_key")["event_median_us"].reindex(table.index)
    table["speedup"] = table["cudnn_us"] / table["best_us"]
    table["fraction_of_roofline"] = table["bound_us"] / table["best_us"]
    table["cudnn_fraction_of_roofline"] = table["bound_us"] / table["cudnn_us"]
    table = table.join(counts)
    return table.reset_index()


def geomean(values: pd.Series) -> float:
    values = values.dropna()
    values = values[values > 0]
    return float(np.exp(np.log(values).mean())) if len(values) else float("nan")


def per_class(table: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (klass, direction), group in table.groupby(["problem_class", "direction"]):
        big = group[group["bound_us"] >= BOUND_FLOOR_US]
        out.append({
            "problem_class": klass, "direction": direction, "problems": len(group),
            "geomean_speedup": geomean(group["speedup"]), "min_speedup": group["speedup"].min(),
            "max_speedup": group["speedup"].max(), "problems_bound_ge_20us": len(big),
            "median_fraction_of_roofline_ge_20us": big["fraction_of_roofline"].median() if len(big) else float("nan"),
            "cudnn_median_fraction_ge_20us": big["cudnn_fraction_of_roofline"].median() if len(big) else float("nan"),
        })
    return pd.DataFrame(out)


def targets(table: pd.DataFrame) -> list[tuple[str, str, float, str]]:
    """(target, measured, threshold, verdict) per the kernel issue's targets."""
    out = []
    is_2d_grouped_dw = table["problem_class"].isin(
        ["2d_grouped", "2d_depthwise", "2d_depthwise_multiplier"])
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        value = geomean(table[is_2d_grouped_dw & (table["direction"] == direction)]["speedup"])
        out.append((f"2D grouped+depthwise geomean speedup, {direction}", value, 1.5))
    value = geomean(table[table["problem_class"].isin(["3d_depthwise", "3d_depthwise_multiplier"])]["speedup"])
    out.append(("3D depthwise geomean speedup (all directions)", value, 10.0))
    value = geomean(table[table["problem_class"].isin(["2d_dense", "3d_dense"])]["speedup"])
    out.append(("dense (G=1) geomean speedup", value, 0.8))
    big = table[table["bound_us"] >= BOUND_FLOOR_US]
    out.append(("median fraction of roofline, bound >= 20 us", big["fraction_of_roofline"].median()
                if len(big) else float("nan"), 0.5))
    return [(name, value, threshold, "met" if value >= threshold else ("no data" if math.isnan(value) else "missed"))
            for name, value, threshold in out]


def losses(table: pd.DataFrame) -> pd.DataFrame:
    """The problem-directions where cuDNN is faster than the best kernel (speedup < 1), lowest speedup first;
    those without a cuDNN time are left out."""
    return table[table["speedup"] < 1].sort_values(["speedup", "problem_key"])


def plot(table: pd.DataFrame, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = sorted(table["problem_class"].unique())
    directions = ["fwd", "bwd_data", "bwd_weight"]
    figure, axes = plt.subplots(1, 2, figsize=(15, 5.5))
    width = 0.27
    x = np.arange(len(classes))
    for i, direction in enumerate(directions):
        sub = table[table["direction"] == direction]
        speed = [geomean(sub[sub["problem_class"] == c]["speedup"]) for c in classes]
        frac = [sub[(sub["problem_class"] == c)]["fraction_of_roofline"].median() for c in classes]
        axes[0].bar(x + (i - 1) * width, speed, width, label=direction)
        axes[1].bar(x + (i - 1) * width, frac, width, label=direction)
    axes[0].set_yscale("log")
    axes[0].axhline(1.0, color="black", linewidth=0.8)
    axes[0].set_ylabel("geomean speedup over cuDNN (log)")
    axes[1].set_ylabel("median fraction of roofline (best kernel)")
    for axis in axes:
        axis.set_xticks(x)
        axis.set_xticklabels(classes, rotation=30, ha="right")
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def write_report(rows: pd.DataFrame, manifests: list[dict], out: Path, title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    table = per_problem(rows)
    classes = per_class(table)
    table.to_csv(out / "per_problem.csv", index=False, float_format="%.4g")
    classes.to_csv(out / "per_class.csv", index=False, float_format="%.4g")
    plot(table, out / "speedup_roofline.png", title)
    manifest = manifests[0]
    lines = [f"# {title}", "",
             f"GPU: **{manifest['gpu_name']}** ({manifest['gpu_sms']} SMs), driver {manifest['driver']}, "
             f"CUDA {manifest['cuda']}, torch {manifest['torch']}, cuDNN {manifest['cudnn']}, "
             f"Triton {manifest['triton']}; rule set `{manifest['rule_set']}`; git {manifest['git_commit'][:12]}; "
             f"{manifest['date']}.", "",
             f"Ceilings measured in the same run: {manifest['ceilings']['matmul_tflops']:.0f} TFLOP/s bf16 matmul, "
             f"{manifest['ceilings']['copy_gbs']:.0f} GB/s copy, {manifest['ceilings']['fma_tflops']:.1f} TFLOP/s "
             "fp32 FMA (direct kernels' own bound; packed half-precision FMA would double it).", "",
             "Times: " + manifest["timing"]["graph_us"] + ", the same for our kernels and cuDNN (cuDNN through "
             "PyTorch, `cudnn.benchmark=True`, channels-last, same dtype; asymmetric padding costs cuDNN an explicit "
             "`F.pad`). Roofline = max(FLOPs / matmul rate, bytes / copy bandwidth). Inputs: "
             + manifest["timing"]["inputs"] + ".", "",
             f"{rows['problem_key'].nunique()} problem-directions, {len(rows)} measurements "
             f"({int((rows['status'] == 'wrong').sum())} wrong, "
             f"{int(rows['status'].isin(['error', 'crash', 'timeout']).sum())} failed, "
             f"{int((rows['status'] == 'pruned').sum())} pruned).", "",
             "## Targets", "", "| target | measured | threshold | verdict |", "|---|---|---|---|"]
    for name, value, threshold, verdict in targets(table):
        lines.append(f"| {name} | {value:.3g} | {threshold:g} | {verdict} |")
    lines += ["", "## Per class", "", "| class | direction | problems | geomean speedup | min | max | "
              "median fraction of roofline (bound ≥ 20 µs) | cuDNN's |", "|---|---|---|---|---|---|---|---|"]
    for _, r in classes.iterrows():
        lines.append(f"| {r.problem_class} | {r.direction} | {r.problems} | {r.geomean_speedup:.2f} | "
                     f"{r.min_speedup:.2f} | {r.max_speedup:.2f} | {r.median_fraction_of_roofline_ge_20us:.2f} "
                     f"({r.problems_bound_ge_20us}) | {r.cudnn_median_fraction_ge_20us:.2f} |")
    lines += ["", "![speedup and fraction of roofline](speedup_roofline.png)"]
    lost = losses(table)
    timed = int(table["speedup"].notna().sum())
    lines += ["", "## Where cuDNN is faster", ""]
    if lost.empty:
        lines.append(f"Nowhere: on all {timed} problem-directions with a cuDNN time the best kernel is as fast or "
                     "faster.")
    else:
        slow = int((lost["cudnn_us"] >= BOUND_FLOOR_US).sum())
        lines += [f"{len(lost)} of {timed} problem-directions with a cuDNN time ({slow} of them where cuDNN takes "
                  f"≥ {BOUND_FLOOR_US:g} µs), lowest speedup first:", "",
                  "| problem | dir | class | best kernel | µs | cuDNN µs | speedup | fraction of roofline |",
                  "|---|---|---|---|---|---|---|---|"]
        for _, r in lost.iterrows():
            key = r.problem_key.split("|", 2)[2]
            lines.append(f"| `{key}` | {r.direction} | {r.problem_class} | `{r.best_kernel}` | {r.best_us:.1f} | "
                         f"{r.cudnn_us:.1f} | {r.speedup:.2f} | {r.fraction_of_roofline:.2f} |")
    lines += ["", "## Per problem", "",
              "| problem | dir | class | best kernel | µs | cuDNN µs | speedup | fraction of roofline | cuDNN's |",
              "|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.sort_values(["problem_class", "problem_key"]).iterrows():
        key = r.problem_key.split("|", 2)[2]
        lines.append(f"| `{key}` | {r.direction} | {r.problem_class} | `{r.best_kernel}` | {r.best_us:.1f} | "
                     f"{r.cudnn_us:.1f} | {r.speedup:.2f} | {r.fraction_of_roofline:.2f} | "
                     f"{r.cudnn_fraction_of_roofline:.2f} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="tiledispatch vs cuDNN")
    args = parser.parse_args()
    rows, manifests = load(args.runs)
    write_report(rows, manifests, args.out, args.title)
    print(f"report: {args.out / 'report.md'}")


if __name__ == "__main__":
    main()
