"""The stride-2 forward problems the halo family newly runs (session 32's ``strided`` program), of the shipped bf16
forward model's measured training and validation folders (``bench/gpu/refresh_sets.json``): a problem list per kind
for the completion sweep that times halo on them (``call.sh halo_data``), so the sweep plans over these problems
only, not the whole 3,000-problem list.

    python bench/gpu/strided_halo_problems.py   # models/data/problems/strided_halo_{train,validation}_fwd.json
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from tiledispatch.native.configs import Family
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.registry import write_json_atomic
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import is_supported

ROOT = Path(__file__).resolve().parents[2]


def measured_keys(folders: list[str]) -> set[str]:
    keys: set[str] = set()
    for folder in folders:
        for shard in sorted((ROOT / folder).glob("rows-*.parquet")):
            keys.update(pq.read_table(shard, columns=["problem_key"]).column("problem_key").to_pylist())
    return keys


def main() -> None:
    sets = json.loads((ROOT / "bench/gpu/refresh_sets.json").read_text())["sets"]["fwd"]
    halo = [c for c in rule_set_configs("default", "sm_90") if c.family is Family.HALO
            and c.direction.value == "fwd" and c.dtype.value == "bf16"]
    for kind in ("train", "validation"):
        source = json.loads((ROOT / f"models/data/problems/{kind}_fwd.json").read_text())
        measured = measured_keys(sets[kind])
        keep = []
        for index, fields in enumerate(source["problems"]):
            problem = ConvProblem.from_dict(fields)
            if (tuple(problem.stride) == (2, 2) and problem.key in measured
                    and any(is_supported(problem, c) for c in halo)):
                keep.append(index)
        out = ROOT / f"models/data/problems/strided_halo_{kind}_fwd.json"
        write_json_atomic(out, {"meta": [source["meta"][i] for i in keep],
                                "problems": [source["problems"][i] for i in keep],
                                "source": {"derived_from": f"models/data/problems/{kind}_fwd.json",
                                           "by": "bench/gpu/strided_halo_problems.py",
                                           "rule": "stride (2, 2), measured in the shipped forward model's "
                                                   f"{kind} folders, some default bf16 halo kernel supports it"}})
        print(f"{out.relative_to(ROOT)}: {len(keep)} of {len(source['problems'])} problems")


if __name__ == "__main__":
    main()
