"""The models selection ranks with: trained models found under ``--models-dir`` and the analytic
fallback, chosen by (arch, dtype, direction, version).

A trained model lives in ``<models-dir>/<name>/<version>/`` (DESIGN §7: model text file,
``feature_spec.json``, ``train_manifest.json``). Loading it is the models package's job: this module
calls ``tiledispatch.models.predictor.load(path)`` when that module exists and expects back an
object with the :class:`Predictor` attributes below. Until it exists, model folders are reported
and skipped, and selection falls back to the analytic predictor.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from tiledispatch.models.analytic import AnalyticPredictor
from tiledispatch.models.predictor import newest_covering, version_key
from tiledispatch.native.arch import ArchSpec
from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType

from .errors import FailedPrecondition, NotFound

log = logging.getLogger("tiledispatch.server.predictors")

TRAINED_LOADER = "tiledispatch.models.predictor"


@runtime_checkable
class Predictor(Protocol):
    """What selection needs from a model."""

    name: str
    version: str
    kind: str  # "trained" or "analytic"

    def covers(self, arch: str, dtype: DType, direction: Direction) -> bool:
        """Whether the model was trained for this compute target/device, dtype and direction."""

    def predict_us(self, problem: ConvProblem, configs: Sequence[KernelConfig]) -> np.ndarray:
        """Predicted microseconds of each config on the problem, in order."""


@dataclass(frozen=True)
class ModelDescription:
    """What ListModels reports about a predictor."""

    name: str
    version: str
    kind: str
    arch: str = ""
    dtypes: tuple[str, ...] = ()
    directions: tuple[str, ...] = ()
    feature_count: int = 0
    description: str = ""


def describe(predictor: Predictor) -> ModelDescription:
    return ModelDescription(
        name=predictor.name, version=predictor.version, kind=predictor.kind,
        arch=str(getattr(predictor, "arch", "")),
        dtypes=tuple(str(getattr(d, "value", d)) for d in getattr(predictor, "dtypes", ())),
        directions=tuple(str(getattr(d, "value", d)) for d in getattr(predictor, "directions", ())),
        feature_count=int(getattr(predictor, "feature_count", 0)),
        description=str(getattr(predictor, "description", "")
                        or ("roofline + tile and wave quantisation" if predictor.kind == "analytic" else "")),
    )


@dataclass
class ModelStore:
    """Every predictor of the server. Immutable after :meth:`load` (no locking needed)."""

    spec: ArchSpec
    analytic: AnalyticPredictor
    trained: list[Predictor] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, models_dir: Path, spec: ArchSpec) -> ModelStore:
        store = cls(spec=spec, analytic=AnalyticPredictor(spec))
        folders = sorted(p.parent for p in Path(models_dir).glob("*/*/feature_spec.json")) if models_dir else []
        if not folders:
            return store
        try:
            loader = importlib.import_module(TRAINED_LOADER)
        except ImportError as error:
            store.skipped = [str(f) for f in folders]
            log.warning("trained models found but no loader", extra={"loader": TRAINED_LOADER, "error": str(error),
                                                                      "models": store.skipped})
            return store
        for folder in folders:
            try:
                predictor = loader.load(folder)
            except Exception as error:  # one bad artifact must not take the server down
                store.skipped.append(str(folder))
                log.error("model failed to load", extra={"path": str(folder), "error": str(error)})
                continue
            if not isinstance(predictor, Predictor):
                store.skipped.append(str(folder))
                log.error("model loader returned an object without the Predictor interface",
                          extra={"path": str(folder)})
                continue
            store.trained.append(predictor)
            log.info("model loaded", extra={"model": predictor.name, "version": predictor.version})
        return store

    def all(self) -> list[Predictor]:
        return [*sorted(self.trained, key=lambda m: (m.name, version_key(m.version))), self.analytic]

    def find(self, name: str, version: str = "") -> Predictor:
        """A model by name and version (newest version when empty); NOT_FOUND otherwise."""
        matches = [m for m in self.all() if m.name == name and (not version or m.version == version)]
        if not matches:
            known = sorted({f"{m.name}/{m.version}" for m in self.all()})
            raise NotFound(f"no model {name!r}{' version ' + repr(version) if version else ''}; known: {known}",
                           field="model")
        return max(matches, key=lambda m: version_key(m.version))

    def choose(self, dtype: DType, direction: Direction, pinned: tuple[str, str] | None = None) -> Predictor | None:
        """The trained model for (this server's arch, dtype, direction): the pinned one, else the
        newest version among those that cover it; ``None`` when none does."""
        if pinned:
            model = self.find(*pinned)
            if not self._covers(model, dtype, direction):
                raise FailedPrecondition(f"model {model.name}/{model.version} does not cover "
                                         f"({self.spec.arch}, {dtype.value}, {direction.value})", field="model")
            return model
        return newest_covering(self.trained, (self.spec.arch, self.spec.name), dtype, direction)

    def _covers(self, model: Predictor, dtype: DType, direction: Direction) -> bool:
        return bool(model.covers(self.spec.arch, dtype, direction) or model.covers(self.spec.name, dtype, direction))
