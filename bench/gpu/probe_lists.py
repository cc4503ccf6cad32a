"""The kernel-list files ``config_probe.py --kernels`` reads: ``{"source": ..., "problems": {key: [[kernel, null],
...]}}``, written by the probe-list generators (``neighbor_probe_kernels.py``, ``dwrun7_probe_kernels.py``,
``warp_twin_probe_kernels.py``)."""

from __future__ import annotations

import json
from pathlib import Path


def write_probe_list(path: Path, source: str, problems: dict[str, list[str]]) -> None:
    """Write ``problems`` (problem key -> kernel names) to ``path`` with ``source`` (how the list was made) and print
    its size."""
    listed = {key: [[name, None] for name in names] for key, names in problems.items()}
    path.write_text(json.dumps({"source": source, "problems": listed}, indent=1) + "\n")
    print(f"{sum(len(v) for v in listed.values())} (problem, kernel) pairs, "
          f"{len({n for v in listed.values() for n, _ in v})} kernels -> {path}")
