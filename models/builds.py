"""Which binary each measured row timed: kernel build ids for measurement folders.

A kernel name names a config, not code: when a kernel's source changes (a new walk, constants compiled in),
its name stays and the rows measured before time a binary that no longer exists. ``native.registry.build_id``
names the binary (a hash of its programs' artifact keys: source, Triton, target, constants, signature,
warps, stages). Benchmark rows record it since session 7 (``kernel_build`` column); for folders measured
earlier this module recomputes it from the source at the commit the folder's manifest names (a git
worktree of that commit, the current key recipe applied to that commit's programs, no compile), and
writes ``kernel_builds.json`` beside the shards — derived metadata: the measurements are not touched.

``python -m tiledispatch.models.builds record DIR...`` writes those files; ``... stale DIR...`` counts, per
folder and family, the rows whose build differs from what this checkout would build (the rows a retrain
should not learn from, and the kernels to re-measure).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiledispatch.native.build_ids import BUILDS_FILE, build_ids, folder_builds


def _worktree(repo: Path, commit: str) -> Path:
    """A detached worktree of ``commit`` under the system temp folder (made once per commit)."""
    path = Path(tempfile.gettempdir()) / "tiledispatch-worktrees" / commit
    if not (path / "native").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--force", str(path), commit],
                       check=True, capture_output=True, text=True)
    return path


def _kernels(directory: Path) -> list[str]:
    import pandas as pd

    names: set[str] = set()
    for shard in sorted(directory.glob("rows-*.parquet")):
        names.update(pd.read_parquet(shard, columns=["kernel"])["kernel"].tolist())
    return sorted(n for n in names if n.startswith("gconv_"))


def record(directory: Path, repo: Path, arch: str = "sm_90") -> Path:
    """Write ``kernel_builds.json`` for a folder measured before rows carried builds (atomic)."""
    from tiledispatch.native.registry import write_json_atomic

    manifest = json.loads((directory / "manifest.json").read_text())
    commit = manifest.get("git_commit", "")
    if not commit or commit == "unknown":
        raise ValueError(f"{directory}: manifest names no git_commit; its builds cannot be recomputed")
    checkout = _worktree(repo, commit)
    builds = build_ids(_kernels(directory), arch, checkout)
    path = directory / BUILDS_FILE
    write_json_atomic(path, {"git_commit": commit, "arch": arch, "recipe": "native.build_ids (session 7)",
                             "builds": builds})
    return path


def attach(frame: Any, directory: Path) -> Any:
    """``frame`` with a ``kernel_build`` column: the rows' own where recorded, else ``kernel_builds.json``'s,
    else '' (not known)."""
    column = frame["kernel_build"].fillna("") if "kernel_build" in frame.columns else None
    derived = folder_builds(directory)
    from_file = frame["kernel"].map(lambda name: derived.get(name, ""))
    frame = frame.copy()
    frame["kernel_build"] = from_file if column is None else column.where(column != "", from_file)
    return frame


def stale(frame: Any, current: Mapping[str, str]) -> Any:
    """Boolean mask: rows of our kernels whose build is known and is not ``current[kernel]``."""
    known = frame["kernel_build"] != ""
    return known & (frame["kernel"].map(lambda name: current.get(name, "")) != frame["kernel_build"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("record", "stale"))
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--repo", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)
    if args.action == "record":
        for directory in args.dirs:
            print(f"{record(directory, args.repo, args.arch)}", flush=True)
        return 0
    from tiledispatch.models.dataset import read_rows

    frame, _ = read_rows(args.dirs)
    ours = frame[frame["kernel"].str.startswith("gconv_")]
    current = build_ids(ours["kernel"].unique(), args.arch, args.repo)
    mask = stale(ours, current)
    print(f"{int(mask.sum())} of {len(ours)} kernel rows time another build than this checkout's "
          f"({int((ours['kernel_build'] == '').sum())} rows of unknown build)")
    for (family, direction, ndim), count in sorted(Counter(zip(ours["family"][mask], ours["direction"][mask],
                                                                ours["ndim"][mask])).items()):
        print(f"  {family:8s} {direction:10s} {ndim}d: {count} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
