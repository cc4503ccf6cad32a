"""The 2D ``dwrun`` tiles that compile spill-free with more programs an SM under a register budget carry it
(``run_register_budget``, native/kernels/dwrun.py); the budget names their binary, and every other dwrun tile keeps
ptxas's choice."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tiledispatch.native.configs import Family, parse_kernel_name
from tiledispatch.native.kernels.dwrun import _RUN_REGISTER_BUDGETS, run_register_budget
from tiledispatch.native.launch import template_for
from tiledispatch.native.rules import rule_set_configs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "budget"), [
    ("gconv_fwd_bf16_2d_dwrun_14x16x3_w4_s1_gm8_sk1_mg1_v1_i32", 96),
    ("gconv_bwd_data_fp16_2d_dwrun_8x16x3_w2_s2_gm4_sk1_mg1_v1_i32", 80),
    ("gconv_bwd_weight_bf16_2d_dwrun_4x16x7_w2_s2_gm4_sk64_mg1_v1_i32", 128),
    ("gconv_bwd_weight_bf16_2d_dwrun_4x16x7_w2_s2_gm4_sk1_mg1_v1_i32", 128),   # unsplit: the same tile
    ("gconv_bwd_weight_fp16_2d_dwrun_7x32x5_w2_s2_gm2_sk16_mg1_v1_i32", 128),
    ("gconv_bwd_weight_bf16_2d_dwrun_7x32x7_w2_s2_gm2_sk16_mg1_v1_i32", None),  # fits, but measured slower
    ("gconv_bwd_weight_bf16_3d_dwrun_7x32x3_w4_s2_gm4_sk64_mg1_v1_i32", None),  # 3D: not surveyed
    ("gconv_fwd_bf16_2d_dwrun_4x16x7_w2_s2_gm4_sk1_mg1_v1_i32", None),         # spills at every budget that gains
    ("gconv_fwd_bf16_2d_dwrun_4x32x3_w2_s2_gm4_sk1_mg1_v2_i32", None),         # channel pairs: spill
    ("gconv_bwd_data_bf16_2d_dwrun_14x16x3_w4_s1_gm8_sk1_mg1_v1_i64", None),   # 64-bit indices
])
def test_the_surveyed_tiles_carry_their_budget(name, budget):
    config = parse_kernel_name(name)
    assert run_register_budget(config) == budget
    programs = template_for(config).programs(config)
    assert programs["run"].max_registers == budget
    assert all(p.max_registers is None for n, p in programs.items() if n != "run")  # the split reduce


def test_every_budget_names_a_default_tile():
    keys = {}
    for config in rule_set_configs("default", "sm_90"):
        if config.family is Family.DWRUN and run_register_budget(config) is not None:
            keys.setdefault(config.dtype.value, set()).add(
                (config.direction.value == "bwd_weight", config.block_m, config.block_n, config.block_k,
                 config.num_warps, config.num_stages, config.group_m, config.vec))
    assert keys["bf16"] == set(_RUN_REGISTER_BUDGETS)  # no entry names a tile default lacks
    assert keys["fp16"] <= keys["bf16"]  # fp16 has fewer 3×3 backward-weight tiles (the survey compiled both)
    assert all(budget % 8 == 0 and 48 <= budget < 255 for budget in _RUN_REGISTER_BUDGETS.values())


def test_the_budget_names_the_binary():
    pytest.importorskip("triton")
    from tiledispatch.native.registry import artifact_key

    config = parse_kernel_name("gconv_bwd_weight_bf16_2d_dwrun_7x16x3_w8_s2_gm16_sk64_mg1_v1_i32")
    run = template_for(config).programs(config)["run"]
    # A stand-in for the jit function (under the interpreter it has no source key); same for both programs.
    run = dataclasses.replace(run, fn=types.SimpleNamespace(cache_key="source", arg_names=run.fn.arg_names))
    free = dataclasses.replace(run, max_registers=None)
    assert artifact_key(config, "run", run, "sm_90") != artifact_key(config, "run", free, "sm_90")


# sm_90 compile in a child process (this test process may run Triton's interpreter): ptxas's choice, then the budget.
_CHILD = """
import dataclasses, json, sys
sys.path.insert(0, "bench")
from register_budget import _compile
from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.launch import template_for
config = parse_kernel_name(sys.argv[1])
program = template_for(config).programs(config)["run"]
free = _compile(dataclasses.replace(program, max_registers=None), "sm_90", None)
capped = _compile(program, "sm_90", program.max_registers)
print(json.dumps({"budget": program.max_registers, "threads": 32 * program.num_warps, "free": free[:2],
                  "capped": capped[:2]}))
"""


def test_a_budgeted_tile_compiles_to_more_programs_an_sm_without_spilling():
    pytest.importorskip("triton")
    from bench.register_budget import ctas_by_registers

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    # tiny's one-channel forward dwrun tile: 87 registers as ptxas chooses (11 programs of 2 warps), 80 under the
    # budget (12).
    name = "gconv_fwd_bf16_2d_dwrun_8x16x3_w2_s2_gm4_sk1_mg1_v1_i32"
    done = subprocess.run([sys.executable, "-c", _CHILD, name], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    (free_registers, free_spill), (registers, spill) = result["free"], result["capped"]
    assert free_spill == 0 and spill == 0 and registers <= result["budget"] < free_registers
    assert ctas_by_registers(registers, result["threads"]) > ctas_by_registers(free_registers, result["threads"])
