"""Kernel selection for framework integrations: an in-process cache, then the service's ``Select``,
then a local ranking when the service is unreachable (or when no service is configured).

Torch-free: it needs only :mod:`tiledispatch.native` (problem, configs, rule sets, support),
:mod:`tiledispatch.models.analytic` and, for the remote path, the thin client (grpcio).

Order of a :meth:`KernelSelector.select`:

1. the in-process cache, keyed by the problem's canonical key (direction and dtype included);
2. ``mode="remote"``: a ``Select`` RPC with a short deadline (``timeout_s``, default 1 s or
   ``$TILEDISPATCH_SELECT_TIMEOUT_S``); the first of its ranked candidates that this process can run
   (supported, and in the local registry when kernels come from one) is taken;
3. the local ranking: every kernel of the local pool (the compiled registry's, else the rule set's)
   that supports the problem, ranked by a predictor, best first: the one given, else the newest
   trained model shipped for (arch, dtype, direction) (``$TILEDISPATCH_MODELS_DIR`` or the package's
   ``models/artifacts``), else the analytic roofline model.

When the service is unreachable (UNAVAILABLE, DEADLINE_EXCEEDED) one WARNING line says so and
selection stays local for ``retry_after_s`` before the service is tried again; one INFO line says
when it answers again. Any other error of the service (e.g. UNIMPLEMENTED) falls back to the
local ranking for that problem, with one WARNING per kind of error.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tiledispatch.native.arch import ArchSpec, get_arch
from tiledispatch.native.configs import ConfigError, KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.support import is_supported

log = logging.getLogger("tiledispatch.integrations")

DEFAULT_TIMEOUT_S = 1.0
DEFAULT_RETRY_AFTER_S = 60.0
#: Candidates asked of the service: enough that one is runnable here even if the top few are not.
DEFAULT_TOP_K = 16
UNREACHABLE_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


class SelectionError(RuntimeError):
    """No kernel this process can run supports the problem."""


class Predictor(Protocol):
    name: str
    version: str

    def predict_us(self, problem: ConvProblem, configs: Sequence[KernelConfig]) -> np.ndarray: ...


@dataclass(frozen=True)
class Choice:
    """The kernel chosen for one problem, how, and how long choosing took (the first time)."""

    config: KernelConfig
    source: str                # "remote:<tuning_db|model|analytic|autotune>" or "local:<predictor name>"
    seconds: float             # wall time of the uncached selection
    predicted_us: float | None = None


@dataclass
class SelectionStats:
    """Counters for reports: uncached selections (by source) and cache hits, with wall time."""

    uncached: int = 0
    uncached_s: float = 0.0
    cached: int = 0
    cached_s: float = 0.0
    by_source: dict[str, int] = field(default_factory=dict)
    fallbacks: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"uncached": self.uncached, "uncached_s": self.uncached_s, "cached": self.cached,
                "cached_s": self.cached_s, "by_source": dict(self.by_source), "fallbacks": self.fallbacks,
                "uncached_mean_ms": 1e3 * self.uncached_s / self.uncached if self.uncached else 0.0,
                "cached_mean_us": 1e6 * self.cached_s / self.cached if self.cached else 0.0}


class KernelSelector:
    """Chooses a kernel per problem. Thread-safe.

    ``pool``: the configs this process can run (e.g. a registry's); default: the ``rule_set`` of
    ``arch``. ``available``: extra filter on configs named by the service (e.g. "is in my
    registry"); default: membership in ``pool``. ``target``: the service (``host:port``,
    a list, or ``dns:///…``); ``client_options``: more keyword arguments of
    :class:`tiledispatch.client.Client` (e.g. ``tls=True, token=...``); ``mode``: ``"auto"``
    (remote when a target is given or ``$TILEDISPATCH_TARGET`` is set, else local), ``"remote"`` or
    ``"local"``.
    """

    def __init__(self, target: str | Sequence[str] | None = None, *, mode: str = "auto",
                 arch: ArchSpec | str = "sm_90", pool: Iterable[KernelConfig] | None = None,
                 rule_set: str = "default", available: Callable[[KernelConfig], bool] | None = None,
                 predictor: Predictor | None = None, timeout_s: float | None = None, top_k: int = DEFAULT_TOP_K,
                 retry_after_s: float = DEFAULT_RETRY_AFTER_S, client: Any = None,
                 client_options: dict[str, Any] | None = None):
        if mode not in ("auto", "remote", "local"):
            raise ValueError(f"mode: must be 'auto', 'remote' or 'local', got {mode!r}")
        target = target or os.environ.get("TILEDISPATCH_TARGET") or None
        if mode == "auto":
            mode = "remote" if (target or client is not None) else "local"
        self.mode = mode
        self.target = target
        self.spec = get_arch(arch) if isinstance(arch, str) else arch
        self.rule_set = rule_set
        self._pool = tuple(pool) if pool is not None else None
        self._pool_names = frozenset(c.name for c in self._pool) if self._pool is not None else None
        self._available = available
        self._predictor = predictor
        self._given_predictor = predictor is not None
        self._trained: dict[tuple[DType, Direction], list[Any]] = {}
        self.timeout_s = float(timeout_s if timeout_s is not None else
                               os.environ.get("TILEDISPATCH_SELECT_TIMEOUT_S") or DEFAULT_TIMEOUT_S)
        self.top_k = top_k
        self.retry_after_s = retry_after_s
        self._client = client
        self._client_options = dict(client_options or {})
        self._cache: dict[str, Choice] = {}
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._remote_down_until = 0.0
        self._warned: set[str] = set()
        self.stats = SelectionStats()

    # ---- public ----------------------------------------------------------------------------------
    def select(self, problem: ConvProblem) -> Choice:
        start = time.perf_counter()
        key = problem.key
        choice = self._cache.get(key)
        if choice is not None:
            with self._lock:
                self.stats.cached += 1
                self.stats.cached_s += time.perf_counter() - start
            return choice
        choice = None
        if self.mode == "remote" and time.monotonic() >= self._remote_down_until:
            choice = self._select_remote(problem, start)
        if choice is None:
            choice = self._select_local(problem, start)
        with self._lock:
            self._cache.setdefault(key, choice)
            self.stats.uncached += 1
            self.stats.uncached_s += choice.seconds
            self.stats.by_source[choice.source] = self.stats.by_source.get(choice.source, 0) + 1
            return self._cache[key]

    def clear(self) -> None:
        """Forget cached choices and counters (e.g. to time first calls again)."""
        with self._lock:
            self._cache.clear()
            self.stats = SelectionStats()

    def cached(self) -> dict[str, Choice]:
        with self._lock:
            return dict(self._cache)

    @property
    def predictor(self) -> Predictor:
        """The fallback predictor: the one given, else the analytic model."""
        if self._predictor is None:
            from tiledispatch.models.analytic import AnalyticPredictor

            self._predictor = AnalyticPredictor(self.spec)
        return self._predictor

    def predictor_for(self, problem: ConvProblem) -> Predictor:
        """What ranks ``problem`` locally: the given predictor, else the newest shipped trained model
        covering (arch, dtype, direction), else the analytic model."""
        if self._given_predictor:
            return self.predictor
        key = (problem.dtype, problem.direction)
        with self._load_lock:  # (not self._lock: cached lookups must not wait for a model's load)
            if key not in self._trained:
                self._trained[key] = self._load_trained(*key)
            trained = self._trained[key]
        if not trained:  # (no models package to import either)
            return self.predictor
        from tiledispatch.models.predictor import newest_covering

        model = newest_covering(trained, (self.spec.arch, self.spec.name), problem.dtype, problem.direction)
        return model or self.predictor

    def _load_trained(self, dtype: DType, direction: Direction) -> list[Any]:
        """The newest shipped models of (dtype, direction), loaded when this process first ranks it."""
        try:
            from tiledispatch.models.predictor import load_newest, packaged_models_dir
        except ImportError as error:  # numpy-only install without the models package's needs
            log.info("tiledispatch: no trained models (%s); ranking with the analytic model", error)
            return []
        models_dir = os.environ.get("TILEDISPATCH_MODELS_DIR") or packaged_models_dir()
        # (only the newest version of a model ranks)
        loaded, failed = load_newest(models_dir, dtype, direction)
        for folder, reason in failed.items():
            log.warning("tiledispatch: model %s not loaded (%s); it is not used for local ranking", folder, reason)
        return loaded

    def runnable(self, config: KernelConfig, problem: ConvProblem) -> bool:
        """Whether this process can run ``config`` on ``problem``."""
        if self._available is not None:
            if not self._available(config):
                return False
        elif self._pool_names is not None and config.name not in self._pool_names:
            return False
        return bool(is_supported(problem, config))

    # ---- local -----------------------------------------------------------------------------------
    def pool_for(self, problem: ConvProblem) -> list[KernelConfig]:
        """The kernels of the problem's direction, dtype and rank: of its canonical form (2D kernels for a
        3D problem that is a 2D one, as the service's catalog)."""
        ndim = problem.canonical.ndim
        if self._pool is not None:
            return [c for c in self._pool if c.direction is problem.direction and c.dtype is problem.dtype
                    and c.ndim == ndim]
        from tiledispatch.native.rules import rule_set_configs

        return rule_set_configs(self.rule_set, self.spec.arch, directions=[problem.direction],
                                dtypes=[problem.dtype], ndims=[ndim])

    def rank_local(self, problem: ConvProblem) -> list[tuple[KernelConfig, float]]:
        """Every runnable kernel with its predicted µs, best first (ties in name order)."""
        configs = [c for c in self.pool_for(problem) if self.runnable(c, problem)]
        if not configs:
            return []
        from tiledispatch.models.predictor import rank

        # The ranker's order where there is one, on the problem the candidates run (its canonical form).
        ranking = rank(self.predictor_for(problem), problem.canonical, configs)
        return [(configs[i], float(ranking.predicted_us[i])) for i in ranking.order]

    def _select_local(self, problem: ConvProblem, start: float) -> Choice:
        ranked = self.rank_local(problem)
        if not ranked:
            source = f"registry/rule set '{self.rule_set}'" if self._pool is None else "the local kernel pool"
            raise SelectionError(f"no kernel of {source} supports {problem.key}")
        config, predicted = ranked[0]
        return Choice(config, f"local:{self.predictor_for(problem).name}", time.perf_counter() - start, predicted)

    # ---- remote ----------------------------------------------------------------------------------
    def _client_instance(self) -> Any:
        if self._client is None:
            from tiledispatch.client import Client

            self._client = Client(self.target, timeout=self.timeout_s, retries=0, **self._client_options)
        return self._client

    def _select_remote(self, problem: ConvProblem, start: float) -> Choice | None:
        try:
            selection = self._client_instance().select(problem.to_dict(), top_k=self.top_k, timeout=self.timeout_s)
        except Exception as error:  # the client's typed errors, or grpc/transport failures
            self._remote_failed(error)
            return None
        if self._remote_down_until:
            self._remote_down_until = 0.0
            log.info("tiledispatch: kernel selection service at %s answers again; selecting remotely",
                     self._target_text())
        for candidate in selection.candidates:
            try:
                config = parse_kernel_name(candidate.kernel)
            except ConfigError:
                continue
            if self.runnable(config, problem):
                return Choice(config, f"remote:{selection.source}", time.perf_counter() - start,
                              candidate.predicted_us)
        self._warn_once("not-runnable", "tiledispatch: none of the %d kernels the service at %s ranked for %s is "
                        "runnable in this process (not in the local registry?); selecting locally",
                        len(selection.candidates), self._target_text(), problem.key)
        self.stats.fallbacks += 1
        return None

    def _remote_failed(self, error: Exception) -> None:
        code = getattr(getattr(error, "code", None), "name", "") or type(error).__name__
        message = getattr(error, "message", "") or str(error)
        self.stats.fallbacks += 1
        if code in UNREACHABLE_CODES:
            already_down = self._remote_down_until > 0.0
            self._remote_down_until = time.monotonic() + self.retry_after_s
            if not already_down:
                log.warning("tiledispatch: kernel selection service at %s is unreachable (%s: %s); choosing "
                            "kernels locally (trained model or %s fallback); next try in %.0f s",
                            self._target_text(), code, message.splitlines()[0] if message else "",
                            self.predictor.name, self.retry_after_s)
            return
        self._warn_once(code, "tiledispatch: the kernel selection service at %s refused a Select (%s: %s); "
                        "choosing that kernel locally (trained model or %s fallback)", self._target_text(), code,
                        message, self.predictor.name)

    def _warn_once(self, kind: str, message: str, *args: Any) -> None:
        with self._lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        log.warning(message, *args)

    def _target_text(self) -> str:
        if self.target:
            return str(self.target)
        return str(getattr(self._client, "target", "") or "(client)")
