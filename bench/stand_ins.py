"""Stand-in compiled binaries for the host-overhead benchmarks (``launch_overhead.py``,
``torch_host_overhead.py``): launches that record their arguments and run nothing, so the host path
is timed without a GPU. Imports ``tiledispatch`` only when a loader is used, from whichever tree the
caller put first on ``sys.path`` (``torch_host_overhead.py`` times an older revision that way)."""

from __future__ import annotations


class StandIn:
    """A compiled binary that records its last arguments and runs nothing."""

    def __init__(self):
        self.calls = 0
        self.last: tuple = ()

    def __getitem__(self, grid):
        return self._record

    def _record(self, *args):
        self.calls += 1
        self.last = args


def stand_in_loader():
    """``loader(config) -> {program: StandIn}``, one table per kernel (as a registry loads them)."""
    from tiledispatch.native import launch

    tables: dict[str, dict] = {}

    def loader(config):
        if config.name not in tables:
            tables[config.name] = {name: StandIn() for name in launch.template_for(config).programs(config)}
        return tables[config.name]

    return loader
