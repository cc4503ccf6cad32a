"""models.merge_gpu_shards: a multi-GPU collection's per-GPU folders become one folder per list, new
shards only, byte for byte, with every GPU's sittings and a map of where each shard came from."""

from __future__ import annotations

import json

import pytest

from tiledispatch.models.merge_gpu_shards import merge
from tiledispatch.native import bench

pq = pytest.importorskip("pyarrow.parquet")


def _folder(path, gpu: int, keys: list[str], seeds: list[str] = ()):
    path.mkdir(parents=True)
    for key in seeds:  # an earlier session's copy: skipped by the sweep, left out by the merge
        bench.write_shard(path, [{"problem_key": key, "kernel": "k0", "status": "ok"}])
        (path / "rows-00000.parquet").rename(path / f"rows-seed-old-{key}.parquet")
    for key in keys:
        bench.write_shard(path, [{"problem_key": key, "kernel": "k0", "status": "ok"},
                                 {"problem_key": key, "kernel": "k1", "status": "pruned"}])
    manifest = {"gpu_name": "NVIDIA H200", "ceilings": {"matmul_tflops": 700.0 + gpu}, "date": f"d{gpu}",
                "sittings": [{"started": f"s{gpu}", "problems": len(keys)}]}
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_merge_keeps_new_shards_byte_for_byte_gpu_0_first(tmp_path):
    data = tmp_path / "data"
    _folder(data / "train_fwd.g0", 0, ["a", "b"], seeds=["old"])
    _folder(data / "train_fwd.g1", 1, ["c"])
    _folder(data / "train_fwd_fp16.g0", 0, ["d"])  # GPU 1 never reached this list
    _folder(data / "validation_fwd.g0", 0, [], seeds=["old"])  # nothing new: no folder
    _folder(data / "validation_fwd.g1", 1, [])
    out = tmp_path / "session"
    assert merge(data, out, "how it ran", gpus=2) == ["train_fwd", "train_fwd_fp16"]
    merged = out / "train_fwd"
    shards = sorted(merged.glob("rows-*.parquet"))
    assert [s.name for s in shards] == ["rows-00000.parquet", "rows-00001.parquet", "rows-00002.parquet"]
    assert shards[2].read_bytes() == (data / "train_fwd.g1" / "rows-00000.parquet").read_bytes()
    keys = [k for s in shards for k in pq.read_table(s).column("problem_key").to_pylist()]
    assert keys == ["a", "a", "b", "b", "c", "c"]
    manifest = json.loads((merged / "manifest.json").read_text())
    assert manifest["sharding"]["gpus"] == 2 and manifest["sharding"]["how"] == "how it ran"
    assert [(s["gpu"], s["shard"], s["problems"], s["rows"]) for s in manifest["shards"]] == [(0, "0/2", 2, 4),
                                                                                              (1, "1/2", 1, 2)]
    assert manifest["shards"][0]["files"]["rows-00000.parquet"] == "train_fwd.g0/rows-00001.parquet"
    assert [(s["gpu"], s["shard"]) for s in manifest["sittings"]] == [(0, "0/2"), (1, "1/2")]
    assert manifest["ceilings"] == {"matmul_tflops": 700.0}
    fp16 = json.loads((out / "train_fwd_fp16" / "manifest.json").read_text())
    assert [s["shard"] for s in fp16["shards"]] == ["0/2"]


def test_merge_never_overwrites_and_leaves_nothing_on_failure(tmp_path):
    data = tmp_path / "data"
    _folder(data / "train_fwd.g0", 0, ["a"])
    _folder(data / "train_fwd.g3", 3, ["b"])
    with pytest.raises(ValueError, match="expected a part of 0..1"):
        merge(data, tmp_path / "session", "how", gpus=2)
    assert not (tmp_path / "session").exists() and not list(tmp_path.glob(".session*"))
    (tmp_path / "existing").mkdir()
    with pytest.raises(FileExistsError):
        merge(data, tmp_path / "existing", "how")
