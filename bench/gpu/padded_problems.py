"""The problems of the models' training and validation lists that a bf16 channel-padded kernel of ``default`` runs
(``pad_channels``: C/G or K/G not a multiple of 8, or C/G = 1 and G not a multiple of 8, padding at most doubling
the work) and that the measured folders of ``bench/gpu/refresh_sets.json`` timed (a completion row counts only for
a problem its folders measured), in the lists' own format (``problems``, ``meta``, ``source``), for
``bench/gpu/call.sh padded_rows``:

    python bench/gpu/padded_problems.py   # writes models/data/problems/padded/{train,validation}_{dir}.json
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from tiledispatch.native.problem import ConvProblem, Direction
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import is_supported

LISTS = Path("models/data/problems")
SETS = Path("bench/gpu/refresh_sets.json")


def measured_keys(folders: list[str]) -> set[str]:
    """The problem keys the measured folders hold rows of."""
    return {key for folder in folders for path in sorted(Path(folder).glob("*.parquet"))
            for key in pq.read_table(path, columns=["problem_key"]).column("problem_key").unique().to_pylist()}


def main() -> int:
    out = LISTS / "padded"
    out.mkdir(exist_ok=True)
    sets = json.loads(SETS.read_text())["sets"]
    for direction in Direction:
        padded = [c for c in rule_set_configs("default", directions=[direction], dtypes=["bf16"]) if c.pad_channels]
        for kind in ("train", "validation"):
            document = json.loads((LISTS / f"{kind}_{direction.value}.json").read_text())
            # (not the padded sweeps' own folders: a completion row counts where the other folders measured)
            measured = measured_keys([f for f in sets[direction.value][kind] if "complete_padded" not in f])
            problems = [ConvProblem.from_dict(entry) for entry in document["problems"]]
            keep = [i for i, problem in enumerate(problems)
                    if problem.key in measured and any(is_supported(problem, c) for c in padded)]
            subset = {"source": f"{kind}_{direction.value}.json: the problems a bf16 pad_channels kernel runs that "
                                "the refresh_sets.json folders measured",
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
