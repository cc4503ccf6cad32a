"""Build only the ``new_kernels`` of ``bench/gpu/refresh_sets.json`` for the given directions into a registry folder
(seconds, where the whole rule set takes minutes): what ``call.sh new`` completes the measured folders with.

    python bench/gpu/build_new.py DIR fwd bwd_data
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.registry import build

SETS = Path(__file__).with_name("refresh_sets.json")


def main(argv: list[str]) -> int:
    cache, directions = argv[0], argv[1:]
    sets = json.loads(SETS.read_text())["sets"]
    names = [name for direction in directions for name in sets[direction]["new_kernels"]]
    results = build([parse_kernel_name(name) for name in names], arch="sm_90", cache_dir=cache,
                    workers=os.cpu_count() or 4)
    print("built", len(results), "new kernels:", {r.kernel: r.status for r in results}, flush=True)
    return 0 if all(r.usable for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
