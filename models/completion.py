"""Declaring a finished sweep a completion of earlier measurement folders.

``tiledispatch bench --complete EARLIER...`` plans a completion sweep: for the problems measured in the earlier
folders, only the kernels they lack, and its manifest lists what it ``completes`` (``models.dataset.read_rows``
then lets it share those problems). A sweep run instead with ``--problems`` (a subset of the measured lists) and
``--kernels`` (only kernels added since) times those kernels without needing the earlier folders on the GPU
machine (session 36: the three directions' folders together exceed what one device call carries), and the subset
may hold problems no earlier folder measured (a list's problems are not all measured: validation folders hold the
first 100 of each list). This module checks, after the fact, what ``--complete`` guarantees — none of the folder's
(problem, kernel) pairs is in the earlier folders — counts its problems they measured, and records the declaration
in ``completes.json`` beside the shards (atomic). The sweep's rows and manifest are not touched; ``read_rows`` reads
a declared completion's rows of the measured problems only (alone, the others would be problems timed on a handful
of new kernels).

    python -m tiledispatch.models.completion DIR --completes EARLIER...
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: The declaration file (``read_rows`` reads it as it reads a manifest's ``completes``).
COMPLETES_FILE = "completes.json"


def _pairs(directory: Path) -> set[tuple[str, str]]:
    import pandas as pd

    shards = sorted(directory.glob("rows-*.parquet"))
    if not shards:
        raise FileNotFoundError(f"{directory}: no rows-*.parquet shards")
    pairs: set[tuple[str, str]] = set()
    for shard in shards:
        frame = pd.read_parquet(shard, columns=["problem_key", "kernel"])
        pairs.update(zip(frame["problem_key"].tolist(), frame["kernel"].tolist()))
    return pairs


def declare(directory: Path, earlier: Iterable[Path | str]) -> dict[str, Any]:
    """Check that ``directory`` completes ``earlier`` (its problems all measured there, none of its kernels) and
    write ``completes.json``; raise ``ValueError`` naming the first problem or kernel that breaks the rule."""
    from tiledispatch.native.registry import write_json_atomic

    directory = Path(directory)
    earlier = [str(Path(e)) for e in earlier]
    if not earlier:
        raise ValueError("completes: name the folders the sweep completes")
    if (directory / "manifest.json").exists() and json.loads((directory / "manifest.json").read_text()).get(
            "completes"):
        raise ValueError(f"{directory}: its manifest already lists what it completes")
    mine = _pairs(directory)
    before: set[tuple[str, str]] = set()
    for folder in earlier:
        before |= _pairs(Path(folder))
    measured = {key for key, _ in before}
    problems = {key for key, _ in mine}
    if not problems & measured:
        raise ValueError(f"{directory}: none of its {len(problems)} problems is measured in the folders it would "
                         "complete; a completion adds kernels to measured problems")
    twice = sorted(mine & before)
    if twice:
        raise ValueError(f"{directory}: kernel {twice[0][1]} of {twice[0][0]} is measured there already; a "
                         "completion only adds kernels")
    record = {"completes": earlier, "problems": len(problems & measured),
              "rows": sum(key in measured for key, _ in mine),
              "unmeasured_problems": len(problems - measured),
              "declared": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "checked": "no (problem, kernel) pair of it in `completes` (what `tiledispatch bench --complete` "
                         "plans); `problems` and `rows` count those of problems measured there, which read_rows "
                         "reads"}
    write_json_atomic(directory / COMPLETES_FILE, record)
    return record


def declared(directory: Path | str) -> bool:
    """Whether ``directory`` is a completion declared by :func:`declare` (not planned by ``--complete``)."""
    return (Path(directory) / COMPLETES_FILE).exists()


def completed_folders(directory: Path | str, manifest: dict[str, Any] | None = None) -> list[str]:
    """The folders ``directory`` completes: its manifest's ``completes`` (a ``--complete`` sweep), else its
    ``completes.json`` (declared); [] for a plain sweep."""
    directory = Path(directory)
    if manifest is None:
        path = directory / "manifest.json"
        manifest = json.loads(path.read_text()) if path.exists() else {}
    if manifest.get("completes"):
        return list(manifest["completes"])
    declared = directory / COMPLETES_FILE
    return list(json.loads(declared.read_text())["completes"]) if declared.exists() else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tiledispatch.models.completion",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--completes", nargs="+", required=True, metavar="EARLIER")
    args = parser.parse_args(argv)
    try:
        record = declare(args.directory, args.completes)
    except (ValueError, FileNotFoundError) as error:
        print(f"completion: {error}", file=sys.stderr)
        return 1
    print(f"{args.directory}: completes {len(record['completes'])} folders ({record['problems']} problems, "
          f"{record['rows']} new (problem, kernel) pairs; {record['unmeasured_problems']} problems measured in "
          "none of them, left out of training)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
