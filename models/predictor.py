"""Version-aware loading of trained models (DESIGN §7) — the hook ``server/predictors.py`` calls.

``load(folder)`` reads ``<models-dir>/<name>/<version>/``:

* ``feature_spec.json``: ordered ``feature_names`` the model was trained on, ``target`` (``log_us``),
  ``schema_version``, ``arch``/``device``, ``dtype``, ``direction``, ``name``, ``version``;
* ``model.txt``: the LightGBM model (its own feature names must equal the spec's).

The model's features are located in the current engine's row **by name** (an index map), so a
model trained on an older, smaller feature set keeps loading after the engine has grown. A model
naming a feature the engine no longer makes is refused with :class:`ModelLoadError` naming the
missing features. Models are chosen by (arch, dtype, direction, version): :meth:`covers` answers
for the spec's compute target (``sm_90``) or device (``h200``), dtype and direction; the server
picks the newest version among the covering ones (``server/predictors.py::ModelStore.choose``).

Inference: features for all candidates at once (``FeatureEngine.build``), the model's columns
taken by the index map, then the trees evaluated together in numpy (:mod:`models.forest`,
identical to ``Booster.predict`` for finite inputs): ``predicted_us = exp(raw score)``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tiledispatch.models.features import SCHEMA_VERSION, ConfigTable, FeatureEngine
from tiledispatch.models.forest import Forest, ForestError
from tiledispatch.native.arch import get_arch
from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType

SUPPORTED_TARGETS = ("log_us",)


class ModelLoadError(ValueError):
    """A model folder cannot be served; the message says which file and why."""


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: missing") from None
    except json.JSONDecodeError as error:
        raise ModelLoadError(f"{path}: not valid JSON ({error})") from None


def _model_feature_names(model_text: str) -> list[str]:
    for line in model_text.splitlines():
        if line.startswith("feature_names="):
            return line.split("=", 1)[1].split()
    raise ModelLoadError("model.txt: no feature_names line (not a LightGBM model text file?)")


class TrainedPredictor:
    """A LightGBM model for one (arch, dtype, direction), served through the current engine."""

    kind = "trained"

    def __init__(self, folder: Path, spec: dict[str, Any], forest: Forest, engine: FeatureEngine,
                 columns: np.ndarray, manifest: dict[str, Any]):
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
        self.forest = forest
        self.engine = engine
        self.columns = columns
        self.manifest = manifest
        cv = manifest.get("cv", {}).get("overall", {})
        gpus = ", ".join(manifest.get("gpus", []))
        self.description = (f"LightGBM, {forest.num_trees} trees, {self.feature_count} features (schema "
                            f"{self.schema_version}), {manifest.get('problems', '?')} problems measured on "
                            f"{gpus or '?'}" + (f"; CV mean efficiency {cv['mean']:.3f}" if "mean" in cv else ""))

    def covers(self, arch: str, dtype: DType | str, direction: Direction | str) -> bool:
        try:
            dtype, direction = DType.parse(dtype), Direction.parse(direction)
        except ValueError:
            return False
        target = str(arch).lower().replace("-", "_")
        return target in (self.arch, self.device) and dtype in self.dtypes and direction in self.directions

    def features(self, problem: ConvProblem, configs: Sequence[KernelConfig] | ConfigTable) -> np.ndarray:
        """The model's own feature matrix (its columns, in its order)."""
        return self.engine.build(problem, configs).take(self.columns, axis=1)

    def predict_us(self, problem: ConvProblem, configs: Sequence[KernelConfig] | ConfigTable) -> np.ndarray:
        """Predicted microseconds of each config on ``problem``, in the order given."""
        if len(configs) == 0:
            return np.empty(0)
        x = self.features(problem, configs)
        if not np.isfinite(x).all():
            raise ValueError(f"non-finite features for {problem.key}")
        return np.exp(self.forest.predict(x))


def load(path: Path | str, engine: FeatureEngine | None = None) -> TrainedPredictor:
    """Load ``<models-dir>/<name>/<version>/``; raise :class:`ModelLoadError` with the reason."""
    import lightgbm as lgb

    folder = Path(path)
    spec = _read_json(folder / "feature_spec.json")
    for key in ("name", "version", "arch", "dtype", "direction", "feature_names", "target"):
        if key not in spec:
            raise ModelLoadError(f"{folder / 'feature_spec.json'}: missing {key!r}")
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
    model_file = folder / "model.txt"
    try:
        text = model_file.read_text()
    except FileNotFoundError:
        raise ModelLoadError(f"{model_file}: missing") from None
    if _model_feature_names(text) != names:
        raise ModelLoadError(f"{model_file}: its feature names differ from feature_spec.json's")
    try:
        booster = lgb.Booster(model_str=text)
        forest = Forest.from_dump(booster.dump_model())
    except (lgb.basic.LightGBMError, ForestError) as error:
        raise ModelLoadError(f"{model_file}: {error}") from None
    manifest_file = folder / "train_manifest.json"
    manifest = _read_json(manifest_file) if manifest_file.exists() else {}
    columns = np.array([engine.index[n] for n in names], dtype=np.int64)
    return TrainedPredictor(folder, spec, forest, engine, columns, manifest)


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


def newest_covering(models: Iterable[TrainedPredictor], targets: Iterable[str], dtype: DType,
                    direction: Direction) -> TrainedPredictor | None:
    """The newest version among the models trained for (any of ``targets`` — a compute target such as
    ``sm_90`` or a device such as ``h200`` —, dtype, direction), as the server chooses."""
    targets = tuple(targets)
    covering = [m for m in models if any(m.covers(t, dtype, direction) for t in targets)]
    return max(covering, key=lambda m: version_key(m.version)) if covering else None
