"""The issue's targets from a ``tiledispatch bench`` log alone, for a run whose parquet rows did not all come
back (e.g. a device call's file-count limit): per problem the log's best kernel and its µs, cuDNN's µs, and
the roofline bound from the ceilings the same log prints, then ``report.py``'s per-class table and targets.

    python bench/log_targets.py bench_dev.txt --out DIR   # writes DIR/per_problem.csv and DIR/targets.md

The log rounds times to 0.1 µs and does not say how many kernels were wrong; ``report.py`` over the parquet
rows is the full report whenever they exist.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import per_class, targets  # noqa: E402

from tiledispatch.native.bench import Ceilings  # noqa: E402
from tiledispatch.native.problem import ConvProblem  # noqa: E402

_PROBLEM = re.compile(r"^\[\d+/\d+\] (\S+): \d+ rows, best ([\d.]+)us \((\S+)\)")
_CUDNN = re.compile(r"^\s+cudnn ([\d.]+)us status=ok")
_CEILINGS = re.compile(r"matmul_tflops=([\d.]+), copy_gbs=([\d.]+), fma_tflops=([\d.]+)")


def parse(log: str) -> tuple[pd.DataFrame, Ceilings]:
    ceilings, rows, current = None, [], None
    for line in log.splitlines():
        if (m := _CEILINGS.search(line)) and ceilings is None:
            ceilings = Ceilings(*(float(v) for v in m.groups()))
        elif m := _PROBLEM.match(line):
            current = {"problem_key": m.group(1), "best_us": float(m.group(2)), "best_kernel": m.group(3),
                       "cudnn_us": float("nan")}
            rows.append(current)
        elif (m := _CUDNN.match(line)) and current is not None:
            current["cudnn_us"] = float(m.group(1))
    if ceilings is None:
        raise SystemExit("log_targets: the log has no ceilings line")
    for row in rows:
        problem = ConvProblem.from_key(row["problem_key"])
        row["direction"] = problem.direction.value
        row["problem_class"] = problem.class_label
        row["bound_us"] = ceilings.bound_us(problem)
    table = pd.DataFrame(rows)
    table["speedup"] = table["cudnn_us"] / table["best_us"]
    table["fraction_of_roofline"] = table["bound_us"] / table["best_us"]
    table["cudnn_fraction_of_roofline"] = table["bound_us"] / table["cudnn_us"]
    return table, ceilings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    table, ceilings = parse(args.log.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "per_problem.csv", index=False)
    lines = [f"# Targets from the log `{args.log.name}` ({len(table)} problem-directions)", "",
             f"Ceilings (the log's): {ceilings.matmul_tflops:.0f} TFLOP/s bf16 matmul, "
             f"{ceilings.copy_gbs:.0f} GB/s copy.",
             "", "| target | measured | threshold | verdict |", "|---|---|---|---|"]
    lines += [f"| {name} | {value:.3g} | {threshold:g} | {verdict} |"
              for name, value, threshold, verdict in targets(table)]
    lines += ["", "| class | direction | problems | geomean speedup | min | max |", "|---|---|---|---|---|---|"]
    for r in per_class(table).itertuples():
        lines.append(f"| {r.problem_class} | {r.direction} | {r.problems} | {r.geomean_speedup:.2f} | "
                     f"{r.min_speedup:.2f} | {r.max_speedup:.2f} |")
    lines += ["", "| problem | dir | best kernel | µs | cuDNN µs | speedup | fraction of roofline |",
              "|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        key = r.problem_key.split("|", 2)[2]
        lines.append(f"| `{key}` | {r.direction} | `{r.best_kernel}` | {r.best_us:.1f} | {r.cudnn_us:.1f} | "
                     f"{r.speedup:.2f} | {r.fraction_of_roofline:.2f} |")
    (args.out / "targets.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
