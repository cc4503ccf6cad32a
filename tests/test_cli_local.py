"""The local CLI: ``tiledispatch kernels list`` prints a rule set (issue: foundation, item 3)."""

from __future__ import annotations

import json
import subprocess
import sys

from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.rules import rule_set_configs


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tiledispatch.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_kernels_list_prints_the_default_forward_set():
    done = _cli("kernels", "list", "--rule-set", "default", "--direction", "fwd")
    assert done.returncode == 0, done.stderr
    names = done.stdout.split()
    expected = [c.name for c in rule_set_configs("default", directions=["fwd"])]
    assert names == expected and names
    assert all(parse_kernel_name(n).direction.value == "fwd" for n in names)


def test_kernels_list_filters_by_problem_and_says_why_not():
    problem = {"direction": "fwd", "dtype": "bf16", "batch": 1, "groups": 3, "in_channels": 9, "out_channels": 6,
               "input_size": [8, 8], "filter_size": [3, 3]}
    done = _cli("kernels", "list", "--dtype", "bf16", "--ndim", "2", "--direction", "fwd",
                "--problem-json", json.dumps(problem), "--why-not", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["kernels"] and all("_v1_" in n for n in answer["kernels"])  # C/G=3: unaligned only
    assert any("not divisible by 8" in reason for reason in answer["refused"].values())


def test_kernels_list_refuses_a_bad_problem_naming_the_field():
    done = _cli("kernels", "list", "--problem-json", json.dumps({"direction": "fwd", "dtype": "bf16", "batch": 1,
                                                                "groups": 2, "in_channels": 3, "out_channels": 4,
                                                                "input_size": [8, 8], "filter_size": [3, 3]}))
    assert done.returncode == 2 and "in_channels" in done.stderr


def test_bench_shard_parses_and_refuses_bad_values():
    import argparse

    import pytest

    from tiledispatch.native.cli import _shard

    assert _shard("1/2") == (1, 2)
    assert _shard("0/1") == (0, 1)
    for bad in ("2/2", "a/2", "1", "-1/2"):
        with pytest.raises(argparse.ArgumentTypeError, match="--shard: must be I/N"):
            _shard(bad)

