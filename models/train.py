"""Train one LightGBM model (one arch, dtype, direction) from measured data (DESIGN §7).

Target: ``log(µs)`` of each (problem, kernel) row (CUDA-graph device time). Rows are features from
:mod:`models.features`. Cross-validation is GroupKFold over the **whole problem key** (every field
of the problem: no problem is in two folds; ``--group-by shape`` groups all batch sizes of one
convolution instead): fold of a group = rank of ``sha256(seed|group)`` mod k. Each fold trains
with early stopping on its held-out fold; the out-of-fold predictions give the selection metrics
(efficiency, top-1, top-5) recorded in the manifest; the final model is trained on every row for
the mean best iteration count of the folds (at most ``max_trees``).

Deterministic: fixed seeds, ``deterministic=True``, ``force_col_wise``, one thread, no bagging, rows
in a fixed order (problems sorted by key, kernels by name) — the same data gives the same
``model.txt`` byte for byte.

Artifacts: ``<out>/<name>/<version>/model.txt``, ``feature_spec.json`` (ordered feature names,
target transform, schema version, arch/dtype/direction), ``train_manifest.json`` (data hash, rows,
problems, where/when the data was measured, date, git commit, parameters, CV metrics).

CLI::

    python -m tiledispatch.models.train --data DIR [DIR ...] --direction fwd --dtype bf16 \\
        --out models/artifacts [--version 1] [--exclude models/data/problems/validation_fwd.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tiledispatch.models import metrics
from tiledispatch.models.dataset import ProblemRows, data_hash, manifest_summary, problem_rows, read_rows
from tiledispatch.models.features import FEATURE_SETS, FeatureEngine
from tiledispatch.native.arch import get_arch
from tiledispatch.native.problem import Direction, DType

TARGET = "log_us"


@dataclass(frozen=True)
class TrainSettings:
    num_leaves: int = 31
    max_trees: int = 200
    learning_rate: float = 0.1
    max_depth: int = 8
    min_data_in_leaf: int = 20
    lambda_l2: float = 1.0
    feature_fraction: float = 1.0
    max_bin: int = 255
    folds: int = 5
    early_stopping: int = 30
    seed: int = 20261122
    num_threads: int = 1
    group_by: str = "key"  # "key" (whole problem tuple) or "shape" (all batches of a convolution)
    include_pruned: bool = False

    def lgb_params(self) -> dict[str, Any]:
        return {"objective": "regression", "metric": "l2", "num_leaves": self.num_leaves,
                "learning_rate": self.learning_rate, "max_depth": self.max_depth,
                "min_data_in_leaf": self.min_data_in_leaf, "lambda_l2": self.lambda_l2,
                "feature_fraction": self.feature_fraction, "feature_fraction_seed": self.seed,
                "max_bin": self.max_bin, "seed": self.seed, "bagging_seed": self.seed,
                "data_random_seed": self.seed, "deterministic": True, "force_col_wise": True,
                "num_threads": self.num_threads, "verbosity": -1}


@dataclass
class Matrix:
    x: np.ndarray            # rows × features
    y: np.ndarray            # log µs
    offsets: np.ndarray      # problem i owns rows offsets[i]:offsets[i+1]
    problems: list[ProblemRows]


def build_matrix(problems: Sequence[ProblemRows], engine: FeatureEngine) -> Matrix:
    blocks = [engine.build(pr.problem, pr.configs) for pr in problems]
    sizes = [len(pr.configs) for pr in problems]
    x = np.concatenate(blocks) if blocks else np.empty((0, len(engine.names)))
    if not np.isfinite(x).all():
        raise ValueError("feature engine produced non-finite values")
    y = np.log(np.concatenate([pr.time_us for pr in problems])) if problems else np.empty(0)
    return Matrix(x=x, y=y, offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                  problems=list(problems))


def group_of(pr: ProblemRows, group_by: str) -> str:
    if group_by == "shape":
        return "|".join(part for part in pr.problem.shape_key.split("|") if not part.startswith("n"))
    return pr.problem.key


def group_folds(groups: Sequence[str], folds: int, seed: int) -> np.ndarray:
    """Fold per problem: distinct groups ranked by ``sha256(seed|group)``, dealt round-robin."""
    distinct = sorted(set(groups), key=lambda g: (hashlib.sha256(f"{seed}|{g}".encode()).hexdigest(), g))
    fold_of = {g: i % folds for i, g in enumerate(distinct)}
    return np.array([fold_of[g] for g in groups], dtype=np.int64)


def _rows(m: Matrix, problem_mask: np.ndarray) -> np.ndarray:
    sizes = np.diff(m.offsets)
    return np.repeat(problem_mask, sizes)


def selection_picks(m: Matrix, predicted: np.ndarray) -> list[metrics.Pick]:
    picks = []
    for i, pr in enumerate(m.problems):
        a, b = m.offsets[i], m.offsets[i + 1]
        picks.append(metrics.pick_from_scores(pr.time_us, pr.timed, predicted[a:b]))
    return picks


def cross_validate(m: Matrix, settings: TrainSettings, names: Sequence[str]) -> tuple[dict[str, Any], int]:
    """Out-of-fold selection metrics and the mean best iteration."""
    import lightgbm as lgb

    groups = [group_of(pr, settings.group_by) for pr in m.problems]
    fold = group_folds(groups, settings.folds, settings.seed)
    oof = np.full(len(m.y), np.nan)
    best: list[int] = []
    for k in range(settings.folds):
        test_rows = _rows(m, fold == k)
        if not test_rows.any() or test_rows.all():
            continue
        train_set = lgb.Dataset(m.x[~test_rows], m.y[~test_rows], feature_name=list(names), free_raw_data=True)
        valid_set = lgb.Dataset(m.x[test_rows], m.y[test_rows], reference=train_set)
        booster = lgb.train(settings.lgb_params(), train_set, num_boost_round=settings.max_trees,
                            valid_sets=[valid_set],
                            callbacks=[lgb.early_stopping(settings.early_stopping, verbose=False)])
        best.append(booster.best_iteration or settings.max_trees)
        oof[test_rows] = booster.predict(m.x[test_rows], num_iteration=booster.best_iteration)
    picks = selection_picks(m, oof)
    labels = [pr.problem.class_label for pr in m.problems]
    rmse = float(np.sqrt(np.mean((oof - m.y) ** 2)))
    report = {"folds": settings.folds, "group_by": settings.group_by, "best_iterations": best,
              "oof_rmse_log_us": rmse, "overall": metrics.summarize(picks), "by_class": metrics.by_label(labels, picks)}
    return report, int(round(np.mean(best))) if best else settings.max_trees


def fit(m: Matrix, settings: TrainSettings, names: Sequence[str], trees: int) -> Any:
    import lightgbm as lgb

    train_set = lgb.Dataset(m.x, m.y, feature_name=list(names), free_raw_data=True)
    return lgb.train(settings.lgb_params(), train_set, num_boost_round=trees)


def model_name(arch: str, dtype: DType, direction: Direction) -> str:
    return f"lgbm-{get_arch(arch).arch}-{dtype.value}-{direction.value}"


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or "unknown"


def settings_flags(settings: TrainSettings) -> str:
    """The CLI flags that reproduce ``settings`` (those that differ from the defaults)."""
    default = TrainSettings()
    out = ""
    for f in dataclasses.fields(TrainSettings):
        value = getattr(settings, f.name)
        if value != getattr(default, f.name):
            flag = f"--{f.name.replace('_', '-')}"
            out += f" {flag}" if isinstance(value, bool) else f" {flag} {value}"
    return out


def exclude_shapes(paths: Sequence[Path]) -> set[str]:
    """Shapes (convolution without batch, direction, dtype) of the problem files given."""
    from tiledispatch.models.dataset_plan import shape_of
    from tiledispatch.native.problem import ConvProblem

    shapes: set[str] = set()
    for path in paths:
        document = json.loads(Path(path).read_text())
        entries = document["problems"] if isinstance(document, dict) else document
        shapes.update(shape_of(ConvProblem.from_dict(e)) for e in entries)
    return shapes


def train_artifact(data_dirs: Sequence[Path], direction: Direction, dtype: DType, out: Path, *,
                   arch: str = "sm_90", version: str = "1", name: str = "", settings: TrainSettings = TrainSettings(),
                   feature_set: int | None = None, exclude: Sequence[Path] = (), log=print) -> Path:
    """Train and write one artifact folder; returns it. ``feature_set`` trains on an older schema's
    feature names (``features.FEATURE_SETS``), e.g. for the version-awareness fixture."""
    frame, manifests = read_rows(data_dirs)
    problems = problem_rows(frame, direction=direction.value, dtype=dtype.value,
                            include_pruned=settings.include_pruned)
    excluded = exclude_shapes(exclude) if exclude else set()
    if excluded:
        from tiledispatch.models.dataset_plan import shape_of
        before = len(problems)
        problems = [pr for pr in problems if shape_of(pr.problem) not in excluded]
        log(f"train: excluded {before - len(problems)} problems whose shape is in {[str(p) for p in exclude]}")
    if len(problems) < settings.folds:
        raise ValueError(f"train: only {len(problems)} {direction.value}/{dtype.value} problems in {data_dirs}")
    engine = FeatureEngine(arch)
    schema = engine.schema_version if feature_set is None else feature_set
    names = list(FEATURE_SETS[schema])
    m = build_matrix(problems, engine)
    m.x = m.x[:, [engine.index[n] for n in names]]
    started = time.time()
    cv, trees = cross_validate(m, settings, names)
    booster = fit(m, settings, names, trees)
    name = name or model_name(arch, dtype, direction)
    folder = Path(out) / name / version
    # Written in full outside the <name>/<version> pattern the model store globs, then swapped in.
    staging = Path(out) / f".staging-{os.getpid()}" / name / version
    shutil.rmtree(staging.parents[1], ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "model.txt").write_text(booster.model_to_string())
    import lightgbm

    spec = {"name": name, "version": version, "kind": "trained", "schema_version": schema,
            "feature_names": names, "target": TARGET, "target_transform": "predicted_us = exp(raw score)",
            "arch": get_arch(arch).arch, "device": get_arch(arch).name, "dtype": dtype.value,
            "direction": direction.value, "lightgbm": lightgbm.__version__, "num_trees": booster.num_trees()}
    (staging / "feature_spec.json").write_text(json.dumps(spec, indent=2) + "\n")
    manifest = {"name": name, "version": version, "data_hash": data_hash(problems), "rows": int(len(m.y)),
                "problems": len(problems), "timed_rows": int(sum(pr.timed.sum() for pr in problems)),
                **manifest_summary(manifests), "direction": direction.value, "dtype": dtype.value,
                "arch": get_arch(arch).arch, "excluded_shapes_from": [str(p) for p in exclude],
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git_commit": _git_commit(),
                "settings": dataclasses.asdict(settings), "trees": booster.num_trees(),
                "train_seconds": round(time.time() - started, 1), "cv": cv,
                "command": (f"python -m tiledispatch.models.train --data {' '.join(map(str, data_dirs))} "
                            f"--direction {direction.value} --dtype {dtype.value} --arch {arch} --out {out} "
                            f"--version {version}" + (f" --name {name}" if name != model_name(arch, dtype, direction)
                                                      else "")
                            + (f" --feature-set {feature_set}" if feature_set is not None else "")
                            + (f" --exclude {' '.join(map(str, exclude))}" if exclude else "")
                            + settings_flags(settings))}
    (staging / "train_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    _publish(staging, folder)
    o = cv["overall"]
    log(f"train: {name}/{version}: {len(problems)} problems, {len(m.y)} rows, {booster.num_trees()} trees; "
        f"CV mean {o['mean']:.4f} p10 {o['p10']:.4f} min {o['min']:.4f} top1 {o['top1']:.3f} top5 {o['top5']:.3f}"
        f" -> {folder}")
    return folder


def _publish(staging: Path, folder: Path) -> None:
    """Make the fully written ``staging`` folder the artifact: a reader (the server's model store)
    sees the old artifact or the new one (between two renames, for an instant, neither), never a
    mix of their files or a half-written one."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    if folder.exists():
        retired = staging.with_name(f"{staging.name}.retired")
        os.replace(folder, retired)
        os.replace(staging, folder)
    else:
        os.replace(staging, folder)
    shutil.rmtree(staging.parents[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train one model from measured bench data.")
    parser.add_argument("--data", type=Path, nargs="+", required=True, help="bench output directories")
    parser.add_argument("--direction", required=True)
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--out", type=Path, default=Path("models/artifacts"))
    parser.add_argument("--version", default="1")
    parser.add_argument("--name", default="")
    parser.add_argument("--feature-set", type=int, choices=sorted(FEATURE_SETS), default=None,
                        help="train on an older schema's features (default: the engine's newest)")
    parser.add_argument("--exclude", type=Path, nargs="*", default=[],
                        help="problem files (validation lists) whose shapes must never be trained on")
    for f in dataclasses.fields(TrainSettings):
        flag = f"--{f.name.replace('_', '-')}"
        if isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true", default=f.default)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default)
    args = parser.parse_args(argv)
    settings = TrainSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainSettings)})
    train_artifact(args.data, Direction.parse(args.direction), DType.parse(args.dtype), args.out, arch=args.arch,
                   version=args.version, name=args.name, settings=settings, feature_set=args.feature_set,
                   exclude=args.exclude)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
