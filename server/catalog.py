"""The kernels this server chooses from: the compiled registry when one is built for the arch,
else the rule set's configs (``default``), minus quarantined kernels.

Configs are indexed by (direction, dtype, ndim), so a problem's support check only looks at the
kernels that could possibly match (a few hundred, not the whole registry).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tiledispatch.native.arch import ArchSpec
from tiledispatch.native.configs import ConfigError, Family, KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import Support, is_supported

from .errors import NotFound

log = logging.getLogger("tiledispatch.server.catalog")


@dataclass(frozen=True)
class KernelEntry:
    """A kernel as ListKernels shows it."""

    config: KernelConfig
    support: Support | None  # None: no problem was given
    quarantined: bool


class Catalog:
    def __init__(self, configs: Iterable[KernelConfig], source: str, quarantined: dict[str, str] | None = None,
                 builds: dict[str, str] | None = None):
        self.configs = tuple(sorted(configs, key=lambda c: c.name))
        self.source = source
        #: kernel name -> build id of the registry's binaries (native.registry.build_id); empty without a
        #: registry (the rule set's kernels are compiled on demand: no build to name)
        self.builds = dict(builds or {})
        self.by_name = {c.name: c for c in self.configs}
        index: dict[tuple[Direction, DType, int], list[KernelConfig]] = defaultdict(list)
        for config in self.configs:
            index[(config.direction, config.dtype, config.ndim)].append(config)
        self._index = {key: tuple(value) for key, value in index.items()}
        self._quarantined = dict(quarantined or {})
        self._lock = threading.Lock()

    @classmethod
    def load(cls, registry_dir: Path | None, spec: ArchSpec, rule_set: str = "default",
             quarantined: dict[str, str] | None = None) -> Catalog:
        """The built registry in ``registry_dir`` if there is one, else ``rule_set`` for the arch."""
        if registry_dir and Path(registry_dir).exists():
            try:
                registry_module = importlib.import_module("tiledispatch.native.registry")
                registry = registry_module.Registry.load(registry_dir, spec.arch)
                return cls(registry.configs, f"registry:{registry_dir}", quarantined, registry.builds)
            except (ImportError, OSError, ValueError, KeyError, RuntimeError) as error:
                log.warning("no usable kernel registry; using the rule set",
                            extra={"registry_dir": str(registry_dir), "error": str(error), "rule_set": rule_set})
        return cls(rule_set_configs(rule_set, spec.arch), f"rule_set:{rule_set}", quarantined)

    # ---- lookup ----------------------------------------------------------------------------------
    def get(self, name: str, field: str = "kernel") -> KernelConfig:
        """The kernel called ``name``; NOT_FOUND (naming the field) when it is not in the catalog."""
        config = self.by_name.get(name)
        if config is not None:
            return config
        try:
            parse_kernel_name(name)
        except ConfigError as error:
            raise NotFound(f"unknown kernel {name!r} ({error})", field=field) from None
        raise NotFound(f"kernel {name!r} is well-formed but not in this server's catalog ({self.source})",
                       field=field)

    def for_problem(self, problem: ConvProblem) -> tuple[KernelConfig, ...]:
        """The kernels of the problem's direction, dtype and rank: of its :attr:`~ConvProblem.canonical`
        form, so 2D kernels for a 3D problem that is a 2D one."""
        return self._index.get((problem.direction, problem.dtype, problem.canonical.ndim), ())

    def candidates(self, problem: ConvProblem, families: frozenset[Family] = frozenset()) -> list[KernelConfig]:
        """Kernels that support ``problem`` (of ``families`` when given), quarantined ones left out."""
        quarantined = self._quarantined
        return [c for c in self.for_problem(problem)
                if (not families or c.family in families) and c.name not in quarantined and is_supported(problem, c)]

    def listing(self, *, direction: Direction | None = None, dtype: DType | None = None, ndim: int = 0,
                families: frozenset[Family] = frozenset(), problem: ConvProblem | None = None,
                include_unsupported: bool = False) -> list[KernelEntry]:
        pool = self.for_problem(problem) if problem is not None else self.configs
        out = []
        for config in pool:
            if ((direction and config.direction is not direction) or (dtype and config.dtype is not dtype)
                    or (ndim and config.ndim != ndim) or (families and config.family not in families)):
                continue
            support = is_supported(problem, config) if problem is not None else None
            if support is not None and not support and not include_unsupported:
                continue
            out.append(KernelEntry(config, support, config.name in self._quarantined))
        return out

    # ---- quarantine ------------------------------------------------------------------------------
    def quarantine(self, name: str, reason: str) -> None:
        with self._lock:  # copy-on-write: readers iterate a dict that never changes under them
            self._quarantined = {**self._quarantined, name: reason}

    def release(self, name: str) -> str | None:
        """Return a kernel to selection; the reason it was quarantined, or ``None`` if it was not."""
        with self._lock:
            remaining = dict(self._quarantined)
            reason = remaining.pop(name, None)
            self._quarantined = remaining
        return reason

    def quarantine_reason(self, name: str) -> str | None:
        return self._quarantined.get(name)

    @property
    def quarantined_count(self) -> int:
        return len(self._quarantined)
