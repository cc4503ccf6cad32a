"""The problems of the models' training and validation lists that a bf16 channel-padded kernel of ``default`` runs
(``pad_channels``: C/G or K/G not a multiple of 8, padding at most doubling the work), in the lists' own format
(``problems``, ``meta``, ``source``), for ``bench/gpu/call.sh padded_rows``:

    python bench/gpu/padded_problems.py   # writes models/data/problems/padded/{train,validation}_{dir}.json
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from tiledispatch.native.problem import ConvProblem, Direction
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import is_supported

LISTS = Path("models/data/problems")


def main() -> int:
    out = LISTS / "padded"
    out.mkdir(exist_ok=True)
    for direction in Direction:
        padded = [c for c in rule_set_configs("default", directions=[direction], dtypes=["bf16"]) if c.pad_channels]
        for kind in ("train", "validation"):
            document = json.loads((LISTS / f"{kind}_{direction.value}.json").read_text())
            keep = [i for i, entry in enumerate(document["problems"])
                    if any(is_supported(ConvProblem.from_dict(entry), c) for c in padded)]
            subset = {"source": f"{kind}_{direction.value}.json: the problems a bf16 pad_channels kernel runs",
                      "problems": [document["problems"][i] for i in keep],
                      "meta": [document["meta"][i] for i in keep]}
            target = out / f"{kind}_{direction.value}.json"
            handle, temporary = tempfile.mkstemp(dir=out, suffix=".tmp")
            with os.fdopen(handle, "w") as stream:
                json.dump(subset, stream)
            os.replace(temporary, target)
            print(target, len(keep), "of", len(document["problems"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
