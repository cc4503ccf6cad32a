"""Backward-data's pipelined 2D tensor-core tiles and backward-weight's 64-row 64-deep ones compile under a
register budget (``register_cap``), and the budget is part of what names their binary; everything else keeps
ptxas's own choice."""

from __future__ import annotations

import dataclasses
import types

import pytest

from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.kernels.base import register_cap
from tiledispatch.native.launch import template_for
from tiledispatch.native.rules import rule_set_configs

DATA = "gconv_bwd_data_{dtype}_{ndim}_{family}_{tile}_gm8_sk{split}_mg{merge}_v{vec}_{index}"


def _name(dtype="bf16", ndim="2d", family="igemm", tile="128x128x64_w8_s3", split=1, merge=1, vec=8, index="i32",
          direction="bwd_data"):
    name = DATA.format(dtype=dtype, ndim=ndim, family=family, tile=tile, split=split, merge=merge, vec=vec,
                       index=index)
    return name.replace("bwd_data", direction, 1)


@pytest.mark.parametrize(("name", "cap"), [
    # 96 KiB of operands: two CTAs an SM by shared memory, so 65,536 / (256 · 2) registers.
    (_name(), 128),
    (_name(dtype="fp16"), 128),
    (_name(family="gmerge", tile="64x32x32_w4_s4", merge=4), 56),   # 24 KiB: nine CTAs of 128 threads
    (_name(tile="64x32x64_w4_s3", split=8), 80),                    # split-K programs too
    (_name(tile="128x64x32_w4_s4"), 128),
    (_name(tile="128x128x32_w8_s4"), None),   # 80 would leave its 64 accumulators 16 registers: ptxas fails
    (_name(tile="128x256x64_w8_s3"), None),   # one CTA an SM whatever its registers
    (_name(ndim="3d"), None),                 # 3D tiles spill at these budgets
    (_name(index="i64", tile="64x32x16_w4_s2", vec=1), None),
    (_name(tile="64x32x32_w4_s2", vec=1), None),   # unaligned, unpipelined
    (_name(family="gemm1x1", tile="64x64x32_w4_s4"), None),
    (_name(direction="fwd"), None),
    # Backward-weight: the 64×32×64 3-stage tiles only (others spill at their budgets or did not gain).
    (_name(direction="bwd_weight", family="gmerge", tile="64x32x64_w4_s3", split=16, merge=8), 80),
    (_name(direction="bwd_weight", tile="64x32x64_w4_s3"), 80),
    (_name(direction="bwd_weight", tile="64x64x64_w4_s3", split=8), None),
    (_name(direction="bwd_weight", tile="64x128x64_w4_s3", split=8), None),
    (_name(direction="bwd_weight", tile="64x64x64_w4_s3", dtype="fp32", vec=8), None),
    (_name(direction="bwd_weight", tile="64x64x32_w4_s4", split=16), None),
    (_name(direction="bwd_weight", tile="128x32x32_w4_s4"), None),
])
def test_the_budget_lets_shared_memory_set_the_occupancy(name, cap):
    assert register_cap(parse_kernel_name(name)) == cap


def test_the_budgeted_programs():
    for direction in ("fwd", "bwd_data"):
        config = parse_kernel_name(_name(direction=direction))
        programs = template_for(config).programs(config)
        main = programs["main"]
        if direction == "bwd_data":
            assert main.max_registers == 128 and main.compile_options()["maxnreg"] == 128
        else:
            assert main.max_registers is None and "maxnreg" not in main.compile_options()
        assert all(p.max_registers is None for n, p in programs.items() if n != "main")
    # Backward-weight: the main program (and flat, where a tile has one) under the budget; the split-K reduce
    # has none.
    config = parse_kernel_name(_name(direction="bwd_weight", tile="64x32x64_w4_s3", split=8))
    programs = template_for(config).programs(config)
    assert {n: p.max_registers for n, p in programs.items()} == {"main": 80, "reduce": None}
    capped = [c for c in rule_set_configs("default") if register_cap(c) is not None]
    assert {c.direction.value for c in capped} == {"bwd_data", "bwd_weight"}
    assert all(c.ndim == 2 and c.family.value in ("igemm", "gmerge") for c in capped)


def test_the_budget_is_part_of_the_artifact_key():
    pytest.importorskip("triton")
    from tiledispatch.native.registry import artifact_key

    config = parse_kernel_name(_name())
    main = template_for(config).programs(config)["main"]
    # A stand-in for the jit function (under the interpreter it has no source key); same for both programs.
    main = dataclasses.replace(main, fn=types.SimpleNamespace(cache_key="source", arg_names=main.fn.arg_names))
    free = dataclasses.replace(main, max_registers=None)
    assert artifact_key(config, "main", main, "sm_90") != artifact_key(config, "main", free, "sm_90")
