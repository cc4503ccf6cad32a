"""Without a registry, kernels are launched through Triton's JIT, which turns every integer argument
equal to 1 into a compile-time constant (depth, stride and dilation of a 2D problem, for instance).
The 64-bit programs narrow their size arguments to 32 bits; they must compile when those arguments
are constants too. (Found on the H200: the service's Run of a 2D depthwise problem failed to compile.)
Compiled for sm_90 in a child process: this test process runs Triton's interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

_COMPILE = """
import sys
import triton
from triton.compiler import ASTSource
from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.kernels import direct
from tiledispatch.native.registry import target_for

template = getattr(direct, sys.argv[1])()
program = template.programs(parse_kernel_name(sys.argv[2]))["depthwise"]
ones = {arg: 1 for arg, kind in program.param_types.items() if not kind.startswith("*")}
signature = {arg: ("constexpr" if arg in ones else kind) for arg, kind in program.signature().items()}
source = ASTSource(program.fn, signature, {**program.constexprs, **ones})
compiled = triton.compile(source, target=target_for("sm_90"),
                          options={"num_warps": program.num_warps, "num_stages": program.num_stages})
assert compiled.asm["cubin"]
"""

CASES = [
    ("DirectForward", "gconv_fwd_bf16_3d_direct_64x16x1_w4_s1_gm1_sk1_mg1_v8_i64"),
    ("DirectBackwardData", "gconv_bwd_data_bf16_3d_direct_64x16x1_w4_s1_gm1_sk1_mg1_v8_i64"),
    ("DirectBackwardWeight", "gconv_bwd_weight_bf16_3d_direct_64x16x1_w4_s1_gm1_sk4_mg1_v8_i64"),
]


@pytest.mark.parametrize("template, name", CASES, ids=[template for template, _ in CASES])
def test_index64_direct_programs_compile_with_integer_arguments_specialised_to_one(template, name):
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _COMPILE, template, name], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
