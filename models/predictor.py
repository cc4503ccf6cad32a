"""Version-aware loading of trained models (DESIGN §7) — the hook ``server/predictors.py`` calls.

``load(folder)`` reads ``<models-dir>/<name>/<version>/``:

* ``feature_spec.json``: ordered ``feature_names`` the model was trained on, ``target`` (``log_us``),
  ``schema_version``, ``arch``/``device``, ``dtype``, ``direction``, ``name``, ``version``;
* ``model.txt``: the LightGBM regressor (its own feature names must equal the spec's);
* ``ranker.txt`` (``artifact_format`` 2 only): a LightGBM LambdaRank ranker on the same features.

Artifact formats (``artifact_format`` in ``feature_spec.json``; absent means 1): **1** the
regressor alone, which both predicts and orders (ascending predicted µs); **2** the regressor and
a ranker: the regressor still predicts the µs the service reports, the ranker's scores order the
candidates (descending score; ``models/train.py`` says how its relevance labels are graded). A
format-2 folder whose ``ranker.txt`` is missing, unreadable or not a ranking model is refused
with :class:`ModelLoadError` naming that file; a format this loader does not know is refused too.

The model's features are located in the current engine's row **by name** (an index map), so a
model trained on an older, smaller feature set keeps loading after the engine has grown. A model
naming a feature the engine no longer makes is refused with :class:`ModelLoadError` naming the
missing features. Models are chosen by (arch, dtype, direction, version): :meth:`covers` answers
for the spec's compute target (``sm_90``) or device (``h200``), dtype and direction; the server
picks the newest version among the covering ones (``server/predictors.py::ModelStore.choose``).

Inference: features for all candidates at once (``FeatureEngine.build``), the model's columns
taken by the index map, then the trees evaluated together in numpy (:mod:`models.forest`,
identical to ``Booster.predict`` for finite inputs): ``predicted_us = exp(raw score)``.
:meth:`TrainedPredictor.rank` (and :func:`rank` for any predictor) returns the order and the µs
from one feature matrix: ranker and regressor share it.

Unseen families: a trained model ranks only candidates of the kernel families it saw in training
(:attr:`TrainedPredictor.seen_families`); its score for any other family is an extrapolation from
rows that never had that family's one-hot set (a schema-1/2 model sees a dwroll row as a
one-hot-less CUDA-core kernel), so those candidates are left out of its :class:`Ranking` (listed in
``Ranking.unranked``) and never reach Select or the PyTorch integration through it. The seen
families are the artifact's own record when it has one (``families`` in ``train_manifest.json``,
the families of the training rows, written by ``models/train.py`` since schema 3), else the
families whose one-hot ``k_<family>`` is among the model's features (every shipped schema-1/2
model: igemm, gmerge, gemm1x1, direct — exactly the families of their training rows; ``tma`` has
no one-hot, ``dwroll`` has one from schema 3). Unseen kernels likewise: a model whose manifest lists
the ``kernels`` of its training rows (``models/train.py`` since session 8) ranks only those; one without
that record ranks no forward / backward-data split-K kernel and no channel-padded one (neither existed when it was
trained). A kernel
added to the rule set after training is a config value the model never saw (measured on the H200:
the bf16 backward-weight model ranked untried ``num_stages`` 3 dwroll tiles first, 1.4x slower than its
own pick among the kernels it knew); it waits for the tuning database or the next training. When no
candidate is seen, all are ranked (as before these rules): a ranking is never empty while there are
candidates. The analytic model is
a formula that costs every family (dwroll by the direct view) and ranks every candidate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tiledispatch.models import analytic
from tiledispatch.models.features import (
    LAUNCH_NAMES,
    ONE_HOT_FAMILIES,
    SCHEMA_VERSION,
    ConfigTable,
    FeatureEngine,
    table_of,
)
from tiledispatch.models.forest import Forest, ForestError
from tiledispatch.native.arch import get_arch
from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType

SUPPORTED_TARGETS = ("log_us",)
REGRESSOR_FILE = "model.txt"
RANKER_FILE = "ranker.txt"
#: ``artifact_format`` → the model files a folder of that format holds.
ARTIFACT_FORMATS: dict[int, tuple[str, ...]] = {1: (REGRESSOR_FILE,), 2: (REGRESSOR_FILE, RANKER_FILE)}
#: LightGBM objectives whose raw score orders a query's rows (and means nothing as a time).
RANKING_OBJECTIVES = ("lambdarank", "rank_xendcg")


class ModelLoadError(ValueError):
    """A model folder cannot be served; the message says which file and why."""


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: missing") from None
    except json.JSONDecodeError as error:
        raise ModelLoadError(f"{path}: not valid JSON ({error})") from None


def _header_field(model_text: str, key: str, file: Path) -> str:
    """A ``key=value`` line of a LightGBM model text's header (before the first tree)."""
    for line in model_text.splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1]
        if line.startswith("Tree="):
            break
    raise ModelLoadError(f"{file}: no {key} line (not a LightGBM model text file?)")


def _check_tree_section(text: str, file: Path) -> None:
    """LightGBM aborts the whole process (no Python exception) on a tree section cut short, so a
    damaged file is refused before it reaches the library: the header's ``tree_sizes`` (bytes of
    each ``Tree=i`` block) must add up to the bytes from the first block to ``end of trees``."""
    try:
        total = sum(int(size) for size in _header_field(text, "tree_sizes", file).split())
    except ValueError:
        raise ModelLoadError(f"{file}: tree_sizes is not a list of byte counts") from None
    data = text.encode()
    end = data.find(b"\nend of trees\n")
    start = data.find(b"\nTree=0\n") if total else end
    if end < 0 or start < 0 or end - start != total:
        raise ModelLoadError(f"{file}: damaged or truncated: its tree blocks do not add up to the {total} bytes its "
                             "tree_sizes line lists before 'end of trees'")


def _load_forest(file: Path, names: Sequence[str], *, ranking: bool) -> Forest:
    """The numpy forest of one LightGBM model text file, checked against the spec: same feature
    names, and a ranking objective exactly when ``ranking`` (a ranker's score is no time, a
    regressor's no ranking score: swapped files must not load)."""
    import lightgbm as lgb

    try:
        text = file.read_text()
    except FileNotFoundError:
        raise ModelLoadError(f"{file}: missing") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ModelLoadError(f"{file}: unreadable ({error})") from None
    if _header_field(text, "feature_names", file).split() != list(names):
        raise ModelLoadError(f"{file}: its feature names differ from feature_spec.json's")
    objective = _header_field(text, "objective", file).split()[0]
    if (objective in RANKING_OBJECTIVES) != ranking:
        want = f"a ranking objective {RANKING_OBJECTIVES}" if ranking else "a regression objective"
        raise ModelLoadError(f"{file}: objective {objective!r}, expected {want}")
    _check_tree_section(text, file)
    try:
        booster = lgb.Booster(model_str=text)
        return Forest.from_dump(booster.dump_model())
    except (lgb.basic.LightGBMError, ForestError) as error:
        raise ModelLoadError(f"{file}: {error}") from None


@dataclass(frozen=True)
class Ranking:
    """One problem's candidates ranked, best first.

    ``order[i]`` is the index (into the configs given) of the i-th best candidate; ``predicted_us``
    and ``score`` follow the configs' order. ``by == "ranker"``: ``score`` is the ranker's raw score
    and ``order`` sorts it descending; ``by == "predicted_us"``: ``score = −predicted_us``, so
    ``order`` sorts the predicted times ascending. Ties keep the configs' order (a stable sort: the
    same candidates always rank the same way). ``order`` covers every config except ``unranked``
    (ascending indices of candidates the model may not rank: families it never saw, see the module
    docstring); ``unranked`` is empty unless a trained model left some out."""

    order: np.ndarray         # int64, a permutation of the ranked configs' indices (all but `unranked`)
    predicted_us: np.ndarray  # float64, per config
    score: np.ndarray         # float64, per config; higher ranks first
    by: str                   # "ranker" or "predicted_us"
    unranked: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    @classmethod
    def of(cls, predicted_us: np.ndarray, ranker_score: np.ndarray | None = None,
           ranked: np.ndarray | None = None) -> Ranking:
        """``ranked`` (bool per config, default all): the candidates ``order`` covers."""
        # argsort(−s) keeps ties in config order, as argsort(predicted_us) does.
        key = predicted_us if ranker_score is None else -ranker_score
        if ranked is None or ranked.all():
            order, unranked = np.argsort(key, kind="stable"), np.empty(0, dtype=np.int64)
        else:
            kept = np.flatnonzero(ranked)
            order, unranked = kept[np.argsort(key[kept], kind="stable")], np.flatnonzero(~ranked)
        if ranker_score is None:
            return cls(order, predicted_us, -predicted_us, "predicted_us", unranked)
        return cls(order, predicted_us, ranker_score, "ranker", unranked)


class TrainedPredictor:
    """A LightGBM model for one (arch, dtype, direction), served through the current engine."""

    kind = "trained"

    def __init__(self, folder: Path, spec: dict[str, Any], forest: Forest, engine: FeatureEngine,
                 columns: np.ndarray, manifest: dict[str, Any], ranker: Forest | None = None):
        self.folder = folder
        self.spec = spec
        self.name = str(spec["name"])
        self.version = str(spec["version"])
        self.arch = str(spec["arch"])
        self.device = str(spec.get("device", ""))
        self.dtypes = (DType.parse(spec["dtype"]),)
        self.directions = (Direction.parse(spec["direction"]),)
        self.feature_names = tuple(spec["feature_names"])
        self.feature_count = len(self.feature_names)
        self.schema_version = int(spec.get("schema_version", 0))
        self.artifact_format = int(spec.get("artifact_format", 1))
        self.forest = forest    # the regressor: log µs
        self.ranker = ranker    # format 2: orders the candidates (None: the regressor orders)
        self.engine = engine
        self.columns = columns
        # Whether any of the model's features is in the engine's launch group (costly to compute).
        self.uses_launch = bool(set(self.feature_names) & set(LAUNCH_NAMES))
        self.manifest = manifest
        self.seen_families = seen_families(self.feature_names, manifest)
        # The kernels of its training rows (``kernels`` of train_manifest.json, models trained since
        # session 8); empty for older artifacts, which the families alone restrict.
        self.seen_kernels = frozenset(manifest.get("kernels") or ())
        # Their config-table codes (a family the engine has no code for is never matched).
        self._seen_codes = np.array(sorted({analytic.family_code(f) for f in self.seen_families}
                                           - {analytic.UNKNOWN_FAMILY}), dtype=np.int64)
        # The CV efficiency of whichever model orders the candidates.
        cv = (manifest.get("ranker", {}) if ranker is not None else manifest).get("cv", {}).get("overall", {})
        gpus = ", ".join(manifest.get("gpus", []))
        trees = (f"regressor {forest.num_trees} trees + LambdaRank ranker {ranker.num_trees} trees"
                 if ranker is not None else f"{forest.num_trees} trees")
        self.description = (f"LightGBM, {trees}, {self.feature_count} features (schema "
                            f"{self.schema_version}), {manifest.get('problems', '?')} problems measured on "
                            f"{gpus or '?'}" + (f"; CV mean efficiency {cv['mean']:.3f}" if "mean" in cv else ""))

    @property
    def ranked_by(self) -> str:
        """What orders the candidates: ``"ranker"`` or ``"predicted_us"``."""
        return "ranker" if self.ranker is not None else "predicted_us"

    def covers(self, arch: str, dtype: DType | str, direction: Direction | str) -> bool:
        try:
            dtype, direction = DType.parse(dtype), Direction.parse(direction)
        except ValueError:
            return False
        target = str(arch).lower().replace("-", "_")
        return target in (self.arch, self.device) and dtype in self.dtypes and direction in self.directions

    def features(self, problem: ConvProblem, configs: Sequence[KernelConfig] | ConfigTable) -> np.ndarray:
        """The model's own feature matrix (its columns, in its order)."""
        return self.engine.build(problem, configs, launch=self.uses_launch).take(self.columns, axis=1)

    def _checked_features(self, problem: ConvProblem, configs: Sequence[KernelConfig] | ConfigTable) -> np.ndarray:
        x = self.features(problem, configs)
        if not np.isfinite(x).all():
            raise ValueError(f"non-finite features for {problem.key}")
        return x

    def predict_us(self, problem: ConvProblem, configs: Sequence[KernelConfig] | ConfigTable) -> np.ndarray:
        """Predicted microseconds of each config on ``problem`` (the regressor), in the order given."""
        if len(configs) == 0:
            return np.empty(0)
        return np.exp(self.forest.predict(self._checked_features(problem, configs)))

    def rankable(self, configs: Sequence[KernelConfig] | ConfigTable) -> np.ndarray:
        """Bool per config: whether this model may rank it (its family is one of :attr:`seen_families`
        and, where the artifact records them, it is one of :attr:`seen_kernels`; an artifact without the
        record ranks no forward / backward-data split-K kernel and no channel-padded one); every config when none
        is."""
        table = table_of(configs)
        seen = np.isin(table.columns["family"], self._seen_codes)
        if self.seen_kernels:
            seen &= np.fromiter((name in self.seen_kernels for name in table.names), dtype=bool, count=len(table))
            return seen if seen.any() else np.ones(len(seen), dtype=bool)
        # Channel-padded kernels (schema 5) are newer than every artifact without a kernel record.
        seen &= table.columns["pad_channels"] == 0
        if Direction.BACKWARD_WEIGHT not in self.directions:
            # Forward / backward-data split-K kernels are newer than every artifact without a kernel record
            # (its training rows all have split_k 1: e.g. the shipped fp16 forward / backward-data models,
            # which put the untried split-K tiles first on batch-1 problems); like an unseen family, they
            # wait for the tuning database or a model trained on them.
            seen &= table.columns["split_k"] == 1
        return seen if seen.any() else np.ones(len(seen), dtype=bool)

    def rank(self, problem: ConvProblem, configs: Sequence[KernelConfig] | ConfigTable) -> Ranking:
        """The candidates of families the model saw, best first — by the ranker's score when the
        artifact has one, else by predicted µs — with every candidate's predicted µs (the
        regressor's), from one feature matrix. Candidates of unseen families are left out (in
        ``Ranking.unranked``) unless every candidate is of one (see the module docstring)."""
        if len(configs) == 0:
            return Ranking.of(np.empty(0), None if self.ranker is None else np.empty(0))
        table = table_of(configs)
        x = self._checked_features(problem, table)
        predicted = np.exp(self.forest.predict(x))
        return Ranking.of(predicted, None if self.ranker is None else self.ranker.predict(x), self.rankable(table))


def seen_families(feature_names: Sequence[str], manifest: dict[str, Any]) -> frozenset[str]:
    """The kernel families a model saw in training: ``families`` of its ``train_manifest.json``
    when recorded (a non-empty list of names), else the families whose ``k_<family>`` one-hot is
    among its feature names."""
    recorded = manifest.get("families")
    if isinstance(recorded, list) and recorded and all(isinstance(f, str) for f in recorded):
        return frozenset(recorded)
    names = set(feature_names)
    return frozenset(f for f in ONE_HOT_FAMILIES if f"k_{f}" in names)


def rank(predictor: Any, problem: ConvProblem, configs: Sequence[KernelConfig]) -> Ranking:
    """Any predictor's ranking of ``configs`` on ``problem``: its own :meth:`~TrainedPredictor.rank`
    where it has one (trained models: the ranker's order when present, families the model never saw
    left out), else ascending predicted µs of every candidate (the analytic model). What selection
    should sort by."""
    own = getattr(predictor, "rank", None)
    if callable(own):
        return own(problem, configs)
    return Ranking.of(np.asarray(predictor.predict_us(problem, configs), dtype=np.float64))


def load(path: Path | str, engine: FeatureEngine | None = None) -> TrainedPredictor:
    """Load ``<models-dir>/<name>/<version>/``; raise :class:`ModelLoadError` with the reason."""
    folder = Path(path)
    spec = _read_json(folder / "feature_spec.json")
    for key in ("name", "version", "arch", "dtype", "direction", "feature_names", "target"):
        if key not in spec:
            raise ModelLoadError(f"{folder / 'feature_spec.json'}: missing {key!r}")
    artifact_format = spec.get("artifact_format", 1)
    if type(artifact_format) is not int or artifact_format not in ARTIFACT_FORMATS:
        raise ModelLoadError(f"{folder / 'feature_spec.json'}: artifact_format {artifact_format!r} is not one of "
                             f"{sorted(ARTIFACT_FORMATS)} (written by a newer trainer?)")
    if spec["target"] not in SUPPORTED_TARGETS:
        raise ModelLoadError(f"{folder}: target {spec['target']!r} is not one of {SUPPORTED_TARGETS}")
    schema = int(spec.get("schema_version", 0))
    if schema > SCHEMA_VERSION:
        raise ModelLoadError(f"{folder}: feature schema {schema} is newer than this engine's ({SCHEMA_VERSION})")
    engine = engine or FeatureEngine(get_arch(spec.get("device") or spec["arch"]))
    names = list(spec["feature_names"])
    missing = [n for n in names if n not in engine.index]
    if missing:
        raise ModelLoadError(f"{folder}: the model needs feature(s) {missing} that this feature engine "
                             f"(schema {SCHEMA_VERSION}) no longer makes; retrain it or restore the feature(s)")
    forest = _load_forest(folder / REGRESSOR_FILE, names, ranking=False)
    ranker = (_load_forest(folder / RANKER_FILE, names, ranking=True)
              if RANKER_FILE in ARTIFACT_FORMATS[artifact_format] else None)
    manifest_file = folder / "train_manifest.json"
    manifest = _read_json(manifest_file) if manifest_file.exists() else {}
    columns = np.array([engine.index[n] for n in names], dtype=np.int64)
    return TrainedPredictor(folder, spec, forest, engine, columns, manifest, ranker)


def version_key(version: str) -> tuple:
    """Orders "1.10" after "1.9" and "v2" after "v1": numbers compare as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in re.split(r"(\d+)", version) if part)


def packaged_models_dir() -> Path:
    """``models/artifacts`` of this package: the models shipped with it."""
    return Path(__file__).resolve().parent / "artifacts"


def load_all(models_dir: Path | str) -> tuple[list[TrainedPredictor], dict[str, str]]:
    """Every model under ``<models_dir>/<name>/<version>/``: those that load, and the reason for
    each folder that does not (one bad artifact must not hide the others)."""
    loaded, failed = [], {}
    for folder in sorted(p.parent for p in Path(models_dir).glob("*/*/feature_spec.json")):
        try:
            loaded.append(load(folder))
        except (ModelLoadError, ImportError, OSError, ValueError) as error:
            failed[str(folder)] = str(error)
    return loaded, failed


def version_folders(models_dir: Path | str) -> dict[Path, list[Path]]:
    """Every model under ``<models_dir>/<name>/<version>/`` (a folder with a ``feature_spec.json``): its version
    folders, newest first, by model folder in name order."""
    versions: dict[Path, list[Path]] = {}
    for folder in (p.parent for p in Path(models_dir).glob("*/*/feature_spec.json")):
        versions.setdefault(folder.parent, []).append(folder)
    return {name: sorted(versions[name], key=lambda f: version_key(f.name), reverse=True) for name in sorted(versions)}


def load_newest(models_dir: Path | str, dtype: DType | None = None,
                direction: Direction | None = None) -> tuple[list[TrainedPredictor], dict[str, str]]:
    """The newest version of every model under ``<models_dir>/<name>/<version>/`` that loads (an older
    one where the newer fail), and the reason for each folder tried that did not. What a process that
    only ranks with the newest versions needs: loading every version (55 folders, 14 s on a 2-core CPU)
    made the first local ``Select`` of a PyTorch process wait for models it never uses. ``dtype`` /
    ``direction``: only the models trained for them (read from each version's ``feature_spec.json``
    before its forests), so a process loads a direction's model when it first ranks that direction."""
    loaded, failed = [], {}
    for folders in version_folders(models_dir).values():
        for folder in folders:
            try:
                if not _spec_matches(folder, dtype, direction):
                    break  # (a model's versions share its dtype and direction)
                loaded.append(load(folder))
                break
            except (ModelLoadError, ImportError, OSError, ValueError) as error:
                failed[str(folder)] = str(error)
    return loaded, failed


def _spec_matches(folder: Path, dtype: DType | None, direction: Direction | None) -> bool:
    """Whether the model in ``folder`` was trained for ``dtype`` and ``direction`` (None: any)."""
    if dtype is None and direction is None:
        return True
    spec = _read_json(folder / "feature_spec.json")
    return ((dtype is None or DType.parse(spec.get("dtype", "")) is dtype)
            and (direction is None or Direction.parse(spec.get("direction", "")) is direction))


def newest_covering(models: Iterable[TrainedPredictor], targets: Iterable[str], dtype: DType,
                    direction: Direction) -> TrainedPredictor | None:
    """The newest version among the models trained for (any of ``targets`` — a compute target such as
    ``sm_90`` or a device such as ``h200`` —, dtype, direction), as the server chooses."""
    targets = tuple(targets)
    covering = [m for m in models if any(m.covers(t, dtype, direction) for t in targets)]
    return max(covering, key=lambda m: version_key(m.version)) if covering else None
