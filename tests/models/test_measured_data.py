"""The committed measurements under models/data/measured/: the shipped models' training data never
holds a validation problem (bf16 or fp16), sessions read together never measure one problem twice (a
completion folder only adds kernels), and the multi-GPU sessions (h200_s4: two GPUs, h200_s5: four)
are exactly their GPUs' shards."""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "models" / "data" / "measured"
PROBLEMS = ROOT / "models" / "data" / "problems"
ARTIFACTS = ROOT / "models" / "artifacts"
#: Sessions measured with the same kernel code (bb28fff; 6b041ff and fcf4d17 changed no kernel of
#: theirs, fcf4d17 added kernels to `default`), trained together.
SAME_KERNELS = ("h200_s3", "h200_s4", "h200_s5")
#: Multi-GPU sessions: (GPUs, commit measured).
SHARDED = {"h200_s4": (2, "6b041ff"), "h200_s5": (4, "fcf4d17")}
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")

pq = pytest.importorskip("pyarrow.parquet")


def _column(folder: Path, name: str) -> list:
    return [v for shard in sorted(folder.glob("rows-*.parquet")) for v in pq.read_table(shard, columns=[name])
            .column(name).to_pylist()]


def _shape(shape_key: str) -> str:
    """``models.dataset_plan.shape_of`` from a row's ``shape_key``: the convolution without its batch."""
    return "|".join(part for part in shape_key.split("|") if not part.startswith("n"))


@cache
def _validation(direction: str, suffix: str = "") -> tuple[list[str], frozenset[str], frozenset[str]]:
    """(problem keys in list order, their shapes, shapes of every torchvision problem of a held-out family)
    of ``validation_<direction><suffix>.json`` (suffix "_fp16": the fp16 list)."""
    from tiledispatch.models.dataset_plan import model_family, shape_of
    from tiledispatch.native.bench import load_problems
    from tiledispatch.native.problem import ConvProblem

    path = PROBLEMS / f"validation_{direction}{suffix}.json"
    problems = load_problems(path, [direction], "fp16" if suffix else "bf16")
    held = set(json.loads(path.read_text())["source"]["held_out_families"])
    crawl = json.loads((PROBLEMS / "torchvision.json").read_text())
    family_shapes = {shape_of(ConvProblem.from_dict(p)) for p, meta in zip(crawl["problems"], crawl["meta"])
                     if any(model_family(m) in held for m in meta["models"])}
    return [p.key for p in problems], frozenset(shape_of(p) for p in problems), frozenset(family_shapes)


def _shipped_training_sets() -> list[tuple[str, str]]:
    out = set()
    for manifest in ARTIFACTS.glob("*/*/train_manifest.json"):
        m = json.loads(manifest.read_text())
        out.update((d["path"], m["direction"]) for d in m["datasets"])
    return sorted(out)


@pytest.mark.parametrize("path,direction", _shipped_training_sets(), ids=lambda v: str(v))
def test_shipped_models_never_trained_on_a_validation_shape_or_a_held_out_family(path, direction):
    shapes = set(map(_shape, _column(ROOT / path, "shape_key")))
    assert shapes
    for suffix in ("", "_fp16"):
        keys, validation_shapes, family_shapes = _validation(direction, suffix)
        assert not shapes & validation_shapes and not shapes & family_shapes
        assert not set(_column(ROOT / path, "problem_key")) & set(keys)


def test_sessions_read_together_measure_every_problem_once():
    from tiledispatch.models.completion import completed_folders, declared
    from tiledispatch.models.dataset import read_rows

    owner: dict[str, str] = {}
    for session in SAME_KERNELS:
        for folder in sorted((MEASURED / session).iterdir()):
            if folder.is_dir() and not folder.name.startswith("complete_"):
                for key in set(_column(folder, "problem_key")):
                    assert key not in owner, f"{key} in {owner.get(key)} and {folder}"
                    owner[key] = str(folder)
    # Completion folders add kernels to problems measured before, never a kernel twice: read_rows's rule, checked
    # here on each folder's (problem, kernel) pairs read once (the shipped models' recorded commands, which
    # test_shipped_models replays, run read_rows itself over every folder they list).
    pairs_of: dict[Path, set] = {}

    def pairs(folder: Path) -> set:
        if folder not in pairs_of:
            pairs_of[folder] = set(zip(_column(folder, "problem_key"), _column(folder, "kernel")))
        return pairs_of[folder]

    for completion in sorted(MEASURED.glob("*/complete_*")):
        completes = completed_folders(completion)
        before = set().union(*(pairs(ROOT / c) for c in completes))
        added = pairs(completion)
        assert completes, completion
        if not declared(completion):  # (a declared one's problems measured nowhere are left out by read_rows)
            assert {key for key, _ in added} <= {key for key, _ in before}, completion
        assert not added & before, f"{completion}: {sorted(added & before)[:1]} measured before"
    last = sorted(MEASURED.glob("*/complete_*"))[-1]  # and read_rows on one of them, whole
    read_rows([*(ROOT / c for c in completed_folders(last)), last])


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_validation_sets_are_the_first_100_problems_of_each_list(direction):
    keys, _, _ = _validation(direction)
    measured = set()
    for session in SAME_KERNELS:
        measured |= set(_column(MEASURED / session / f"validation_{direction}", "problem_key"))
    assert measured == set(keys[:100])


def test_read_rows_refuses_a_problem_found_in_two_folders(tmp_path):
    from tiledispatch.models.dataset import read_rows

    shard = sorted((MEASURED / "h200_s3" / "validation_fwd").glob("rows-*.parquet"))[0]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(shard, tmp_path / name / "rows-00000.parquet")
    frame, manifests = read_rows([tmp_path / "a"])
    assert manifests[0]["problems"] == frame["problem_key"].nunique() and manifests[0]["rows"] == len(frame)
    with pytest.raises(ValueError, match="also in"):
        read_rows([tmp_path / "a", tmp_path / "b"])


@pytest.mark.parametrize("folder", sorted(p for s in SHARDED for p in (MEASURED / s).iterdir()
                                           if p.is_dir() and not p.name.startswith("complete_")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_multi_gpu_session_folders_are_their_gpus_shards(folder):
    gpus, commit = SHARDED[folder.parent.name]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["gpu_name"] == "NVIDIA H200" and manifest["git_commit"].startswith(commit)
    assert manifest["sharding"]["gpus"] == gpus
    assert {s["shard"] for s in manifest["shards"]} <= {f"{i}/{gpus}" for i in range(gpus)}
    files = [name for s in manifest["shards"] for name in s["files"]]
    assert files == sorted(p.name for p in folder.glob("rows-*.parquet"))
    keys, statuses, kernels = (_column(folder, c) for c in ("problem_key", "status", "kernel"))
    assert sum(s["problems"] for s in manifest["shards"]) == len(set(keys))
    assert sum(s["rows"] for s in manifest["shards"]) == len(keys)
    # Only ok and pruned rows, but for cuDNN's own results beyond the error limit (reported, never used).
    assert all(s in ("ok", "pruned") or k.startswith("cudnn") for s, k in zip(statuses, kernels))
    assert (folder.name.startswith("train_")) == (manifest["settings"]["oracle_only"] is True)
    dtype = "fp16" if folder.name.endswith("_fp16") else "bf16"
    assert set(_column(folder, "dtype")) == {dtype}


def test_rule_set_filter_reads_only_that_rule_sets_kernels_and_keeps_cudnn():
    """h200_s3 timed 45 kernels that are not in `default`; read as `default`, they are gone (from the
    candidates and the oracle), every problem keeps its cuDNN times."""
    from tiledispatch.models.dataset import problem_rows, read_rows
    from tiledispatch.native.rules import rule_set_names

    frame, _ = read_rows([MEASURED / "h200_s3" / "validation_fwd"])
    default = rule_set_names("default")
    everything = {pr.problem.key: pr for pr in problem_rows(frame, direction="fwd")}
    filtered = {pr.problem.key: pr for pr in problem_rows(frame, direction="fwd", kernels=default)}
    foreign = {c.name for pr in everything.values() for c in pr.configs} - default
    assert foreign and not {c.name for pr in filtered.values() for c in pr.configs} - default
    assert filtered.keys() == everything.keys()
    for key, pr in filtered.items():
        assert pr.cudnn_us == everything[key].cudnn_us or (pr.cudnn_us != pr.cudnn_us)
        assert pr.oracle_us >= everything[key].oracle_us
