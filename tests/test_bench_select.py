"""Which kernels the tile-engine benchmark measures for a problem: the registry's kernels of the sweep's
rule set only, whatever else the registry folder holds (no GPU needed)."""

from __future__ import annotations

from types import SimpleNamespace

from tiledispatch.native import bench
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import is_supported

PROBLEM = ConvProblem.from_key("fwd|bf16|2d|n8|g32|c128|k128|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1")


def test_kernels_outside_the_rule_set_are_never_measured():
    default = {c.name for c in rule_set_configs("default")}
    # (is_supported refuses every kernel of another direction or dtype: only PROBLEM's slices can hold one)
    extra = [c for c in rule_set_configs("full", directions=[PROBLEM.direction], dtypes=[PROBLEM.dtype])
             if c.name not in default and is_supported(PROBLEM, c)]
    assert extra  # e.g. kernels GPU tests compiled into a shared registry folder
    registry = SimpleNamespace(configs=[*rule_set_configs("default"), *extra])
    chosen = bench.select_configs(PROBLEM, registry, bench.BenchSettings(cache_dir="unused"))
    assert chosen and {c.name for c in chosen} <= default
    assert {c.name for c in chosen} == {c.name for c in rule_set_configs("default") if is_supported(PROBLEM, c)}
    sampled = bench.select_configs(PROBLEM, registry, bench.BenchSettings(cache_dir="unused", max_kernels=40))
    assert len(sampled) == 40 and {c.name for c in sampled} <= default
    full = bench.select_configs(PROBLEM, registry, bench.BenchSettings(cache_dir="unused", rule_set="full"))
    assert {c.name for c in extra} <= {c.name for c in full}


DEPTHWISE = ConvProblem.from_key("bwd_weight|bf16|2d|n8|g64|c64|k64|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1")


def test_families_narrow_the_sweep_and_its_completion():
    registry = SimpleNamespace(configs=rule_set_configs("default"))
    settings = bench.BenchSettings(cache_dir="unused", families=("dwroll",))
    chosen = bench.select_configs(DEPTHWISE, registry, settings)
    assert chosen and {c.family.value for c in chosen} == {"dwroll"}
    every = bench.select_configs(DEPTHWISE, registry, bench.BenchSettings(cache_dir="unused"))
    assert {c.family.value for c in every} > {"dwroll"}
    # a completion sweep of a problem measured before dwroll existed lacks only the dwroll kernels
    measured = {DEPTHWISE.key: {c.name for c in every if c.family.value != "dwroll"}}
    missing = bench.missing_kernels([DEPTHWISE], settings, measured)
    assert sorted(missing[DEPTHWISE.key]) == sorted(c.name for c in chosen)
    assert not bench.missing_kernels([DEPTHWISE], settings, {DEPTHWISE.key: {c.name for c in every}})


def test_bench_cli_refuses_an_unknown_family(capsys):
    import pytest

    from tiledispatch.native.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "--synthetic", "1", "--out", "/nonexistent", "--families", "dwroll,warp9"])
    assert "--families: unknown ['warp9']" in capsys.readouterr().err


SMALL_DENSE = ConvProblem.from_key("fwd|bf16|2d|n1|g1|c256|k256|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1")


def test_a_kernel_pattern_narrows_the_sweep_and_its_completion_to_the_split_k_kernels():
    registry = SimpleNamespace(configs=rule_set_configs("default"))
    split_k = bench.BenchSettings(cache_dir="unused", kernels="_sk(?!1_)")
    chosen = bench.select_configs(SMALL_DENSE, registry, split_k)
    assert chosen and all(c.split_k > 1 for c in chosen)
    every = bench.select_configs(SMALL_DENSE, registry, bench.BenchSettings(cache_dir="unused"))
    assert {c.name for c in chosen} == {c.name for c in every if c.split_k > 1}
    # a problem measured before the split-K kernels existed: the completion measures them and nothing else
    measured = {SMALL_DENSE.key: {every[0].name} if every[0].split_k == 1 else set()}
    missing = bench.missing_kernels([SMALL_DENSE], split_k, measured)
    assert sorted(missing[SMALL_DENSE.key]) == sorted(c.name for c in chosen)
    # families and the pattern both apply
    igemm_split_k = bench.BenchSettings(cache_dir="unused", kernels="_sk(?!1_)", families=("igemm",))
    igemm = bench.select_configs(SMALL_DENSE, registry, igemm_split_k)
    assert igemm and {c.family.value for c in igemm} == {"igemm"} and all(c.split_k > 1 for c in igemm)
    assert len(igemm) < len(every)


def test_bench_cli_refuses_a_bad_kernel_pattern(capsys):
    import pytest

    from tiledispatch.native.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "--synthetic", "1", "--out", "/nonexistent", "--kernels", "_sk(4"])
    assert "--kernels: not a regular expression" in capsys.readouterr().err
