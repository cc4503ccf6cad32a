"""Completion sweeps (``tiledispatch bench --complete``): kernels added to the rule set after a problem
was measured are measured on their own into a folder of their own, and read back beside the sweep they
complete without a kernel counted twice (no GPU needed: measuring is faked)."""

from __future__ import annotations

import shutil
from dataclasses import asdict

import pytest

from tiledispatch.native import bench
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import is_supported

pytest.importorskip("pyarrow")

MEASURED = ConvProblem.from_key("fwd|bf16|3d|n32|g96|c96|k96|in8x28x28|f3x3x3|s1x1x1|d1x1x1|pb1x1x1|pe1x1x1")
UNMEASURED = ConvProblem.from_key("fwd|bf16|2d|n8|g32|c128|k128|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1")
CEILINGS = bench.Ceilings(matmul_tflops=700.0, copy_gbs=4000.0, fma_tflops=60.0)


def _applicable(problem: ConvProblem) -> list[str]:
    return [c.name for c in rule_set_configs("default") if is_supported(problem, c)]


def _rows(problem: ConvProblem, kernels) -> list[dict]:
    return [{"problem_key": problem.key, "kernel": k, "status": "ok", "graph_us": 1.0} for k in kernels]


@pytest.fixture
def fake_gpu(monkeypatch):
    """Measuring faked: each sweep_problem call is recorded and returns one ok row per kernel not skipped."""
    calls: list[tuple[str, set[str]]] = []

    def sweep(problem, settings, ceilings, worker, log=print, skip=()):
        calls.append((problem.key, set(skip)))
        return _rows(problem, [k for k in _applicable(problem) if k not in set(skip)])

    monkeypatch.setattr(bench, "sweep_problem", sweep)
    monkeypatch.setattr(bench, "measure_ceilings", lambda: CEILINGS)
    monkeypatch.setattr(bench, "environment_manifest", lambda settings, ceilings: {"ceilings": asdict(ceilings)})
    return calls


def test_completion_measures_only_the_kernels_the_earlier_sweep_lacks(tmp_path, fake_gpu):
    import json

    import pyarrow.parquet as pq

    kernels = _applicable(MEASURED)
    assert len(kernels) > 2
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    bench.write_shard(earlier, _rows(MEASURED, kernels[1:]) + _rows(MEASURED, [bench.CUDNN]))
    settings = bench.BenchSettings(cache_dir="unused", include_cudnn=False)
    out = tmp_path / "completion"
    bench.run_sweep([MEASURED, UNMEASURED], settings, out, complete=[earlier], log=lambda line: None)
    # The unmeasured problem is not a completion's business; the measured one gets its one missing kernel.
    assert fake_gpu == [(MEASURED.key, set(kernels[1:]) | {bench.CUDNN})]
    written = [k for shard in sorted(out.glob("rows-*.parquet"))
               for k in pq.read_table(shard).column("kernel").to_pylist()]
    assert written == kernels[:1]
    assert json.loads((out / "manifest.json").read_text())["completes"] == [str(earlier)]
    bench.run_sweep([MEASURED, UNMEASURED], settings, out, complete=[earlier], log=lambda line: None)
    assert len(fake_gpu) == 1  # resumed: nothing left to complete


def test_completion_refuses_cudnn_a_kernel_sample_and_a_plain_sweeps_folder(tmp_path, fake_gpu):
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    bench.write_shard(earlier, _rows(MEASURED, _applicable(MEASURED)[1:]))
    for settings in (bench.BenchSettings(cache_dir="unused"),
                     bench.BenchSettings(cache_dir="unused", include_cudnn=False, max_kernels=48)):
        with pytest.raises(ValueError, match="every missing kernel and no cuDNN"):
            bench.run_sweep([MEASURED], settings, tmp_path / "completion", complete=[earlier], log=lambda line: None)
    plain = tmp_path / "plain"
    bench.run_sweep([UNMEASURED], bench.BenchSettings(cache_dir="unused", include_cudnn=False), plain,
                    log=lambda line: None)
    with pytest.raises(ValueError, match="folder of its own"):
        bench.run_sweep([MEASURED], bench.BenchSettings(cache_dir="unused", include_cudnn=False), plain,
                        complete=[earlier], log=lambda line: None)
    assert [key for key, _ in fake_gpu] == [UNMEASURED.key]


def test_read_rows_takes_a_completion_folder_beside_the_sweep_it_completes(tmp_path, fake_gpu):
    from tiledispatch.models.dataset import read_rows

    kernels = _applicable(MEASURED)
    earlier, other = tmp_path / "earlier", tmp_path / "other"
    for folder, rows in ((earlier, _rows(MEASURED, kernels[1:])), (other, _rows(MEASURED, kernels[:1]))):
        folder.mkdir()
        bench.write_shard(folder, rows)
    completion = tmp_path / "completion"
    bench.run_sweep([MEASURED], bench.BenchSettings(cache_dir="unused", include_cudnn=False), completion,
                    complete=[earlier], log=lambda line: None)
    frame, manifests = read_rows([earlier, completion])
    assert sorted(frame["kernel"]) == sorted(kernels) and [m["problems"] for m in manifests] == [1, 1]
    # A plain folder with the same problem is refused, so is a completion that repeats a kernel.
    with pytest.raises(ValueError, match="also in"):
        read_rows([completion, earlier, other])
    bench.write_shard(completion, _rows(MEASURED, kernels[1:2]))
    with pytest.raises(ValueError, match="also measured in"):
        read_rows([earlier, completion])


def test_refresh_remeasures_the_kernels_whose_build_changed_and_its_rows_replace_theirs(tmp_path, fake_gpu,
                                                                                          monkeypatch):
    import json
    from types import SimpleNamespace

    from tiledispatch.models.dataset import read_rows
    from tiledispatch.native import registry

    kernels = _applicable(MEASURED)
    changed, same = kernels[0], kernels[1:]
    current = {k: f"b-{k}" for k in kernels}
    loaded = SimpleNamespace(builds=current)  # the registry in use: its build ids
    monkeypatch.setattr(registry.Registry, "load", classmethod(lambda cls, cache, arch: loaded))
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    rows = _rows(MEASURED, kernels) + _rows(MEASURED, [bench.CUDNN])
    for row in rows:  # every kernel timed at its current build but one, timed before its code changed
        row["graph_us"] = 9.0
    bench.write_shard(earlier, rows)
    (earlier / "manifest.json").write_text("{}")
    (earlier / "kernel_builds.json").write_text(json.dumps({"builds": {**current, changed: "b-old"}}))
    settings = bench.BenchSettings(cache_dir="unused", include_cudnn=False)
    out = tmp_path / "refresh"
    bench.run_sweep([MEASURED, UNMEASURED], settings, out, refresh=[earlier], log=lambda line: None)
    assert fake_gpu == [(MEASURED.key, set(same) | {bench.CUDNN})]  # only the changed kernel is measured
    assert json.loads((out / "manifest.json").read_text())["refreshes"] == [str(earlier)]
    frame, _ = read_rows([earlier, out])
    times = dict(zip(frame["kernel"], frame["graph_us"]))
    assert times[changed] == 1.0 and times[same[0]] == 9.0  # the refreshed row replaced the stale one
    # Refreshes of refreshes (each session re-times the kernels it changed): a folder whose rows a later one
    # replaced entirely stays a frame with its columns, so a third and fourth refresh still read.
    again = []
    for index in range(3):
        folder = tmp_path / f"refresh_again_{index}"
        shutil.copytree(out, folder)
        again.append(folder)
    frame, _ = read_rows([earlier, out, *again])
    assert sorted(frame.loc[frame["kernel"] == changed, "graph_us"]) == [1.0]
    assert len(frame) == len(rows)
    assert len(frame) == len(rows)
    with pytest.raises(ValueError, match="completes or refreshes"):
        bench.run_sweep([MEASURED], settings, tmp_path / "both", complete=[earlier], refresh=[earlier],
                        log=lambda line: None)


def test_stale_kernels_are_the_applicable_ones_without_a_row_of_the_build_in_use():
    kernels = _applicable(MEASURED)
    current = {k: "now" for k in kernels}
    measured = {MEASURED.key: {kernels[0]: {"then"}, kernels[1]: {"then", "now"}, **{k: {"now"} for k in kernels[2:4]}}}
    settings = bench.BenchSettings(cache_dir="unused", include_cudnn=False)
    stale = bench.stale_kernels([MEASURED, UNMEASURED], settings, measured, current)
    assert set(stale) == {MEASURED.key}
    assert kernels[0] in stale[MEASURED.key] and kernels[1] not in stale[MEASURED.key]
    assert set(kernels[4:]) <= set(stale[MEASURED.key])  # never measured: stale too


def test_refresh_within_remeasures_only_the_changed_kernels_near_the_earlier_best(
        tmp_path, fake_gpu, monkeypatch):
    import json
    from types import SimpleNamespace

    from tiledispatch.native import registry

    kernels = _applicable(MEASURED)
    slow, near, best, new = kernels[:4]
    current = {k: f"b-{k}" for k in kernels}
    loaded = SimpleNamespace(builds=current)
    monkeypatch.setattr(registry.Registry, "load", classmethod(lambda cls, cache, arch: loaded))
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    rows = _rows(MEASURED, [k for k in kernels if k != new]) + _rows(MEASURED, [bench.CUDNN])
    times = {slow: 10.0, near: 6.0, best: 5.0, bench.CUDNN: 1.0}  # cuDNN's time is no kernel's best
    for row in rows:
        row["graph_us"] = times.get(row["kernel"], 50.0)
    bench.write_shard(earlier, rows)
    (earlier / "manifest.json").write_text("{}")
    # slow and near were timed before their code changed; best and the rest are current; new was never timed
    (earlier / "kernel_builds.json").write_text(json.dumps({"builds": {**current, slow: "old", near: "old"}}))
    settings = bench.BenchSettings(cache_dir="unused", include_cudnn=False, refresh_within=1.5)
    bench.run_sweep([MEASURED], settings, tmp_path / "refresh", refresh=[earlier], log=lambda line: None)
    assert len(fake_gpu) == 1
    measured = set(kernels) - fake_gpu[0][1]
    assert measured == {near}  # slow: 10 us > 1.5 x 5 us, kept as it was; new: never timed there


def test_competitive_keeps_the_kernels_timed_within_the_factor_of_the_best():
    times = {"p": {"a": 10.0, "b": 12.0, "c": 30.0, "d": float("inf"), bench.CUDNN: 2.0}, "q": {"a": 1.0}}
    stale = {"p": ["b", "c", "d", "e"], "q": ["a"], "r": ["z"]}
    assert bench.competitive(stale, times, 1.25) == {"p": ["b"], "q": ["a"]}
    assert bench.competitive({"p": ["c", "d"]}, times, 1.25) == {}


@pytest.mark.parametrize("argv, message", [
    (["--refresh-within", "1.5"], "only with --refresh"),
    (["--refresh", "x", "--refresh-within", "0.5"], "must be >= 1"),
])
def test_bench_cli_refuses_a_bad_refresh_within(argv, message, capsys):
    from tiledispatch.native import cli

    with pytest.raises(SystemExit):
        cli.bench_main(["--synthetic", "1", "--out", "unused", *argv])
    assert message in capsys.readouterr().err


def test_a_sweep_of_new_kernels_declared_a_completion_reads_beside_the_sweep_it_completes(tmp_path, fake_gpu):
    """models.completion: a plain sweep of kernels the earlier folder lacks (--problems/--kernels), over a measured
    and an unmeasured problem, declared a completion of it: read_rows takes its measured problem's rows and leaves
    the other out; a declaration refuses a folder repeating a kernel, or with no measured problem."""
    import json

    from tiledispatch.models.completion import COMPLETES_FILE, completed_folders, declare
    from tiledispatch.models.dataset import read_rows

    kernels = _applicable(MEASURED)
    earlier, later = tmp_path / "earlier", tmp_path / "later"
    earlier.mkdir()
    later.mkdir()
    bench.write_shard(earlier, _rows(MEASURED, kernels[1:]))
    bench.write_shard(later, _rows(MEASURED, kernels[:1]) + _rows(UNMEASURED, _applicable(UNMEASURED)[:2]))
    with pytest.raises(ValueError, match="also in"):  # undeclared: a second plain folder of the same problem
        read_rows([earlier, later])
    record = declare(later, [earlier])
    assert (record["problems"], record["rows"], record["unmeasured_problems"]) == (1, 1, 1)
    assert json.loads((later / COMPLETES_FILE).read_text())["completes"] == completed_folders(later) == [str(earlier)]
    frame, manifests = read_rows([earlier, later])
    assert sorted(frame["kernel"]) == sorted(kernels) and set(frame["problem_key"]) == {MEASURED.key}
    assert [m["problems"] for m in manifests] == [1, 1]
    twice = tmp_path / "twice"
    twice.mkdir()
    bench.write_shard(twice, _rows(MEASURED, kernels[1:2]))
    with pytest.raises(ValueError, match="measured there already"):
        declare(twice, [earlier])
    alone = tmp_path / "alone"
    alone.mkdir()
    bench.write_shard(alone, _rows(UNMEASURED, _applicable(UNMEASURED)[:1]))
    with pytest.raises(ValueError, match="none of its 1 problems"):
        declare(alone, [earlier])
    assert not (twice / COMPLETES_FILE).exists() and not (alone / COMPLETES_FILE).exists()
