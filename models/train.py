"""Train one LightGBM model (one arch, dtype, direction) from measured data (DESIGN §7).

Target: ``log(µs)`` of each (problem, kernel) row (CUDA-graph device time). Rows are features from
:mod:`models.features`. Cross-validation is GroupKFold over the **whole problem key** (every field
of the problem: no problem is in two folds; ``--group-by shape`` groups all batch sizes of one
convolution instead): fold of a group = rank of ``sha256(seed|group)`` mod k. Each fold trains
with early stopping on its held-out fold; the out-of-fold predictions give the selection metrics
(efficiency, top-1, top-5) recorded in the manifest; the final model is trained on every row for
the mean best iteration count of the folds (at most ``max_trees``; the ranker's at most ``ranker_max_trees`` when
set).

Deterministic: fixed seeds, ``deterministic=True``, ``force_col_wise``, one thread, no bagging, rows
in a fixed order (problems sorted by key, kernels by name) — the same data gives the same
``model.txt`` byte for byte. Several ``--data`` folders (e.g. two sessions' measurements of the same
lists) are one data set, read by ``models.dataset.read_rows``: a problem found in two of them is
refused, and their order does not matter; the manifest lists each folder with its problems and rows.

Ranker (``--objective lambdarank``, artifact format 2): besides the regressor, a LightGBM
LambdaRank model orders the candidates of a problem (query group = one problem, its rows in the
matrix order). Its relevance labels are graded from the measured times: for row ``r`` of problem
``p`` with time ``t_r`` and ``t*_p`` the problem's fastest fully timed kernel,

    e_r = min(1, t*_p / t_r)               (the efficiency of picking r)
    grade_r = round(G · e_r)               (G = ``rank_grades``, 100: grades are efficiency in %)
    gain(grade) = (grade / G) ** q         (q = ``rank_gain_power``, 2; LightGBM ``label_gain``)

so NDCG@1 of a problem is ``e(pick)^q`` quantised to 1/G: early stopping on NDCG@``rank_eval_at``
(1) stops on the mean squared efficiency of the top pick, the quantity selection is judged by.
Pruned rows (event estimates, ≥ 1.5× the best so far) grade by their estimate, clipped at 1. The
grading (G, q, NDCG@1) was chosen on the training rows only, by out-of-fold efficiency averaged over
four fold seeds (fwd and bwd_data; never on the validation problems). The ranker is cross-validated
like the regressor (same folds, its own early stopping; its out-of-fold picks are the highest
score) and refitted on every row for its folds' mean best iteration. The regressor keeps
predicting µs (what the service reports); the ranker's score only orders (higher = faster).

Artifacts: ``<out>/<name>/<version>/model.txt`` (regressor), ``ranker.txt`` (format 2 only),
``feature_spec.json`` (artifact format, ordered feature names, target transform, schema version,
arch/dtype/direction, the ranker's grading), ``train_manifest.json`` (data hash, rows, problems,
the kernel ``families`` of the training rows — the predictor ranks no other family with the
model —, where/when the data was measured, date, git commit, parameters, CV metrics of each model,
the command that rebuilds every model file byte for byte).

Features: the engine's newest schema (``features.SCHEMA_VERSION``, 4: the halo walk's geometry; 3: dwroll's one-hot and
geometry) unless ``--feature-set`` names an older one; the manifest's command pins the schema used.

CLI::

    python -m tiledispatch.models.train --data DIR [DIR ...] --direction fwd --dtype bf16 \\
        --out models/artifacts [--version 1] [--exclude models/data/problems/validation_fwd.json] \\
        [--objective lambdarank]
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
from tiledispatch.models.dataset import (
    ProblemRows,
    data_hash,
    manifest_summary,
    problem_rows,
    read_rows,
)
from tiledispatch.models.features import FEATURE_SETS, FeatureEngine
from tiledispatch.models.predictor import RANKER_FILE, REGRESSOR_FILE
from tiledispatch.native.arch import get_arch
from tiledispatch.native.problem import Direction, DType
from tiledispatch.native.rules import RULE_SETS, rule_set_names

TARGET = "log_us"

#: ``--objective``: what an artifact holds. ``regression``: the regressor only (artifact format 1);
#: ``lambdarank``: the regressor and a LambdaRank ranker that orders the candidates (format 2).
OBJECTIVES = {"regression": 1, "lambdarank": 2}


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
    # With include_pruned: keep a problem's pruned rows only where its fastest timed kernel's device time is at least
    # this share of its event time (dataset.problem_rows); 0 keeps them all.
    pruned_min_device_share: float = 0.0
    objective: str = "regression"  # a key of OBJECTIVES; "lambdarank" adds the ranker
    rank_grades: int = 100      # G: grade = round(G · t*/t)
    rank_gain_power: float = 2.0  # q: gain(grade) = (grade / G) ** q
    rank_eval_at: int = 1       # early stopping of the ranker on NDCG@k
    # The ranker's cap on trees, below which its folds' early stopping chooses (0: max_trees, the regressor's cap).
    ranker_max_trees: int = 0

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective: {self.objective!r} is not one of {sorted(OBJECTIVES)}")
        if not 0.0 <= self.pruned_min_device_share <= 1.0:
            raise ValueError(f"pruned_min_device_share: a share of the event time in [0, 1], "
                             f"got {self.pruned_min_device_share}")
        if self.rank_grades < 1:
            raise ValueError(f"rank_grades: must be >= 1 (grade = round(rank_grades · t*/t)), got {self.rank_grades}")
        if not self.rank_gain_power > 0:
            raise ValueError(f"rank_gain_power: must be > 0 (gains must grow with the grade), "
                             f"got {self.rank_gain_power}")
        if self.rank_eval_at < 1:
            raise ValueError(f"rank_eval_at: must be >= 1 (NDCG@k of the held-out fold), got {self.rank_eval_at}")
        if self.ranker_max_trees < 0:
            raise ValueError(f"ranker_max_trees: must be >= 0 (0: max_trees), got {self.ranker_max_trees}")

    @property
    def artifact_format(self) -> int:
        return OBJECTIVES[self.objective]

    def tree_cap(self, ranker: bool) -> int:
        """Boosting rounds a model's folds may run: ``max_trees``, or the ranker's own cap when set."""
        return (self.ranker_max_trees or self.max_trees) if ranker else self.max_trees

    def label_gain(self) -> list[float]:
        """LightGBM ``label_gain``: gain of grade ``g`` is ``(g / G) ** q``."""
        return [(g / self.rank_grades) ** self.rank_gain_power for g in range(self.rank_grades + 1)]

    def ranker_params(self) -> dict[str, Any]:
        """The regressor's tree settings with the LambdaRank objective and the graded gains."""
        return {**self.lgb_params(), "objective": "lambdarank", "metric": "ndcg", "eval_at": [self.rank_eval_at],
                "label_gain": self.label_gain()}

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


def relevance(m: Matrix, grades: int) -> np.ndarray:
    """Per row: ``round(grades · min(1, t*_p / t_r))`` (int64), ``t*_p`` the fastest fully timed
    kernel of the row's problem — ``grades`` for the measured best, 0 for a kernel ``2·grades``
    times slower."""
    out = np.empty(len(m.y), dtype=np.int64)
    for i, pr in enumerate(m.problems):
        efficiency = np.minimum(1.0, pr.oracle_us / pr.time_us)
        out[m.offsets[i]:m.offsets[i + 1]] = np.rint(grades * efficiency).astype(np.int64)
    return out


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


def _dataset(m: Matrix, rows: np.ndarray, problems: np.ndarray, labels: np.ndarray, ranker: bool, **kwargs) -> Any:
    """The LightGBM dataset of the selected rows; a ranker's query groups are their problems (rows
    of one problem are contiguous in the matrix, so the group sizes follow in problem order)."""
    import lightgbm as lgb

    group = np.diff(m.offsets)[problems] if ranker else None
    return lgb.Dataset(m.x[rows], labels[rows], group=group, **kwargs)


def cross_validate(m: Matrix, settings: TrainSettings, names: Sequence[str], *,
                   ranker: bool = False) -> tuple[dict[str, Any], int]:
    """Out-of-fold selection metrics and the mean best iteration, of the regressor (pick = lowest
    predicted µs) or of the ranker (``ranker``: pick = highest score)."""
    import lightgbm as lgb

    groups = [group_of(pr, settings.group_by) for pr in m.problems]
    fold = group_folds(groups, settings.folds, settings.seed)
    labels = relevance(m, settings.rank_grades) if ranker else m.y
    params = settings.ranker_params() if ranker else settings.lgb_params()
    oof = np.full(len(m.y), np.nan)
    cap = settings.tree_cap(ranker)
    best: list[int] = []
    for k in range(settings.folds):
        test_problems = fold == k
        test_rows = _rows(m, test_problems)
        if not test_rows.any() or test_rows.all():
            continue
        train_set = _dataset(m, ~test_rows, ~test_problems, labels, ranker, feature_name=list(names),
                             free_raw_data=True)
        valid_set = _dataset(m, test_rows, test_problems, labels, ranker, reference=train_set)
        booster = lgb.train(params, train_set, num_boost_round=cap, valid_sets=[valid_set],
                            callbacks=[lgb.early_stopping(settings.early_stopping, verbose=False)])
        best.append(booster.best_iteration or cap)
        oof[test_rows] = booster.predict(m.x[test_rows], num_iteration=booster.best_iteration)
    # The selector picks the lowest predicted time; a ranker's best is its highest score.
    picks = selection_picks(m, -oof if ranker else oof)
    classes = [pr.problem.class_label for pr in m.problems]
    report: dict[str, Any] = {"folds": settings.folds, "group_by": settings.group_by, "best_iterations": best}
    if ranker:
        report["early_stopping_metric"] = f"ndcg@{settings.rank_eval_at}"
    else:
        report["oof_rmse_log_us"] = float(np.sqrt(np.mean((oof - m.y) ** 2)))
    report.update({"overall": metrics.summarize(picks), "by_class": metrics.by_label(classes, picks)})
    return report, int(round(np.mean(best))) if best else cap


def fit(m: Matrix, settings: TrainSettings, names: Sequence[str], trees: int, *, ranker: bool = False) -> Any:
    """The final model on every row: the regressor (target log µs), or the ranker (``ranker``)."""
    import lightgbm as lgb

    labels = relevance(m, settings.rank_grades) if ranker else m.y
    train_set = lgb.Dataset(m.x, labels, group=np.diff(m.offsets) if ranker else None, feature_name=list(names),
                            free_raw_data=True)
    return lgb.train(settings.ranker_params() if ranker else settings.lgb_params(), train_set,
                     num_boost_round=trees)


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
                   feature_set: int | None = None, exclude: Sequence[Path] = (), rule_set: str | None = None,
                   also_dtypes: Sequence[DType] = (), log=print) -> Path:
    """Train and write one artifact folder; returns it. ``feature_set`` trains on an older schema's
    feature names (``features.FEATURE_SETS``), e.g. for the version-awareness fixture; ``rule_set``
    trains on that rule set's kernels only (``dataset.problem_rows(kernels=...)``); ``also_dtypes``
    adds those dtypes' problems to the training rows of a ``dtype`` model (the features see a kernel's
    tile, not its dtype, and bf16 and fp16 share the tensor-core and memory rates: an fp16 model can
    learn from bf16 measurements of the same kernels' twins)."""
    frame, manifests = read_rows(data_dirs)
    kernels = rule_set_names(rule_set, arch) if rule_set else None
    problems = [pr for d in (dtype, *[x for x in also_dtypes if x is not dtype])
                for pr in problem_rows(frame, direction=direction.value, dtype=d.value,
                                       include_pruned=settings.include_pruned, kernels=kernels,
                                       pruned_min_device_share=settings.pruned_min_device_share)]
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
    ranker = ranker_cv = None
    if settings.objective == "lambdarank":
        ranker_cv, ranker_trees = cross_validate(m, settings, names, ranker=True)
        ranker = fit(m, settings, names, ranker_trees, ranker=True)
    name = name or model_name(arch, dtype, direction)
    folder = Path(out) / name / version
    # Written in full outside the <name>/<version> pattern the model store globs, then swapped in.
    staging = Path(out) / f".staging-{os.getpid()}" / name / version
    shutil.rmtree(staging.parents[1], ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / REGRESSOR_FILE).write_text(booster.model_to_string())
    if ranker is not None:
        (staging / RANKER_FILE).write_text(ranker.model_to_string())
    import lightgbm

    spec = {"name": name, "version": version, "kind": "trained", "artifact_format": settings.artifact_format,
            "schema_version": schema, "feature_names": names, "target": TARGET,
            "target_transform": "predicted_us = exp(raw score)", "arch": get_arch(arch).arch,
            "device": get_arch(arch).name, "dtype": dtype.value, "direction": direction.value,
            "lightgbm": lightgbm.__version__, "num_trees": booster.num_trees()}
    if ranker is not None:
        spec["ranker"] = ranker_spec(settings, ranker.num_trees())
    (staging / "feature_spec.json").write_text(json.dumps(spec, indent=2) + "\n")
    manifest = {"name": name, "version": version, "data_hash": data_hash(problems), "rows": int(len(m.y)),
                "problems": len(problems), "timed_rows": int(sum(pr.timed.sum() for pr in problems)),
                "families": sorted({c.family.value for pr in problems for c in pr.configs}),
                # as the model's dtype names them (rows of also_dtypes train it too)
                "kernels": sorted({dataclasses.replace(c, dtype=dtype).name for pr in problems for c in pr.configs}),
                **manifest_summary(manifests), "direction": direction.value, "dtype": dtype.value,
                "arch": get_arch(arch).arch, "excluded_shapes_from": [str(p) for p in exclude],
                **({"kernels_of_rule_set": rule_set} if rule_set else {}),
                **({"also_dtypes": [d.value for d in also_dtypes]} if also_dtypes else {}),
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git_commit": _git_commit(),
                "artifact_format": settings.artifact_format,
                "settings": dataclasses.asdict(settings), "trees": booster.num_trees(),
                "train_seconds": round(time.time() - started, 1), "cv": cv,
                **({"ranker": {"file": RANKER_FILE, "trees": ranker.num_trees(), "cv": ranker_cv}}
                   if ranker is not None else {}),
                "command": (f"python -m tiledispatch.models.train --data {' '.join(map(str, data_dirs))} "
                            f"--direction {direction.value} --dtype {dtype.value} --arch {arch} --out {out} "
                            f"--version {version}" + (f" --name {name}" if name != model_name(arch, dtype, direction)
                                                      else "")
                            + f" --feature-set {schema}"  # pinned: the engine's newest schema moves on
                            + (f" --exclude {' '.join(map(str, exclude))}" if exclude else "")
                            + (f" --rule-set {rule_set}" if rule_set else "")
                            + "".join(f" --also-dtype {d.value}" for d in also_dtypes)
                            + settings_flags(settings))}
    (staging / "train_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    _publish(staging, folder)
    log(f"train: {name}/{version}: {len(problems)} problems, {len(m.y)} rows; regressor {booster.num_trees()} "
        f"trees, CV {_cv_line(cv)}" + (f"; ranker {ranker.num_trees()} trees, CV {_cv_line(ranker_cv)}"
                                       if ranker is not None else "") + f" -> {folder}")
    return folder


def _cv_line(cv: dict[str, Any]) -> str:
    o = cv["overall"]
    return f"mean {o['mean']:.4f} p10 {o['p10']:.4f} min {o['min']:.4f} top1 {o['top1']:.3f} top5 {o['top5']:.3f}"


def ranker_spec(settings: TrainSettings, trees: int) -> dict[str, Any]:
    """What ``feature_spec.json`` says about the ranker: its file and how its labels were graded."""
    return {"file": RANKER_FILE, "objective": "lambdarank", "num_trees": trees, "query": "one problem",
            "score": "raw score; higher ranks first; orders candidates only (no unit)",
            "relevance": "grade = round(grades * min(1, t_best / t)), t_best = the problem's fastest timed kernel",
            "grades": settings.rank_grades, "label_gain": "(grade / grades) ** gain_power",
            "gain_power": settings.rank_gain_power, "early_stopping": f"ndcg@{settings.rank_eval_at}"}


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
    parser.add_argument("--rule-set", default=None, choices=RULE_SETS,
                        help="train on this rule set's kernels only (default: every kernel in the data)")
    parser.add_argument("--also-dtype", action="append", default=[],
                        help="also train on this dtype's problems (e.g. an fp16 model on fp16 and bf16 rows)")
    for f in dataclasses.fields(TrainSettings):
        flag = f"--{f.name.replace('_', '-')}"
        if isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true", default=f.default)
        else:
            # --objective lambdarank: the regressor and a ranker in one artifact (format 2).
            parser.add_argument(flag, type=type(f.default), default=f.default,
                                choices=sorted(OBJECTIVES) if f.name == "objective" else None)
    args = parser.parse_args(argv)
    try:
        settings = TrainSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainSettings)})
    except ValueError as error:
        parser.error(str(error))
    train_artifact(args.data, Direction.parse(args.direction), DType.parse(args.dtype), args.out, arch=args.arch,
                   version=args.version, name=args.name, settings=settings, feature_set=args.feature_set,
                   exclude=args.exclude, rule_set=args.rule_set,
                   also_dtypes=[DType.parse(d, "also_dtype") for d in args.also_dtype])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
