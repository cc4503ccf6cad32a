"""Split-K forward and backward-data tensor-core kernels (igemm, gmerge, gemm1x1) under the Triton interpreter.

Each split runs a contiguous range of the flattened (tap × channel block) loop and stores fp32 partials to
``workspace[split]``; ``split_reduce.py`` (the reduce every split-K family shares) sums them into the output.
Checked here, on tiny odd problems in fp16 and fp32, 2D and 3D (strided backward-data too), with fresh random
inputs, NaN-poisoned outputs and the float64 reference at the error limits the other kernel tests use:

* the result, with split counts up to and past the number of reduction steps (empty splits);
* every workspace row is written — empty splits store zeros, not what the workspace held (NaN here) — and the
  rows sum to the reference;
* the plan: grid axis 2 = split_k, launches (gmerge pack,) main, reduce; workspace = partials, then the packed
  weights 16-byte aligned after them.

(The split-4 variant of every fwd / bwd_data tensor-core case of ``cases.py`` also runs in
``test_interpreter.py`` and ``test_launch_plan.py``; the GPU cases are ``test_gpu.py -k split``.)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tests.kernels.cases import problem, small_config
from tiledispatch.native.accuracy import RELATIVE_ERROR_LIMIT
from tiledispatch.native.configs import Family
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.support import is_supported

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.interpreter

DATA_DIRECTIONS = (Direction.FORWARD, Direction.BACKWARD_DATA)

#: (ndim, shape label of cases.py, family, config variant): odd channel counts, strides (backward-data:
#: stride 2 and 3, decomposed into residue classes), dilations, asymmetric pads, 1x1, merged groups with a
#: partial last block, packed (v8) and gathered (v1) gmerge weights, 64-bit indices.
SHAPES = [
    (2, "grouped_odd", Family.IGEMM, {}),
    (2, "grouped_odd", Family.IGEMM, dict(index64=True)),
    (2, "stride3", Family.IGEMM, {}),
    (2, "dw_multiplier", Family.GMERGE, dict(merge=4)),
    (2, "small_groups", Family.GMERGE, dict(merge=4, vec=8)),
    (2, "aligned_1x1", Family.GEMM1X1, dict(vec=8)),
    (2, "stride1_grouped", Family.IGEMM, dict(vec=8)),
    (3, "grouped_odd", Family.IGEMM, {}),
    (3, "small_groups", Family.GMERGE, dict(merge=2, vec=8)),
    (3, "aligned_1x1", Family.GEMM1X1, dict(vec=8)),
]


def _label(ndim, label, family, variant):
    extra = "-".join(f"{k}{int(v)}" for k, v in sorted(variant.items()))
    return f"{ndim}d-{family.value}-{label}" + (f"-{extra}" if extra else "")


def _config(direction, dtype, ndim, family, variant, split_k):
    return dataclasses.replace(small_config(direction, dtype, ndim, family, **variant), split_k=split_k)


def _most_steps(prob: ConvProblem, config) -> int:
    """The most (tap, channel block) steps one program's loop has: every tap (forward, 1x1); strided
    backward-data: the taps of the residue class with the most, at most ceil(F / step) per dim."""
    reduction = prob.c_per_group if prob.direction is Direction.FORWARD else prob.k_per_group
    blocks = -(-config.merge * reduction // config.block_k)
    if prob.direction is Direction.FORWARD or config.family is Family.GEMM1X1:
        return prob.filter_taps * blocks
    from tiledispatch.native.kernels.igemm_bwd_data import tap_steps

    steps = tap_steps(prob)[3 - prob.ndim:]
    return math.prod(-(-f // step) for f, step in zip(prob.filter_size, steps)) * blocks


def _inputs(prob: ConvProblem, dtype: DType):
    from tiledispatch.native import launch

    generator = torch.Generator().manual_seed(torch.seed() % (2**31))  # fresh inputs every run
    first = torch.randn(prob.operand_shapes[0], generator=generator).to(launch.torch_dtype(dtype))
    second = torch.randn(prob.operand_shapes[1], generator=generator).to(launch.torch_dtype(dtype))
    return first, second


def _reference(prob: ConvProblem, first, second) -> np.ndarray:
    from tiledispatch.native import reference

    return reference.run_reference(prob, first.double().numpy(), second.double().numpy())


CASES = [pytest.param(direction, dtype, *shape, split_k, id=f"{direction.value}-{_label(*shape)}-sk{split_k}-"
                      f"{dtype.value}")
         for direction in DATA_DIRECTIONS for shape in SHAPES for split_k in (16,)
         for dtype in (DType.FP16, DType.FP32)]


@pytest.mark.parametrize("direction, dtype, ndim, label, family, variant, split_k", CASES)
def test_split_k_matches_float64_reference(direction, dtype, ndim, label, family, variant, split_k):
    """Through ``launch.run`` (cached plan, workspace allocated per call); split 16 exceeds the steps of
    most of these problems, so some splits own no step (split 4 of the cases.py shapes: test_interpreter)."""
    from tiledispatch.native import launch, reference

    prob = problem(direction, dtype, ndim, label)
    config = _config(direction, dtype, ndim, family, variant, split_k)
    assert is_supported(prob, config), is_supported(prob, config).reason
    first, second = _inputs(prob, dtype)
    out = torch.full(prob.operand_shapes[2], float("nan"), dtype=launch.torch_dtype(dtype))  # poisoned

    launch.run(prob, config, first, second, out, backend="interpret")

    error = reference.relative_error(out.double().numpy(), _reference(prob, first, second))
    assert error <= RELATIVE_ERROR_LIMIT[dtype], f"{config.name}: relative error {error:.3g}"


def test_the_cases_include_splits_without_steps():
    """Split 16 outnumbers the reduction steps of most shapes above (and some residue classes of the
    strided backward-data ones have fewer still)."""
    short = [(d.value, s[1]) for d in DATA_DIRECTIONS for s in SHAPES
             if _most_steps(problem(d, DType.FP32, s[0], s[1]), _config(d, DType.FP32, s[0], s[2], s[3], 16)) < 16]
    assert len(short) >= 3 * len(DATA_DIRECTIONS) * len(SHAPES) // 4, short


def _run_launches(prob, config, first, second, out, workspace):
    """The template's launches on our own tensors (a caller-chosen workspace), in the interpreter."""
    from tiledispatch.native import launch

    template = launch.template_for(config)
    programs = template.programs(config)
    launches = template.plan(prob, config, first, second, out, workspace)
    for step in launches:
        launch._launch(programs[step.program], step, launch.Backend.INTERPRET, None)
    return launches


@pytest.mark.parametrize("direction", DATA_DIRECTIONS, ids=lambda d: d.value)
@pytest.mark.parametrize("ndim, label, family, variant", [pytest.param(*shape, id=_label(*shape)) for shape in [
    (2, "grouped_odd", Family.IGEMM, {}),                    # backward-data: stride (2, 1), 2 or 4 steps per class
    (2, "stride3", Family.IGEMM, {}),                        # backward-data: stride (3, 2)
    (2, "small_groups", Family.GMERGE, dict(merge=2, vec=8)),  # partials, then the packed weights
    (3, "aligned_1x1", Family.GEMM1X1, dict(vec=8)),
]])
def test_every_split_writes_its_partials_and_empty_splits_write_zeros(direction, ndim, label, family, variant):
    """A NaN-filled workspace: after the main program every row of every split is finite (each element was
    stored), the rows past the last step are exactly 0, and the rows sum to the reference; the reduce's
    output is their sum."""
    from tiledispatch.native import launch, reference
    from tiledispatch.native.kernels.split_reduce import partials_elements

    split_k = 32
    prob = problem(direction, DType.FP32, ndim, label)
    config = _config(direction, DType.FP32, ndim, family, variant, split_k)
    assert is_supported(prob, config), is_supported(prob, config).reason
    steps = _most_steps(prob, config)
    assert steps < split_k
    first, second = _inputs(prob, DType.FP32)
    out = torch.full(prob.operand_shapes[2], float("nan"))
    template = launch.template_for(config)
    workspace = torch.full((template.workspace_elements(prob, config),), float("nan"))
    launches = _run_launches(prob, config, first, second, out, workspace)
    assert [step.program for step in launches][-2:] == ["main", "reduce"]

    elements = math.prod(prob.operand_shapes[2])
    assert partials_elements(elements, config) >= split_k * elements
    rows = workspace[:split_k * elements].view(split_k, elements).double()
    assert torch.isfinite(rows).all(), "a split left workspace elements unwritten"
    assert (rows[steps:] == 0).all(), "a split without steps stored something other than zeros"
    expected = _reference(prob, first, second)
    summed = rows.sum(dim=0).numpy().reshape(expected.shape)
    assert reference.relative_error(summed, expected) <= RELATIVE_ERROR_LIMIT[DType.FP32]
    assert reference.relative_error(out.double().numpy(), expected) <= RELATIVE_ERROR_LIMIT[DType.FP32]


@pytest.mark.parametrize("direction", DATA_DIRECTIONS, ids=lambda d: d.value)
@pytest.mark.parametrize("family, label, variant", [
    pytest.param(family, label, variant, id=_label(2, label, family, variant)) for family, label, variant in [
        (Family.IGEMM, "stride3", {}), (Family.GMERGE, "small_groups", dict(merge=4, vec=8)),
        (Family.GMERGE, "dw_multiplier", dict(merge=4)), (Family.GEMM1X1, "aligned_1x1", dict(vec=8))]])
@pytest.mark.parametrize("split_k", [1, 4])
def test_plan_grid_launches_and_workspace(direction, family, label, variant, split_k):
    """No numerics: split_k is grid axis 2 of the main launch; split-K adds the shared reduce over the
    result's elements and fp32 partials at the front of the workspace; gmerge's packed weights follow them,
    16-byte aligned (unsplit: the workspace is the packed weights alone, as before split-K)."""
    from tiledispatch.native import launch
    from tiledispatch.native.kernels import gmerge_pack
    from tiledispatch.native.kernels.split_reduce import partials_elements, reduce_block

    prob = problem(direction, DType.FP16, 2, label)
    config = _config(direction, DType.FP16, 2, family, variant, split_k)
    template = launch.template_for(config)
    elements = math.prod(prob.operand_shapes[2])
    partials = partials_elements(elements, config)
    assert partials == (0 if split_k == 1 else -(-split_k * elements // 4) * 4)
    packed = gmerge_pack.workspace_elements(prob, config)
    assert template.workspace_elements(prob, config) == partials + packed
    assert ("reduce" in template.programs(config)) == (split_k > 1)
    first, second, out = (torch.empty(shape, dtype=torch.float16) for shape in prob.operand_shapes)
    workspace = torch.empty(partials + packed, dtype=torch.float32) if partials + packed else None
    launches = template.plan(prob, config, first, second, out, workspace)
    names = [step.program for step in launches]
    assert names == ["pack"] * bool(packed) + ["main"] + ["reduce"] * (split_k > 1)
    main = launches[names.index("main")]
    assert main.grid[2] == split_k
    assert main.args[2] is (workspace if split_k > 1 else out)
    if packed:
        pack = launches[0]
        weight = pack.args[1]
        assert main.args[1] is weight and weight.dtype == torch.float16
        assert weight.data_ptr() - workspace.data_ptr() == partials * 4 and (partials * 4) % 16 == 0
    if split_k > 1:
        reduce = launches[-1]
        assert reduce.args == (workspace, out, elements)
        assert reduce.grid == (-(-elements // reduce_block(split_k)), 1, 1)
        with pytest.raises(ValueError, match="workspace"):
            template.plan(prob, config, first, second, out, None)


@pytest.mark.parametrize("family, tile, split_k, batch, flat", [
    (Family.IGEMM, "64x128x64_w4", 8, 32, True),       # 32·28² / 8 = 3,136 positions a split
    (Family.IGEMM, "128x64x32_w4", 1, 32, False),      # 25,088 in one split: chunked and promoted
    (Family.IGEMM, "128x128x64_w8", 1, 16, True),      # 16·28² = 12,544 in one split
    (Family.GEMM1X1, "64x128x64_w4", 64, 256, True),
    (Family.GEMM1X1, "128x64x64_w4", 16, 512, False),  # 401,408 / 16 = 25,088
    (Family.IGEMM, "64x64x64_w4", 8, 32, False),       # 32 accumulator registers a thread: no flat program
    (Family.GMERGE, "64x64x64_w4", 16, 32, False),
])
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16, DType.FP32], ids=lambda d: d.value)
def test_backward_weight_runs_one_accumulator_when_every_split_is_short(family, tile, split_k, batch, flat, dtype):
    """16-bit kernels of 64 accumulator registers a thread or more carry ``flat`` (one tensor-core accumulator,
    no chunk promotion; it differs from ``main`` only there) and their launches run it when every split sums at
    most PROMOTE_POSITIONS positions; longer splits, smaller tiles and every fp32 kernel (exact dots, never
    chunked) run ``main``."""
    from tiledispatch.native import launch
    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.kernels import igemm_bwd_weight

    size, pad = ("1x1", "0x0") if family is Family.GEMM1X1 else ("3x3", "1x1")
    groups, merge = (8, 4) if family is Family.GMERGE else (1, 1)
    prob = ConvProblem.from_key(f"bwd_weight|{dtype.value}|2d|n{batch}|g{groups}|c64|k64|in28x28|"
                                f"f{size}|s1x1|d1x1|pb{pad}|pe{pad}")
    stages = 4 if tile.split("x")[2].startswith("32") else 3
    name = (f"gconv_bwd_weight_{dtype.value}_2d_{family.value}_{tile}_s{stages}_gm8_sk{split_k}_mg{merge}_"
            f"v{1 if dtype is DType.FP32 else 8}_i32")
    config = parse_kernel_name(name)
    assert is_supported(prob, config), is_supported(prob, config).reason
    template = launch.template_for(config)
    programs = template.programs(config)
    carries = dtype is not DType.FP32 and config.accumulator_registers >= 64
    assert ("flat" in programs) == carries == igemm_bwd_weight.has_flat_program(config)
    if carries:
        assert not programs["flat"].constexprs["PROMOTE"] and programs["main"].constexprs["PROMOTE"]
        assert {k: v for k, v in programs["flat"].constexprs.items() if k != "PROMOTE"} == \
            {k: v for k, v in programs["main"].constexprs.items() if k != "PROMOTE"}
    flat = flat and carries
    assert igemm_bwd_weight.uses_flat_program(prob, config) == flat
    first, second, out = (torch.empty(0) for _ in range(3))
    workspace = torch.empty(template.workspace_elements(prob, config)) if split_k > 1 else None
    launches = template.plan(prob, config, first, second, out, workspace)
    assert launches[0].program == ("flat" if flat else "main")
