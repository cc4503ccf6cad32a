"""Selection policy: exact hit in the tuning database → trained model → analytic fallback
(DESIGN §8), with an LRU cache of rankings.

The cache key is (problem key, model name/version, policy, family filter); a ranking is cached in
full and ``top_k`` is cut when answering. Anything that can change a ranking (a measurement
recorded, a kernel quarantined) clears the cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from tiledispatch.models.predictor import rank
from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem

from .catalog import Catalog
from .errors import FailedPrecondition, InvalidArgument, NotFound, Unimplemented
from .lru import LRU
from .metrics import Metrics
from .predictors import ModelStore, Predictor
from .tuning_db import TuningDB

DEFAULT_TOP_K = 5


class Policy(str, Enum):
    DEFAULT = "default"
    TUNING_DB_ONLY = "tuning_db_only"
    MODEL_ONLY = "model_only"
    ANALYTIC_ONLY = "analytic_only"
    AUTOTUNE = "autotune"


class Source(str, Enum):
    TUNING_DB = "tuning_db"
    MODEL = "model"
    ANALYTIC = "analytic"
    AUTOTUNE = "autotune"


@dataclass(frozen=True)
class SelectQuery:
    problem: ConvProblem
    policy: Policy = Policy.DEFAULT
    top_k: int = DEFAULT_TOP_K
    families: frozenset[Family] = frozenset()
    model: tuple[str, str] | None = None  # pinned (name, version); version "" = newest


@dataclass(frozen=True)
class Candidate:
    config: KernelConfig
    predicted_us: float
    measured_us: float | None = None


@dataclass(frozen=True)
class Selection:
    """A full ranking, best first; ``top(k)`` is what a caller asked for."""

    problem_key: str
    candidates: tuple[Candidate, ...]
    source: Source
    model_name: str
    model_version: str
    cached: bool = False

    def top(self, k: int) -> tuple[Candidate, ...]:
        return self.candidates[:k] if k > 0 else self.candidates

    @property
    def best(self) -> Candidate:
        return self.candidates[0]


#: Measures configs on the GPU (records them, quarantines faults) and returns, per config in
#: order, the measured median in µs or None when it did not run correctly.
Autotuner = Callable[[ConvProblem, Sequence[Candidate]], list[float | None]]


class Selector:
    def __init__(self, catalog: Catalog, models: ModelStore, db: TuningDB, device: str, metrics: Metrics,
                 cache_size: int = 4096, autotuner: Autotuner | None = None):
        self.catalog = catalog
        self.models = models
        self.db = db
        self.device = device
        self.metrics = metrics
        self.autotuner = autotuner
        self._cache = LRU(cache_size)
        self._lock = threading.Lock()
        #: Bumped by every :meth:`invalidate`: answers derived from the cache (the servicer's
        #: serialized Select answers) are valid only while it is unchanged.
        self.generation = 0

    # ---- public ----------------------------------------------------------------------------------
    def select_cached(self, query: SelectQuery) -> Selection | None:
        """The cached answer, or ``None`` (a miss is not counted: :meth:`select` counts it). Cheap
        enough for the server's event loop, so a hit skips the hop to a worker thread."""
        if query.top_k < 0 or query.policy is Policy.AUTOTUNE:
            return None
        predictor = self._predictor(query)
        selection = self._cached(self._key(query, predictor))
        if selection is not None:
            self.metrics.cache_lookup(True)
            self.metrics.selections.labels(selection.source.value,
                                           f"{selection.model_name}/{selection.model_version}").inc()
        return selection

    @staticmethod
    def _key(query: SelectQuery, predictor: Predictor) -> tuple:
        return (query.problem.key, predictor.name, predictor.version, query.policy.value,
                tuple(sorted(f.value for f in query.families)))

    def select(self, query: SelectQuery) -> Selection:
        if query.top_k < 0:
            raise InvalidArgument(f"must be >= 0 (0 means {DEFAULT_TOP_K}), got {query.top_k}", field="top_k")
        predictor = self._predictor(query)
        if query.policy is Policy.AUTOTUNE:
            selection = self._autotune(query, predictor)
        else:
            key = self._key(query, predictor)
            selection = self._cached(key)
            self.metrics.cache_lookup(selection is not None)
            if selection is None:
                selection = self._rank(query, predictor)
                self._store(key, selection)
        self.metrics.selections.labels(selection.source.value,
                                       f"{selection.model_name}/{selection.model_version}").inc()
        return selection

    def invalidate(self) -> None:
        """Forget every cached ranking (after a measurement or a quarantine)."""
        with self._lock:
            self._cache.clear()
            self.generation += 1

    def predict(self, problem: ConvProblem, configs: Sequence[KernelConfig]) -> tuple[Predictor, np.ndarray]:
        """The default predictor's times for these configs (for reports beside measurements), each predicted
        on the problem it runs: a 2D kernel on a planar 3D problem on its 2D form (``kernel_problem``)."""
        predictor = self.models.choose(problem.dtype, problem.direction) or self.models.analytic
        predicted = np.zeros(len(configs), dtype=np.float64)
        for ndim in sorted({c.ndim for c in configs}):
            rows = [i for i, c in enumerate(configs) if c.ndim == ndim]
            form = problem.kernel_problem(ndim) or problem
            predicted[rows] = predictor.predict_us(form, [configs[i] for i in rows])
        return predictor, predicted

    # ---- policy ----------------------------------------------------------------------------------
    def _predictor(self, query: SelectQuery) -> Predictor:
        problem = query.problem
        if query.policy is Policy.ANALYTIC_ONLY:
            if query.model and query.model[0] != self.models.analytic.name:
                raise InvalidArgument("a pinned model contradicts policy ANALYTIC_ONLY", field="model")
            return self.models.analytic
        trained = self.models.choose(problem.dtype, problem.direction, query.model)
        if trained is None and query.policy is Policy.MODEL_ONLY:
            raise NotFound(f"no trained model covers ({self.models.spec.arch}, {problem.dtype.value}, "
                           f"{problem.direction.value}); models: "
                           f"{[f'{m.name}/{m.version}' for m in self.models.trained]}", field="model")
        return trained or self.models.analytic

    def _ranked_candidates(self, query: SelectQuery, predictor: Predictor) -> list[Candidate]:
        return self._candidates(query, predictor)[0]

    def _candidates(self, query: SelectQuery, predictor: Predictor) -> tuple[list[Candidate], list[Candidate]]:
        """(ranked, unranked): the predictor's order, and the candidates it may not rank (families a
        trained model never saw, ``Ranking.unranked``): those reach an answer only through a measurement."""
        problem = query.problem
        configs = self.catalog.candidates(problem, query.families)
        if not configs:
            families = sorted(f.value for f in query.families)
            raise Unimplemented(f"no kernel{' of families ' + str(families) if families else ''} in "
                                f"{self.catalog.source} supports this problem ({problem.key})", field="problem")
        # The ranker's order where the model has one, else ascending predicted µs (ties keep name order);
        # of the problem the candidates run (a 3D problem that is a 2D one: its 2D form, as trained).
        ranking = rank(predictor, problem.canonical, configs)
        return ([Candidate(configs[i], float(ranking.predicted_us[i])) for i in ranking.order],
                [Candidate(configs[i], float(ranking.predicted_us[i])) for i in ranking.unranked])

    def _rank(self, query: SelectQuery, predictor: Predictor) -> Selection:
        ranked, unranked = self._candidates(query, predictor)
        source = Source.ANALYTIC if predictor.kind == "analytic" else Source.MODEL
        if query.policy in (Policy.DEFAULT, Policy.TUNING_DB_ONLY):
            # Only measurements of the binaries in use (the registry's builds; none known: every one).
            builds = self.catalog.builds or None
            measured = {b.kernel: b.time_us for b in self.db.best_times(query.problem.key, self.device, builds)}
            # A measurement is evidence for any candidate, including one the model may not rank.
            hits = [replace(c, measured_us=measured[c.config.name]) for c in ranked + unranked
                    if c.config.name in measured]
            if hits:
                hits.sort(key=lambda c: (c.measured_us, c.config.name))
                rest = [c for c in ranked if c.config.name not in measured]
                ranked, source = hits + rest, Source.TUNING_DB
            elif query.policy is Policy.TUNING_DB_ONLY:
                raise NotFound(f"no measurement of this problem on {self.device} in the tuning database "
                               f"({query.problem.key})", field="problem")
        return Selection(query.problem.key, tuple(ranked), source, predictor.name, predictor.version)

    def _autotune(self, query: SelectQuery, predictor: Predictor) -> Selection:
        if self.autotuner is None:
            raise FailedPrecondition("policy AUTOTUNE measures kernels on a GPU; this server has none",
                                     field="policy")
        ranked = self._ranked_candidates(query, predictor)
        chosen = ranked[:query.top_k or DEFAULT_TOP_K]
        times = self.autotuner(query.problem, chosen)
        measured = sorted((replace(c, measured_us=t) for c, t in zip(chosen, times) if t is not None),
                          key=lambda c: (c.measured_us, c.config.name))
        if not measured:
            raise Unimplemented(f"none of the {len(chosen)} kernels measured ran correctly", field="problem")
        return Selection(query.problem.key, tuple(measured), Source.AUTOTUNE, predictor.name, predictor.version)

    # ---- cache -----------------------------------------------------------------------------------
    def _cached(self, key: tuple) -> Selection | None:
        selection = self._cache.get(key)
        return replace(selection, cached=True) if selection is not None else None

    def _store(self, key: tuple, selection: Selection) -> None:
        self._cache.put(key, selection)
