"""The problems of the models' training and validation lists that a chosen set of bf16 kernels runs and that the
measured folders of ``bench/gpu/refresh_sets.json`` timed (a completion row counts only for a problem its folders
measured), in the lists' own format (``problems``, ``meta``, ``source``), for ``bench/gpu/call.sh rows``:

- ``--select padded``: ``default``'s channel-padded kernels (``pad_channels``: C/G or K/G not a multiple of 8, or
  C/G = 1 and G not a multiple of 8, padding at most doubling the work);
- ``--select new``: the direction's ``new_kernels`` in ``refresh_sets.json`` (kernels no shipped model ranks yet).

    python bench/gpu/row_problems.py --select new   # writes models/data/problems/new/{train,validation}_{dir}.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow.parquet as pq

from tiledispatch.native.configs import KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem, Direction
from tiledispatch.native.registry import write_json_atomic
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import is_supported

LISTS = Path("models/data/problems")
SETS = Path("bench/gpu/refresh_sets.json")
#: The folders a selection's own sweeps wrote (``call.sh rows``), named by this part: the lists hold them after the
#: sweep, and a completion row counts only where the other folders measured.
OWN_FOLDERS = {"padded": "complete_padded", "new": "new_rows"}


def measured_keys(folders: list[str]) -> set[str]:
    """The problem keys the measured folders hold rows of."""
    return {key for folder in folders for path in sorted(Path(folder).glob("*.parquet"))
            for key in pq.read_table(path, columns=["problem_key"]).column("problem_key").unique().to_pylist()}


def selected_kernels(select: str, direction: Direction, sets: dict) -> list[KernelConfig]:
    """The bf16 kernels of ``select`` (padded | new) in ``direction``."""
    if select == "padded":
        return [c for c in rule_set_configs("default", directions=[direction], dtypes=["bf16"]) if c.pad_channels]
    return [parse_kernel_name(name) for name in sets[direction.value]["new_kernels"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--select", choices=("padded", "new"), required=True)
    args = parser.parse_args(argv)
    out = LISTS / args.select
    sets = json.loads(SETS.read_text())["sets"]
    described = {"padded": "a bf16 pad_channels kernel", "new": "a refresh_sets.json new_kernels kernel"}[args.select]
    for direction in Direction:
        kernels = selected_kernels(args.select, direction, sets)
        for kind in ("train", "validation"):
            document = json.loads((LISTS / f"{kind}_{direction.value}.json").read_text())
            measured = measured_keys([f for f in sets[direction.value][kind] if OWN_FOLDERS[args.select] not in f])
            problems = [ConvProblem.from_dict(entry) for entry in document["problems"]]
            keep = [i for i, problem in enumerate(problems)
                    if problem.key in measured and any(is_supported(problem, c) for c in kernels)]
            subset = {"source": f"{kind}_{direction.value}.json: the problems {described} runs that "
                                "the refresh_sets.json folders measured",
                      "problems": [document["problems"][i] for i in keep],
                      "meta": [document["meta"][i] for i in keep]}
            target = out / f"{kind}_{direction.value}.json"
            write_json_atomic(target, subset, indent=None, sort_keys=False)
            print(target, len(keep), "of", len(document["problems"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
