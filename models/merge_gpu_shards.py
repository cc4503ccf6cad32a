"""Merge a multi-GPU collection (``bench/gpu/collect_gpus.sh``) into one folder per problem list.

The collection leaves one bench folder per list and GPU, ``<list>.g<i>`` (GPU ``i`` measured every
N-th problem, ``--shard i/N``), each seeded with copies of earlier sessions' shards (``rows-seed-*``,
so that their problems were skipped). This writes, per list, ``<out>/<list>/``: the GPUs' **new**
shards byte for byte (parquet as the benchmark wrote them, never re-encoded), renumbered
``rows-00000.parquet``… (GPU 0's first), and a ``manifest.json`` that is GPU 0's bench manifest plus

* ``sittings[]``: every GPU's sittings, each with its ``gpu`` and ``shard``;
* ``sharding``: how many GPUs and how the folder was made (``--how``);
* ``shards[]``: per GPU its shard, its own measured ceilings, first date, problems, rows, sittings and
  which original file each merged shard was (``files``).

Folders without a GPU tag (a completion sweep's, ``bench --complete``) are copied as they are.
Lists with no new shard on any GPU are skipped. Nothing is written unless every list merges: the
result is staged beside ``<out>`` and renamed into place.

    python -m tiledispatch.models.merge_gpu_shards /tmp/data models/data/measured/h200_s5 \\
        --how "bench/gpu/collect_gpus.sh on an NVIDIA H200 x4 machine ..."
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

_TAGGED = re.compile(r"(?P<list>.+)\.g(?P<gpu>\d+)")
_NEW_SHARD = re.compile(r"rows-\d{5}\.parquet")


def _rows_and_problems(shards: list[Path]) -> tuple[int, int]:
    import pyarrow.parquet as pq

    keys: set[str] = set()
    rows = 0
    for shard in shards:
        column = pq.read_table(shard, columns=["problem_key"]).column("problem_key").to_pylist()
        rows += len(column)
        keys.update(column)
    return rows, len(keys)


def merge_list(folders: dict[int, Path], out: Path, how: str, gpus: int) -> dict[str, Any] | None:
    """Merge one list's per-GPU folders (gpu index -> folder; a GPU that never reached the list has
    none) of a ``gpus``-GPU collection into ``out``; None when nothing is new."""
    new = {gpu: sorted(p for p in folder.iterdir() if _NEW_SHARD.fullmatch(p.name))
           for gpu, folder in sorted(folders.items())}
    if not any(new.values()):
        return None
    manifests = {gpu: json.loads((folders[gpu] / "manifest.json").read_text()) for gpu in new if new[gpu]}
    first = manifests[min(manifests)]
    merged = {k: v for k, v in first.items() if k != "sittings"}
    merged["sittings"] = [{**s, "gpu": gpu, "shard": f"{gpu}/{gpus}"}
                          for gpu, m in sorted(manifests.items()) for s in m.get("sittings", [])]
    merged["sharding"] = {"gpus": gpus, "how": how,
                          "ceilings": "top-level `ceilings` are the first GPU's; each GPU measured its own "
                                      "(`shards[].ceilings`)",
                          "sittings": "`sittings[].problems` is the number a sitting set out to measure; a sitting "
                                      "ended by the deadline measured fewer"}
    out.mkdir(parents=True)
    merged["shards"] = []
    index = 0
    for gpu, shards in sorted(new.items()):
        if not shards:
            continue
        files = {}
        for shard in shards:
            name = f"rows-{index:05d}.parquet"
            shutil.copyfile(shard, out / name)
            files[name] = f"{folders[gpu].name}/{shard.name}"
            index += 1
        rows, problems = _rows_and_problems(shards)
        manifest = manifests[gpu]
        merged["shards"].append({"gpu": gpu, "shard": f"{gpu}/{gpus}", "date": manifest.get("date"),
                                 "ceilings": manifest.get("ceilings"), "problems": problems, "rows": rows,
                                 "sittings": len(manifest.get("sittings", [])), "files": files})
    (out / "manifest.json").write_text(json.dumps(merged, indent=1) + "\n")
    return merged


def merge(data: Path, out: Path, how: str, gpus: int | None = None) -> list[str]:
    """Merge every list of ``data`` into ``out`` (which must not exist); returns the lists written."""
    if out.exists():
        raise FileExistsError(f"{out}: exists; merge writes a new session folder")
    lists: dict[str, dict[int, Path]] = {}
    plain: list[Path] = []
    for folder in sorted(p for p in data.iterdir() if p.is_dir()):
        match = _TAGGED.fullmatch(folder.name)
        if match:
            lists.setdefault(match["list"], {})[int(match["gpu"])] = folder
        elif any(folder.glob("rows-*.parquet")):
            plain.append(folder)
    staging = out.with_name(f".{out.name}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    written = []
    try:
        for name, folders in sorted(lists.items()):
            count = gpus or max(folders) + 1
            if not set(folders) <= set(range(count)):
                raise ValueError(f"{name}: GPU folders {sorted(folders)}, expected a part of 0..{count - 1}")
            if merge_list(folders, staging / name, how, count) is not None:
                written.append(name)
        for folder in plain:
            shutil.copytree(folder, staging / folder.name)
            written.append(folder.name)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Merge a multi-GPU collection into one folder per problem list.")
    parser.add_argument("data", type=Path, help="the collection's data folder (<list>.g<i> folders)")
    parser.add_argument("out", type=Path, help="new session folder, e.g. models/data/measured/h200_s5")
    parser.add_argument("--how", required=True, help="how the data was collected (kept in each manifest)")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs of the collection (default: from the tags)")
    args = parser.parse_args(argv)
    for name in merge(args.data, args.out, args.how, args.gpus):
        print(f"merge: {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
