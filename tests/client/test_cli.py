"""``tiledispatch select|run|bench|kernels|models|info`` against a live server."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from tests.service.harness import TILEDISPATCH
from tiledispatch.client.cli import main

PROBLEM = ["--direction", "fwd", "--dtype", "bf16", "--n", "2", "--g", "3", "--c", "6", "--k", "9", "--input", "5,6",
           "--filter", "3,2", "--stride", "2,1", "--dilation", "1,2", "--pad-begin", "1,0", "--pad-end", "0,2"]


def cli(capsys, *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_select_table_and_json(capsys, target):
    status, out, _ = cli(capsys, "select", "--target", target, *PROBLEM, "--top-k", "3")
    assert status == 0 and "source   analytic" in out and out.count("gconv_fwd_bf16_2d_") == 3
    status, out, _ = cli(capsys, "select", "--target", target, *PROBLEM, "--json", "--family", "direct")
    data = json.loads(out)
    assert status == 0 and data["source"] == "analytic" and data["model"] == ["analytic", "1"]
    assert all(c["family"] == "direct" for c in data["candidates"])


def test_problem_json_and_symmetric_pad(capsys, target, tmp_path):
    problem = {"direction": "bwd_data", "dtype": "fp16", "batch": 1, "groups": 4, "in_channels": 8,
               "out_channels": 8, "input_size": [6, 6], "filter_size": [3, 3], "pad_begin": [1, 1],
               "pad_end": [1, 1]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem))
    status, out, _ = cli(capsys, "select", "--target", target, "--problem-json", f"@{path}", "--json")
    from_file = json.loads(out)["problem_key"]
    status2, out, _ = cli(capsys, "select", "--target", target, "--json", "--direction", "bwd_data", "--dtype",
                          "fp16", "--n", "1", "--g", "4", "--c", "8", "--k", "8", "--input", "6x6", "--filter", "3,3",
                          "--pad", "1,1")
    assert status == status2 == 0 and json.loads(out)["problem_key"] == from_file


def test_run_saves_output(capsys, target, tmp_path):
    out_file = tmp_path / "y.npy"
    status, out, _ = cli(capsys, "run", "--target", target, *PROBLEM, "--seed", "3", "--output", str(out_file),
                         "--json")
    data = json.loads(out)
    assert status == 0 and data["executed_on"] == "cpu_reference" and data["output_shape"] == [2, 2, 6, 3, 3]
    assert np.load(out_file).shape == (2, 2, 6, 3, 3)


def test_kernels_models_info(capsys, target):
    status, out, _ = cli(capsys, "kernels", "--target", target, *PROBLEM, "--all")
    assert status == 0 and "v8 alignment" in out and "supported" in out
    status, out, _ = cli(capsys, "kernels", "--target", target, "--direction", "bwd_weight", "--ndim", "3", "--json")
    kernels = json.loads(out)
    assert status == 0 and kernels and all(k["direction"] == "bwd_weight" and k["ndim"] == 3 for k in kernels)
    status, out, _ = cli(capsys, "models", "--target", target)
    assert status == 0 and "analytic" in out
    status, out, _ = cli(capsys, "info", "--target", target, "--json")
    assert status == 0 and json.loads(out)["has_gpu"] is False


def test_errors_are_readable(capsys, target):
    status, _, err = cli(capsys, "select", "--target", target, *PROBLEM[:-4], "--c", "7")
    assert status == 1 and "INVALID_ARGUMENT" in err and "problem.in_channels" in err
    status, _, err = cli(capsys, "bench", "--target", target, *PROBLEM)
    assert status == 1 and "FAILED_PRECONDITION" in err and "GPU" in err
    status, _, err = cli(capsys, "select", "--target", target, "--n", "1", "--c", "8", "--k", "8", "--filter", "3,3")
    assert status == 1 and "problem.input_size: is required" in err


@pytest.mark.parametrize("command", ["select", "info"])
def test_entry_point_routes_to_the_client(target, command):
    args = [*TILEDISPATCH, command, "--target", target, "--json"]
    if command == "select":
        args += PROBLEM
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
