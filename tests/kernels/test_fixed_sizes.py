"""A 2D config compiles its depth sizes in as constants (``Program.fixed``); the launches still pass them,
and a launch that passes another value is refused with the parameter's name, never run wrong."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from tiledispatch.native import launch  # noqa: E402
from tiledispatch.native.configs import Family, KernelConfig, parse_kernel_name  # noqa: E402
from tiledispatch.native.kernels.base import DEPTH_OF_2D, Launch  # noqa: E402
from tiledispatch.native.problem import ConvProblem, Direction, DType  # noqa: E402


def _config(direction: Direction, ndim: int, family: Family = Family.GMERGE, index64: bool = False) -> KernelConfig:
    if family is Family.DWROLL:
        return KernelConfig(direction, DType.BF16, ndim, family, 64, 32, 3, 4, 1, 1, 1, 1, 8, index64)
    merge = 4 if family is Family.GMERGE else 1
    return KernelConfig(direction, DType.BF16, ndim, family, 128, 32, 32, 4, 1, 8, 1, merge, 8, index64)


@pytest.mark.parametrize("direction", [Direction.FORWARD, Direction.BACKWARD_DATA])
@pytest.mark.parametrize("family", [Family.GMERGE, Family.IGEMM, Family.DWROLL])
def test_2d_configs_fix_every_depth_size_their_main_program_takes(direction, family):
    main = "roll" if family is Family.DWROLL else "main"
    program = launch.template_for(_config(direction, 2, family)).programs(_config(direction, 2, family))[main]
    expected = {name: value for name, value in DEPTH_OF_2D.items() if name in program.fn.arg_names}
    assert program.fixed == expected and {"IN_D", "OUT_D", "F_D"} <= set(program.fixed)
    signature = program.signature()
    assert all(signature[name] == "constexpr" for name in program.fixed)
    assert program.compile_constants() == {**program.constexprs, **program.fixed}


@pytest.mark.parametrize("ndim, index64", [(3, False), (2, True)])
def test_3d_and_64_bit_configs_fix_nothing(ndim, index64):
    config = _config(Direction.FORWARD, ndim, Family.IGEMM, index64)
    assert launch.template_for(config).programs(config)["main"].fixed == {}


def test_backward_weight_fixes_nothing():
    # Measured: the constants push an igemm backward-weight tile over 255 registers (ptxas spills).
    config = parse_kernel_name("gconv_bwd_weight_bf16_2d_igemm_64x64x32_w4_s2_gm8_sk1_mg1_v1_i32")
    assert launch.template_for(config).programs(config)["main"].fixed == {}


def test_a_launch_passing_another_value_for_a_fixed_size_is_refused_by_name():
    problem = ConvProblem(direction=Direction.FORWARD, dtype=DType.BF16, batch=2, groups=8, in_channels=32,
                          out_channels=32, input_size=(5, 6), filter_size=(3, 3), stride=(1, 1), dilation=(1, 1),
                          pad_begin=(1, 1), pad_end=(1, 1))
    config = _config(Direction.FORWARD, 2, Family.IGEMM)
    template = launch.template_for(config)
    program = template.programs(config)["main"]
    planned = template.plan(problem, config, "x", "w", "y", None)[-1]
    assert launch.full_arguments(program, planned)  # the plan's own values agree
    names = [n for n in program.fn.arg_names if n not in program.constexprs]
    wrong = list(planned.args)
    wrong[names.index("OUT_D")] = 2
    with pytest.raises(launch.LaunchError, match="OUT_D"):
        launch.full_arguments(program, Launch("main", planned.grid, tuple(wrong)))
