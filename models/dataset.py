"""Measured rows from ``tiledispatch bench`` output directories, as training/validation tables.

A data directory holds ``rows-*.parquet`` shards and a ``manifest.json`` (``native/bench.py``).
Rows are problems × kernels (and cuDNN). Times are CUDA-graph replay (``graph_us``, device time);
``status`` ``ok`` rows are checked against the float64 reference and fully timed. ``pruned`` rows
(``--oracle-only`` sweeps) carry only a 3-call event estimate of a kernel known to be ≥ 1.5× slower
than the best so far; they are kept for training when asked (``include_pruned``) with that
estimate as target, never for the oracle. That estimate is per-call event time, which includes the host's
launch cost: where the device is the slower side it is the kernel's time, but on a problem of a few µs it is mostly
the launch (event 25–120 µs against a device time of 2–4 µs), ten times the unit of the timed rows beside it.
``pruned_min_device_share`` keeps a problem's pruned rows only where its fastest timed row's device time is at
least that share of its event time.

cuDNN rows: kernel ``cudnn`` is ``cudnn.benchmark=True`` (autotuned); ``cudnn_heuristic`` (when
the bench records it) is ``cudnn.benchmark=False`` — cuDNN's own heuristic pick.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tiledispatch.models import builds
from tiledispatch.models import completion as completion_module
from tiledispatch.native.configs import KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem

CUDNN_AUTOTUNED = "cudnn"
CUDNN_HEURISTIC = "cudnn_heuristic"

_PROBLEM_COLUMNS = ("problem_key", "direction", "dtype", "batch", "groups", "in_channels", "out_channels",
                    "input_size", "filter_size", "stride", "dilation", "pad_begin", "pad_end")


def _dims(text: str) -> list[int]:
    return [int(v) for v in str(text).split("x")]


def problem_from_row(row: Any) -> ConvProblem:
    """Rebuild the problem from a row's problem columns (checked against its key)."""
    problem = ConvProblem(direction=row.direction, dtype=row.dtype, batch=int(row.batch), groups=int(row.groups),
                          in_channels=int(row.in_channels), out_channels=int(row.out_channels),
                          input_size=_dims(row.input_size), filter_size=_dims(row.filter_size),
                          stride=_dims(row.stride), dilation=_dims(row.dilation), pad_begin=_dims(row.pad_begin),
                          pad_end=_dims(row.pad_end))
    if problem.key != row.problem_key:
        raise ValueError(f"problem_key {row.problem_key!r} does not match its columns ({problem.key!r})")
    return problem


def read_rows(data_dirs: Iterable[Path | str]) -> tuple[Any, list[dict]]:
    """All rows of the directories (pandas DataFrame) and their manifests, each with its ``path``
    and the ``problems`` and ``rows`` read from it. Several directories are one data set (e.g. two
    sessions' measurements of the same lists); a problem found in two of them is refused
    (``ValueError`` naming both): its kernels would mix two sittings' times and count twice. The one
    exception is a completion folder (``tiledispatch bench --complete``, its manifest lists what it
    ``completes``; or a sweep of only new kernels declared one, ``models.completion``, whose rows of problems no
    plain folder read here measured are left out): it holds kernels added to the rule set after a problem was
    measured, and may share that problem with another folder as long as no kernel of it is in both. A refresh folder
    (``--refresh``, manifest ``refreshes``) re-measured kernels whose code changed: its rows replace the
    rows of the same problem and kernel read before it (list it after the folders it refreshes).
    Every frame gets a ``kernel_build`` column (``models.builds.attach``)."""
    import pandas as pd

    frames, manifests = [], []
    owner: dict[str, str] = {}           # problem key -> the plain (not completion) directory it came from
    kernels_of: dict[str, dict[str, str]] = {}  # problem key -> kernel -> directory, of every folder so far
    for directory in data_dirs:
        directory = Path(directory)
        shards = sorted(directory.glob("rows-*.parquet"))
        if not shards:
            raise FileNotFoundError(f"{directory}: no rows-*.parquet shards")
        frame = builds.attach(pd.concat([pd.read_parquet(s) for s in shards], ignore_index=True), directory)
        manifest_file = directory / "manifest.json"
        manifest = json.loads(manifest_file.read_text()) if manifest_file.exists() else {}
        completion = bool(completion_module.completed_folders(directory, manifest))
        refreshing = bool(manifest.get("refreshes"))
        mine: dict[str, set[str]] = {}
        for key, kernel in zip(frame["problem_key"].tolist(), frame["kernel"].tolist()):
            mine.setdefault(key, set()).add(kernel)
        if refreshing:  # its rows replace those of the same (problem, kernel) read so far
            replaced = set(zip(frame["problem_key"].tolist(), frame["kernel"].tolist()))
            # A boolean array, not a list: an empty list would select no columns of a frame an earlier refresh
            # emptied, and the next refresh would find no problem_key in it.
            frames = [f[np.fromiter((pair not in replaced
                                     for pair in zip(f["problem_key"].tolist(), f["kernel"].tolist())),
                                    dtype=bool, count=len(f))]
                      for f in frames]
        for key, kernels in ({} if refreshing else mine).items():
            if not completion and key in owner:
                raise ValueError(f"{directory}: problem(s) also in {owner[key]} (e.g. {key}); "
                                 "each measured problem must come from one directory")
            seen = kernels_of.get(key, {})
            twice = sorted(kernels & seen.keys())
            if twice:
                raise ValueError(f"{directory}: kernel {twice[0]} of {key} is also measured in {seen[twice[0]]}; "
                                 "a completion folder may only add kernels")
        for key, kernels in mine.items():
            if not (completion or refreshing):
                owner[key] = str(directory)
            kernels_of.setdefault(key, {}).update(dict.fromkeys(kernels, str(directory)))
        frames.append(frame)
        manifest.update(path=str(directory), problems=len(mine), rows=len(frame))
        manifests.append(manifest)
    for i, manifest in enumerate(manifests):  # a declared completion: its rows of problems measured elsewhere
        if completion_module.declared(manifest["path"]):
            keep = frames[i]["problem_key"].isin(owner.keys()).to_numpy()
            frames[i] = frames[i][keep]
            manifest.update(problems=int(frames[i]["problem_key"].nunique()), rows=int(keep.sum()))
    return pd.concat(frames, ignore_index=True), manifests


@dataclass
class ProblemRows:
    """One problem's measured kernels: configs and times (µs), plus cuDNN where measured."""

    problem: ConvProblem
    configs: list[KernelConfig]
    time_us: np.ndarray          # training target per config (graph µs; event estimate if pruned)
    timed: np.ndarray            # bool: fully timed (status ok), usable for the oracle
    cudnn_us: float = float("nan")
    cudnn_heuristic_us: float = float("nan")

    @property
    def oracle_us(self) -> float:
        return float(self.time_us[self.timed].min()) if self.timed.any() else float("nan")


def _time(graph_us: float, event_median_us: float) -> float:
    graph = float(graph_us)
    return graph if graph == graph and graph > 0 else float(event_median_us)


def problem_rows(frame: Any, *, direction: str | None = None, dtype: str | None = None,
                 include_pruned: bool = False, kernels: frozenset[str] | None = None,
                 pruned_min_device_share: float = 0.0) -> list[ProblemRows]:
    """Group rows by problem (sorted by key, configs by name: a deterministic order). A problem's
    rows are read in frame order: a kernel's later ``ok`` row replaces an earlier one, a pruned row
    never replaces one already read; the last ``ok`` cuDNN row of each kind counts. ``kernels``
    (e.g. ``native.rules.rule_set_names("default")``) keeps only those kernels' rows (cuDNN rows stay): data
    measured with a registry that held more than the rule set is read as that rule set's.
    ``include_pruned`` with ``pruned_min_device_share`` s > 0: a problem keeps its pruned rows only if its
    fastest timed kernel's ``graph_us ≥ s · event_median_us`` (its event estimates are device time, not launch)."""
    if not 0.0 <= pruned_min_device_share <= 1.0:
        raise ValueError(f"pruned_min_device_share: a share of the event time in [0, 1], got {pruned_min_device_share}")
    from types import SimpleNamespace

    from tiledispatch.native.bench import device_dominated

    if direction:
        frame = frame[frame.direction == direction]
    if dtype:
        frame = frame[frame.dtype == dtype]
    if kernels is not None:
        frame = frame[frame.kernel.isin(kernels) | frame.kernel.isin((CUDNN_AUTOTUNED, CUDNN_HEURISTIC))]
    # Plain columns, one pass to group (row-wise pandas access costs seconds on ~10^4 rows).
    kernels, statuses = frame["kernel"].tolist(), frame["status"].tolist()
    graph = frame["graph_us"].to_numpy(dtype=np.float64)
    event = frame["event_median_us"].to_numpy(dtype=np.float64)
    rows_of: dict[str, list[int]] = {}
    for i, key in enumerate(frame["problem_key"].tolist()):
        rows_of.setdefault(key, []).append(i)
    out: list[ProblemRows] = []
    for key in sorted(rows_of):
        rows = rows_of[key]
        problem = problem_from_row(SimpleNamespace(**{c: frame[c].iat[rows[0]] for c in _PROBLEM_COLUMNS}))
        by_kernel: dict[str, tuple[float, bool]] = {}
        cudnn = heuristic = float("nan")
        for i in rows:
            kernel, status = kernels[i], statuses[i]
            if kernel == CUDNN_AUTOTUNED:
                cudnn = _time(graph[i], event[i]) if status == "ok" else cudnn
            elif kernel == CUDNN_HEURISTIC:
                heuristic = _time(graph[i], event[i]) if status == "ok" else heuristic
            elif status == "ok" or (include_pruned and status == "pruned"):
                t = _time(graph[i], event[i])
                if t == t and t > 0 and (kernel not in by_kernel or status == "ok"):
                    by_kernel[kernel] = (t, status == "ok")
        if pruned_min_device_share > 0 and any(not ok for _, ok in by_kernel.values()):
            timed = [i for i in rows if statuses[i] == "ok" and kernels[i] in by_kernel and graph[i] == graph[i]]
            fastest = min(timed, key=lambda i: graph[i], default=None)
            if fastest is None or not device_dominated(graph[fastest], event[fastest], pruned_min_device_share):
                by_kernel = {n: v for n, v in by_kernel.items() if v[1]}
        if problem.planar is not None:
            # A 3D problem that is a 2D one is selected as that 2D problem, among 2D kernels only
            # (ConvProblem.canonical): where it has 2D-kernel rows it is read so, its 3D kernels' rows left out.
            flat = {n: v for n, v in by_kernel.items() if parse_kernel_name(n).ndim == 2}
            if flat:
                problem, by_kernel = problem.planar, flat
        if not any(ok for _, ok in by_kernel.values()):
            continue
        names = sorted(by_kernel)
        out.append(ProblemRows(problem=problem, configs=[parse_kernel_name(n) for n in names],
                               time_us=np.array([by_kernel[n][0] for n in names]),
                               timed=np.array([by_kernel[n][1] for n in names]),
                               cudnn_us=cudnn, cudnn_heuristic_us=heuristic))
    return out


def data_hash(problems: Sequence[ProblemRows]) -> str:
    """sha256 over (problem key, kernel, target µs as float64 bits, timed): the training content,
    independent of shard layout and row order."""
    digest = hashlib.sha256()
    for pr in problems:
        for config, t, ok in zip(pr.configs, pr.time_us, pr.timed):
            digest.update(f"{pr.problem.key}|{config.name}|{float(t).hex()}|{int(ok)}\n".encode())
    return digest.hexdigest()


def manifest_summary(manifests: Sequence[dict]) -> dict[str, Any]:
    """Where and when the data was measured (from the bench manifests)."""
    keep = ("gpu_name", "gpu_sms", "driver", "cuda", "torch", "triton", "cudnn", "date", "rule_set", "arch",
            "git_commit")
    return {"datasets": [{"path": m.get("path", ""), "problems": m.get("problems"), "rows": m.get("rows"),
                          **{k: m.get(k) for k in keep},
                          "max_kernels": m.get("settings", {}).get("max_kernels"),
                          "oracle_only": m.get("settings", {}).get("oracle_only"),
                          "sittings": len(m.get("sittings", []))} for m in manifests],
            "gpus": sorted({str(m.get("gpu_name")) for m in manifests})}
